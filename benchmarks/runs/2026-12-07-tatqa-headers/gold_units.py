"""Every fact of the TAT-QA conversion, grouped by whether its page's text decides its unit — the ceiling a model
that reads only the page can reach, over all facts rather than one split's held-out set:
- an amount in a currency whose chunk declares no scale: the annotators read the scale from the PDF, which TAT-QA's
  table does not carry, and the answer grammar offers every scale (a model can only guess);
- the gold unit is not among those the grammar offers: the page's text contradicts the annotators' unit (`(in
  thousand NT dollars)` where they gave none; `Emissions reported in tonnes CO2e` over a count they gave no unit);
- the rest: the page writes the unit beside the number, declares the table's scale, or the number has none.

    python benchmarks/bench_tatqa.py --convert-only --out /tmp/tq-conv && (cd /tmp/tq-conv && dvc repro ingest)
    PYTHONPATH=<checkout>/src python benchmarks/runs/2026-12-07-tatqa-headers/gold_units.py /tmp/tq-conv

Prints the count of each group and each fact outside the first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clap.domain.quantities import canonical_unit, parse_quantity

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_tatqa import UNIT_GROUPS, unit_group  # noqa: E402


def main(project: str) -> int:
    chunks = {}
    for line in open(f"{project}/data/raw/chunks.jsonl", encoding="utf-8"):
        row = json.loads(line)
        chunks[row["chunk_id"]] = row["text"]
    groups: dict[str, list[dict]] = {g: [] for g in UNIT_GROUPS}
    for line in open(f"{project}/data/raw/facts.jsonl", encoding="utf-8"):
        fact = json.loads(line)
        unit = canonical_unit(fact["unit"] or "")  # ingest's facts keep the table's spelling, and null for none
        value = parse_quantity(fact["value"], unit).value
        groups[unit_group(chunks[fact["chunk_id"]], fact["evidence"], value, unit)].append(fact)
    print(json.dumps({g: len(v) for g, v in groups.items()}))
    for g in UNIT_GROUPS[1:]:
        for fact in groups[g]:
            print(f"{g:22} | {fact['evidence'][:70]:70} | gold {fact['unit']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
