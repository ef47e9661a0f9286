"""The loop's history, read back from git: one row per committed gate decision.

    clap timeline              (also printed at the end of `clap demo`)

A round is a commit that changed `metrics/gate.json`. For each, the batches it trained on (its
params.yaml), the batches admission refused and by which rule (`data/admission/`), the baseline M
it was judged against (`release/prod.json` at that commit: the prod version, or the base model),
the candidate − M overall delta pooled over batches with the range of the per-batch CIs, the
decision, the chain candidate it ships (SFT, SFT→DPO or SFT→GRPO, with each one's verdict), what it ships on the
agent track (the bundle's `tracks`: the agent adapter the gate passed, or prod's kept when it held the new one), the
human verdict committed beside it (`metrics/human.json`: the usefulness delta against its reference and
the raters' agreement), and the release tags on the commit (GTO's format, read through `clap.release.registry`).
Nothing here is recomputed: every figure is the committed evidence, so the table is what a reviewer sees.
A commit that brings back an earlier commit's gate record (a rollback restoring a release's evidence) is
not a new decision; the rollback itself is a row of its own, placed by the time of its prod tag. So is the
end of a canary (`clap canary conclude`): promoted to prod or rolled back, with the analysis' reasons its
tag message carries.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import yaml

from clap import paths, vcs
from clap.evaluate.intervals import ci_text
from clap.io import git_show, loads_strict
from clap.release import registry as release


def _show(root: Path, commit: str, path: Path | str) -> str | None:
    return git_show(root, commit, path)[0]


def _json_at(root: Path, commit: str, path: Path | str) -> dict | None:
    text = _show(root, commit, path)
    return loads_strict(text) if text else None


def rounds(root: Path, since: str | None = None) -> list[dict]:
    """Every committed gate decision, oldest first (see the module docstring for the fields); `since`: only
    those committed after that revision (`clap demo` shows its own rounds, not the history it started from)."""
    root = Path(root)
    span = [f"{since}..HEAD"] if since else []
    log = vcs.git(root, "log", "--reverse", "--format=%H %ct", *span, "--", paths.GATE.as_posix())
    commits = [line.split() for line in log.stdout.splitlines()] if log.returncode == 0 else []
    events = release.assignments(root)  # one `git rev-list` per tag: read once, shared with `stage_events`
    undone = stage_events(root, events)
    if since:
        inside = {c[:10] for c in vcs.git(root, "rev-list", *span).stdout.split()}
        undone = [r for r in undone if r["commit"] in inside]  # rows carry 10-character commits
    event_tags = {t for r in undone for t in r["tags"]}
    tags: dict[str, list[str]] = {}
    for version, commit in release.versions(root).items():
        tags.setdefault(commit, []).append(f"{release.ARTIFACT}@{version}")
    for a in events:
        if a["tag"] not in event_tags:
            tags.setdefault(a["commit"], []).append(a["tag"])
    out, seen = [], set()
    for commit, when in commits:
        gate_text = _show(root, commit, paths.GATE) or ""
        if gate_text in seen:
            continue
        seen.add(gate_text)
        gate = loads_strict(gate_text) if gate_text else {}
        params = yaml.safe_load(_show(root, commit, "params.yaml") or "{}") or {}
        batches = (params.get("data") or {}).get("batches", [])
        refused = {}
        for b in batches:
            adm = _json_at(root, commit, paths.admission(b)) or {}
            if adm.get("decision") in ("repair", "block"):
                failed = [c["name"] for c in adm.get("checks", []) if not c.get("passed", True)]
                refused[b] = f"{adm['decision']} ({', '.join(failed) or 'see admission record'})"
        prod = (_json_at(root, commit, paths.PROD_POINTER) or {}).get("version")
        deltas = [ev.get("deltas_vs_prod") or ev.get("deltas") for b in batches
                  if (ev := _json_at(root, commit, paths.eval_metrics(b))) and b not in refused]
        overall = [d["overall_score"] for d in deltas if d and d.get("overall_score", {}).get("delta") is not None]
        out.append({"round": len(out) + 1, "time": int(when), "commit": commit[:10], "batches": batches, "refused": refused,
                    "baseline": f"prod {prod}" if prod else "base",
                    "delta": round(statistics.fmean(o["delta"] for o in overall), 4) if overall else None,
                    "ci_low_min": min((o["ci_low"] for o in overall), default=None),
                    "ci_high_max": max((o["ci_high"] for o in overall), default=None),
                    "decision": gate.get("decision"), "candidate": gate.get("candidate", "sft"),
                    "chain": {c: v["decision"] for c, v in (gate.get("candidates") or {}).items()},
                    "agent": agent_track((_json_at(root, commit, paths.BUNDLE) or {}).get("tracks") or {}),
                    "evidence": human_verdict(_json_at(root, commit, paths.HUMAN_METRICS)), "tags": tags.get(commit, [])})
    return sorted(out + undone, key=lambda r: r["time"])


def agent_track(tracks: dict) -> str | None:
    """What the round's release ships on the agent track, from its bundle's `tracks`: the agent adapter the gate
    passed, prod's kept when the gate held the new one, or none; None when the round judged no agent adapter."""
    agent = tracks.get("agent") or {}
    if not agent.get("candidate"):
        return None
    if agent.get("ships"):
        return f"agent: {agent['ships']} {agent['decision']}"
    kept = f"prod's from {agent['carried_from']} stays" if agent.get("carried_from") else "none ships"
    return f"agent: {agent['candidate']} {agent['decision']}, {kept}"


