"""Which recorded answers `generate.evidence_names_metric` would change, without a model: each answer of a finished
project's held-out evaluation (base, prod and candidate) is checked with `decoding.answer_naming_metric`, the rule
vLLM applies after the fact. An answer it changes is asked again under the narrowed schema; a greedy model then
picks among the quotes left, so the answer can only be right if the gold quote is among them.

    PYTHONPATH=<checkout>/src python benchmarks/runs/2026-12-07-tatqa-metric/narrowing_on_recorded.py <project>...

Prints, per project and batch, how many answers stand and how many change, and for each change whether the answer
was right before and whether the gold quote is among those left.
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

from clap.evaluate.decoding import answer_naming_metric, answer_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_tatqa import held_out  # noqa: E402


def main(projects: list[str]) -> int:
    for project in projects:
        samples = held_out(Path(project))
        for path in sorted(glob.glob(f"{project}/data/eval/*/records.jsonl")):
            counts = {"stand": 0, "change": 0, "right before": 0, "gold left": 0}
            for line in open(path, encoding="utf-8"):
                record = json.loads(line)
                sample = samples.get(record["sample_id"])
                if sample is None:
                    continue
                narrowed = answer_naming_metric(answer_schema([{"text": sample["source"]}], with_location=False),
                                                record["output"])
                if narrowed is None:
                    counts["stand"] += 1
                    continue
                gold = json.loads(sample["target"])["evidence"]
                left = {a["properties"]["evidence"]["const"] for a in narrowed.get("anyOf", [narrowed])}
                counts["change"] += 1
                counts["right before"] += int(bool(record["value_accuracy"]))
                counts["gold left"] += int(gold in left)
                print(f"  {record['model']:9} {'right' if record['value_accuracy'] else 'wrong'} before, gold among "
                      f"the {len(left)} left: {gold in left} | metric {record['parsed']['metric']!r} | quoted "
                      f"{record['parsed']['evidence'][:60]!r}")
            print(project, path.split("/")[-2], counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
