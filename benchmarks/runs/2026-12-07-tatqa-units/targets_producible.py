"""Whether every materialized target's quote, value and unit are ones the grammar offers for its own source — the
check that a decoding rule takes no right answer away, no model run.

    PYTHONPATH=<checkout>/src python benchmarks/runs/2026-12-07-tatqa-units/targets_producible.py <project>

Reads `data/materialized/*/sft_{train,eval}.jsonl` (each row's `source` and `target`), builds
`clap.evaluate.decoding.answer_schema` for the source (per chunk for a row in the application's form) and looks for an alternative whose evidence is the target's
with its value and unit among those offered (entity, metric and period are the model's to write: a label longer than
the schema's bound is another matter). Prints the counts and the targets not offered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clap.evaluate.decoding import answer_schema


def main() -> int:
    project = Path(sys.argv[1])
    total, refused = 0, []
    for path in sorted(project.glob("data/materialized/*/sft_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if not row.get("source") or "\"evidence\"" not in (row.get("target") or ""):
                continue
            total += 1
            target = json.loads(row["target"])
            # an application-form row's source is its retrieved chunks joined by a blank line; replay builds the
            # schema per chunk, evaluation from the one gold chunk
            texts = row["source"].split("\n\n") if "chunk_id" in target else [row["source"]]
            schema = answer_schema([{"text": t} for t in texts], with_location=False)
            offered = any(p["evidence"].get("const") == target["evidence"]
                          and target["value"] in p["value"].get("enum", []) and target["unit"] in p["unit"]["enum"]
                          for p in (alt["properties"] for alt in schema.get("anyOf", [schema])))
            if not offered:
                refused.append({"file": str(path.relative_to(project)), "record_id": row.get("record_id"),
                                "target": json.loads(row["target"])})
    print(json.dumps({"targets": total, "admitted": total - len(refused), "refused": refused}, indent=2,
                     ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
