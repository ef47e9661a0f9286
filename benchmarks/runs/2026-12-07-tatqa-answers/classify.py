"""Each held-out answer of a TAT-QA round, read one by one: what went wrong where the value is not right.

    python benchmarks/runs/2026-12-07-tatqa-answers/classify.py <project> [--model candidate]

Reads the evaluation records `clap evaluate` wrote (`data/eval/<batch>/*.jsonl`), prints one line per answer and the
counts per class:
- right: the value equals the gold in base units;
- right cell, other unit: the quote is the gold cell and the number is the gold's, the unit another (a scale error);
- same row, other column: the quote is the gold row's label with another column's number;
- other row: a table line of another row;
- paragraph: a sentence that is not a table line;
- no answer: nothing parsed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def label(line: str) -> str:
    return line.split(" | ")[0].strip() if " | " in line else ""


def classify(rec: dict, gold: dict) -> str:
    p = rec.get("parsed")
    if not p:
        return "no answer"
    if rec["value_accuracy"] == 1.0:
        return "right"
    ev, gev = (p.get("evidence") or "").strip(), gold["evidence"].strip()
    if ev == gev:
        return "right cell, other unit"
    if " | " not in ev:
        return "paragraph"
    return "same row, other column" if label(ev) == label(gev) else "other row"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", type=Path)
    ap.add_argument("--model", default="candidate")
    a = ap.parse_args()
    gold = {}
    for f in sorted((a.project / "data" / "materialized").glob("*/sft_eval.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            s = json.loads(line)
            gold[s["sample_id"]] = {**json.loads(s["target"]), "question": s["question"]}
    counts: Counter = Counter()
    for f in sorted((a.project / "data" / "eval").glob("*/*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("model") != a.model or rec.get("sample_id") not in gold:
                continue
            g = gold[rec["sample_id"]]
            cls = classify(rec, g)
            counts[cls] += 1
            p = rec.get("parsed") or {}
            print(f"{cls:24} | Q: {g['question']}\n{'':24} | gold: {g['evidence']} = {g['value']} {g['unit']!r}"
                  f"\n{'':24} | said: {p.get('evidence')} = {p.get('value')} {p.get('unit')!r} (period {p.get('period')!r})")
    print(json.dumps(dict(counts), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
