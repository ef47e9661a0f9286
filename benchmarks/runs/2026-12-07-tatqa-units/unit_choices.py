"""What the answer grammar lets a model say of each fact's unit on the real pages, and whether the page's declared
scale is the annotators' — every fact of a TAT-QA project, no model run.

    PYTHONPATH=<checkout>/src python benchmarks/runs/2026-12-07-tatqa-units/unit_choices.py <project after bench_tatqa.py>

For each fact of `data/raw/facts.jsonl`, the answer schema `clap.evaluate.decoding.answer_schema` builds for its chunk:
the units offered with the fact's value when its evidence line is quoted, whether the fact's unit is among them
(reachable), and how many there are. Then, for facts whose chunk declares a scale (`scales_declared`), whether the
declared scale is the one the annotators gave the amount (not computed for a checkout without `scales_declared`). Prints one
JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clap.domain import quantities
from clap.domain.quantities import UNITS, parse_quantity
from clap.evaluate.decoding import answer_schema

# a checkout before the scale rule has no `scales_declared`: its figures are printed without the declared-scale part
scales_declared = getattr(quantities, "scales_declared", lambda text: frozenset())


def main() -> int:
    project = Path(sys.argv[1])
    chunks = {}
    for line in (project / "data/raw/chunks.jsonl").read_text(encoding="utf-8").splitlines():
        c = json.loads(line)
        chunks[c["chunk_id"]] = c
    facts = [json.loads(x) for x in (project / "data/raw/facts.jsonl").read_text(encoding="utf-8").splitlines()]
    rows, agree, disagree = [], [], []
    for f in facts:
        c, unit = chunks[f["chunk_id"]], f["unit"] or ""
        value = parse_quantity(f["value"], unit).value
        schema = answer_schema([{"text": c["text"]}], with_location=False)
        offered = set()
        for alt in schema.get("anyOf", [schema]):
            p = alt["properties"]
            if p["evidence"].get("const") == f["evidence"] and any(abs(abs(v) - abs(value)) < 1e-9
                                                                    for v in p["value"].get("enum", [])):
                offered |= set(p["unit"]["enum"])
        rows.append({"record_id": f["record_id"], "unit": unit, "reachable": unit in offered, "offered": len(offered)})
        scales = scales_declared(c["text"])
        dim, factor = UNITS[unit]
        if scales and dim not in ("none", "ratio", "shares", "mass", "count", "days") and "per_share" not in dim:
            (agree if factor in scales else disagree).append(f["record_id"])
    n = len(rows)
    print(json.dumps({
        "facts": n,
        "unit_reachable": sum(r["reachable"] for r in rows),
        "unreachable": [r["record_id"] for r in rows if not r["reachable"]],
        "units_offered_mean": round(sum(r["offered"] for r in rows) / n, 2),
        "one_unit_offered": sum(r["offered"] == 1 for r in rows),
        "declared_scale_is_the_annotators": len(agree),
        "declared_scale_is_not": disagree,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