def human_verdict(human: dict | None) -> str | None:
    """`metrics/human.json` in one phrase: candidate − reference usefulness with its CI, and the raters' α."""
    if not human or not human.get("imported"):
        return None
    ref = human.get("reference", "base")
    d = (human.get("deltas", {}).get(f"candidate-{ref}") or {}).get("usefulness") or {}
    alpha = (human.get("agreement", {}).get("usefulness") or {}).get("krippendorff_alpha")
    use = "usefulness not compared" if d.get("delta") is None else \
        f"usefulness {ci_text(d, digits=2)} vs {ref}"
    return f"{use}, α {alpha:.2f}" if alpha is not None else use


def stage_events(root: Path, events: list[dict] | None = None) -> list[dict]:
    """The registry's events that are not gate decisions, as timeline rows, from their tag messages: each
    prod assignment `clap rollback` made, and each canary `clap canary conclude` ended (promoted to prod
    or rolled back). `events`: `release.assignments(root)` when the caller has it already."""
    events = release.assignments(root) if events is None else events
    listing = vcs.git(root, "for-each-ref", "refs/tags",
                      "--format=%(refname:short)%00%(creatordate:unix)%00%(contents)%01").stdout
    messages = {tag.strip(): (int(stamp), message) for tag, stamp, message in
                (entry.split("\0") for entry in listing.split("\1") if entry.strip())}
    row = {"batches": [], "refused": {}, "delta": None, "ci_low_min": None, "ci_high_max": None, "chain": {},
           "agent": None, "evidence": None}
    out = []
    for a in events:
        stamp, message = messages[a["tag"]]
        if a["stage"] == "prod" and "rollback from " in message:
            was = message.split("rollback from ", 1)[1].split()[0]
            baseline = "base" if was == release.BASE else f"prod {was}"
            if a["action"] == "assign":
                out.append(row | {"round": "rollback", "time": stamp, "commit": a["commit"][:10], "baseline": baseline,
                                  "decision": "rollback", "candidate": f"restores {a['version']}", "tags": [a["tag"]]})
            elif out and out[-1]["candidate"] == "base model" and out[-1]["baseline"] == baseline:
                out[-1]["tags"].append(a["tag"])  # one withdrawal unassigns every version holding prod
            else:
                out.append(row | {"round": "rollback", "time": stamp, "commit": a["commit"][:10], "baseline": baseline,
                                  "decision": "rollback", "candidate": "base model", "tags": [a["tag"]]})
        elif a["stage"] == "canary" and a["action"] == "unassign" and "canary analysis " in message:
            verdict, _, why = message.split("canary analysis ", 1)[1].partition(": ")
            promoted = [e["tag"] for e in events if e["stage"] == "prod" and e["action"] == "assign"
                        and e["commit"] == a["commit"] and e["n"] == a["n"] - 1]
            out.append(row | {"round": "canary", "time": stamp, "commit": a["commit"][:10], "baseline": "prod",
                              "decision": "promote" if verdict == "successful" else "rollback",
                              "candidate": f"canary {a['version']} {verdict}",
                              "evidence": why.strip() or None,
                              "tags": promoted + [a["tag"]]})
    return out


def table(rows: list[dict]):
    from rich.table import Table

    t = Table(title="the loop, round by round (committed evidence)")
    for c in ("round", "commit", "data", "admission refused", "judged against", "Δ overall [batch CIs]",
              "decision", "ships (chain verdicts)", "human / canary evidence", "release tags"):
        t.add_column(c, overflow="fold")  # a tag or a rule name is one word: folded, never cut
    for r in rows:
        delta = "—" if r["delta"] is None else f"{r['delta']:+.3f} [{r['ci_low_min']:+.3f} … {r['ci_high_max']:+.3f}]"
        t.add_row(str(r["round"]), r["commit"], ",".join(r["batches"]),
                  "; ".join(f"{b}: {why}" for b, why in r["refused"].items()) or "—", r["baseline"], delta,
                  str(r["decision"]).upper(),
                  r["candidate"] + (f" ({', '.join(f'{c} {d}' for c, d in r['chain'].items())})" if r["chain"] else "")
                  + (f"; {r['agent']}" if r.get("agent") else ""),
                  r["evidence"] or "—", " ".join(r["tags"]) or "—")
    return t
