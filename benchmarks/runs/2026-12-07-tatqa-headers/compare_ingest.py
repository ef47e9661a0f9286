"""Two ingests of the same TAT-QA pages side by side (before and after a change to ingest): chunks, facts and
quarantined rows, and each fact whose chunk text changed with the scales its chunk declares before and after.

    for v in old new; do  # old: a worktree of the commit before, new: this checkout
      PYTHONPATH=<v>/src python benchmarks/bench_tatqa.py --convert-only --clap-src <v>/src --out /tmp/ing/p-$v
      (cd /tmp/ing/p-$v && PYTHONPATH=<v>/src dvc repro ingest)
    done
    PYTHONPATH=src python benchmarks/runs/2026-12-07-tatqa-headers/compare_ingest.py /tmp/ing/p-old /tmp/ing/p-new
"""

from __future__ import annotations

import json
import sys

from clap.domain.quantities import scales_declared


def load(project: str) -> tuple[dict, list, int]:
    raw = f"{project}/data/raw"
    chunks = {r["chunk_id"]: r["text"] for r in map(json.loads, open(f"{raw}/chunks.jsonl", encoding="utf-8"))}
    facts = [json.loads(line) for line in open(f"{raw}/facts.jsonl", encoding="utf-8")]
    quarantined = sum(1 for _ in open(f"{raw}/ingest_quarantine.jsonl", encoding="utf-8"))
    return chunks, facts, quarantined


def main(before: str, after: str) -> int:
    (c0, f0, q0), (c1, f1, q1) = load(before), load(after)
    print(f"chunks {len(c0)} -> {len(c1)}; facts {len(f0)} -> {len(f1)}; quarantined {q0} -> {q1}")
    changed = 0
    for a, b in zip(f0, f1):
        t0, t1 = c0[a["chunk_id"]], c1[b["chunk_id"]]
        if t0 != t1:
            changed += 1
            print(f"  {a['metric'][:50]:50} gold {a['unit']!r:16} scales declared {sorted(scales_declared(t0))} -> "
                  f"{sorted(scales_declared(t1))}")
    print(f"facts whose chunk text changed: {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
