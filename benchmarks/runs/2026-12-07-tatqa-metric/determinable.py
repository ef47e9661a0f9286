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

from clap.domain.quantities import in_a_currency, scales_declared
from clap.evaluate.decoding import answer_schema

sys.path.insert(0, str(Path(__file__).parent))
from narrowing_on_recorded import held_out  # noqa: E402


def offered_units(source: str, evidence: str, value) -> list[str]:
    schema = answer_schema([{"text": source}], with_location=False)
    units = set()
    for alt in schema.get("anyOf", [schema]):
        props = alt["properties"]
        if props["evidence"].get("const") == evidence and value in props["value"].get("enum", []):
            units |= set(props["unit"]["enum"])
    return sorted(units)


def main(projects: list[str]) -> int:
    for project in projects:
        samples = held_out(project)
        right = {}
        for path in glob.glob(f"{project}/data/eval/*/records.jsonl"):
            for line in open(path, encoding="utf-8"):
                record = json.loads(line)
                if record["model"] == "candidate":
                    right[record["sample_id"]] = record["value_accuracy"]
        groups: dict[str, list[float]] = {"the page decides": [], "scale not on the page": [],
                                          "gold unit not offered": []}
        for sid, sample in samples.items():
            target = json.loads(sample["target"])
            units = offered_units(sample["source"], target["evidence"], target["value"])
            group = ("gold unit not offered" if target["unit"] not in units
                     else "scale not on the page" if in_a_currency(target["unit"]) and "/" not in target["unit"]
                     and not scales_declared(sample["source"]) else "the page decides")
            groups[group].append(right.get(sid, float("nan")))
        print(project, {g: f"{len(v)} facts, candidate value {sum(v) / len(v):.2f}" if v else "0 facts"
                        for g, v in groups.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
