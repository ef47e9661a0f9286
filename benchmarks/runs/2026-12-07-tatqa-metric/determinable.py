"""How many held-out facts a page's text alone decides the unit of, and the candidate's value accuracy on each group:
- an amount in a currency whose chunk declares no scale (`scales_declared` empty): the annotators read the scale
  from the PDF, and the grammar offers every scale;
- the gold unit not among those the grammar offers (the annotators' scale disagrees with the page's);
- the rest: the page writes the unit beside the number, declares the scale, or the number has none.

    PYTHONPATH=<checkout>/src python benchmarks/runs/2026-12-07-tatqa-metric/determinable.py <project>...
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from narrowing_on_recorded import held_out  # noqa: E402

from bench_tatqa import UNIT_GROUPS, unit_group  # noqa: E402


def main(projects: list[str]) -> int:
    for project in projects:
        samples = held_out(project)
        right = {}
        for path in glob.glob(f"{project}/data/eval/*/records.jsonl"):
            for line in open(path, encoding="utf-8"):
                record = json.loads(line)
                if record["model"] == "candidate":
                    right[record["sample_id"]] = record["value_accuracy"]
        groups: dict[str, list[float]] = {g: [] for g in UNIT_GROUPS}
        for sid, sample in samples.items():
            target = json.loads(sample["target"])
            group = unit_group(sample["source"], target["evidence"], target["value"], target["unit"])
            groups[group].append(right.get(sid, float("nan")))
        print(project, {g: f"{len(v)} facts, candidate value {sum(v) / len(v):.2f}" if v else "0 facts"
                        for g, v in groups.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
