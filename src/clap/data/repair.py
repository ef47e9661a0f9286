"""The repair queue (the data flywheel of docs/design.md §1 and §6).

    clap repair-queue          (DVC stage `repair_queue`, writes repair/queue.jsonl)

Collects, each with its reason: rows quarantined by assetize, unverifiable facts held back by
materialize, evaluation samples the candidate regressed on, replay cases the adapter missed, agent episodes the agent
adapter failed (with why: wrong answer, unsupported answer, no finish, invalid turns), and — from production —
the flywheel inbox (`feedback/production.jsonl`): answers people rated low or incorrect (`clap human
import`) and canary requests that failed (`clap canary analyze`).
A person (or a fixing job) writes corrected fact rows, in the raw facts contract, to
`repair/fixed/*.jsonl`; the next `assetize` takes them back in (a repaired row replaces the row
with the same record_id) and counts them in its report as `repaired_rows_in`.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.io import read_jsonl, write_jsonl

PRODUCTION_SOURCES = ("human_flagged", "canary_failed")


def replace_in_inbox(inbox: Path, rows: list[dict], origin: str) -> None:
    """Put `rows` in the flywheel inbox in place of the earlier rows of the same `origin` (one human
    export, one canary version), keeping every other row: importing an export twice, or re-analysing a
    canary, does not queue its cases twice."""
    kept = [r for r in (read_jsonl(inbox) if Path(inbox).exists() else []) if r.get("origin") != origin]
    write_jsonl(inbox, kept + [r | {"origin": origin} for r in rows])


def run(root: Path, out: Path) -> dict[str, int]:
    root = Path(root)
    queue: list[dict] = []

    def add(source: str, rows: list[dict], reason_key: str = "reason") -> None:
        for r in rows:
            queue.append({"source": source, "reason": r.get(reason_key) or r.get("rule"), "item": r})

    if (q := root / paths.ASSETS / "quarantine.jsonl").exists():
        add("assetize_quarantine", read_jsonl(q), "rule")
    for p in sorted(root.glob(f"{paths.MATERIALIZED}/*/repair.jsonl")):
        add("unverifiable", read_jsonl(p))
    for p in sorted(root.glob(f"{paths.EVAL}/*/regressed_samples.jsonl")):
        add("regressed_sample", read_jsonl(p))
    if (f := root / paths.REPLAY / "failed_cases.jsonl").exists():
        add("failed_replay_case", read_jsonl(f))
    if (f := root / paths.AGENT_EVAL / "failed_episodes.jsonl").exists():
        add("failed_agent_episode", read_jsonl(f))
    if (inbox := root / paths.INBOX).exists():
        for row in read_jsonl(inbox):
            queue.append({"source": row["source"], "reason": row.get("reason"), "item": row})
    write_jsonl(out, queue)
    counts: dict[str, int] = {}
    for item in queue:
        counts[item["source"]] = counts.get(item["source"], 0) + 1
    return counts
