"""admit: the admission gate (docs/design.md §5) for one materialized batch.

    clap admit b1              (DVC stage `admit@b1`, writes data/admission/b1.json)

Decision order: any train/eval overlap → `block`; too many unverifiable facts, or too many targets
whose quoted evidence writes the value with another unit (an export with shifted units) → `repair`; too few
train samples → `block`; weak preference data (ranking pass rate, reward margin, reward spread) →
`sft_only`; otherwise `admit` (SFT, DPO and GRPO). Every check is written with its value and
threshold, passed or not, so a reviewer sees why.
"""

from __future__ import annotations

import json
from pathlib import Path

from clap import paths
from clap.config import Admit, Params
from clap.data.admission import decide
from clap.domain.contracts import AdmissionRecord
from clap.domain.prompts import SYSTEM_DECIDE
from clap.io import read_json, read_jsonl, require_inputs, write_json
from clap.stages.spec import StageSpec


def run(section: Admit, batch_dir: Path, out: Path) -> AdmissionRecord:
    """Admit the batch in `batch_dir` (or not) for each trainer under the `admit` rules; the record goes to `out`."""
    batch_dir = Path(batch_dir)
    require_inputs([(batch_dir / f, f"dvc repro materialize@{batch_dir.name}")
                    for f in ("data_quality.json", "dpo_pairs.jsonl", "grpo_groups.jsonl")])
    targets = [json.loads(r["target"]) for f in ("sft_train.jsonl", "sft_eval.jsonl")
               if (batch_dir / f).exists() for r in read_jsonl(batch_dir / f)
               if r["system"] != SYSTEM_DECIDE]  # extraction targets; decision rows carry no unit
    record = decide(read_json(batch_dir / "data_quality.json"), read_jsonl(batch_dir / "dpo_pairs.jsonl"),
                    read_jsonl(batch_dir / "grpo_groups.jsonl"), section, targets)
    write_json(out, record.model_dump())
    return record


def main(params: Params, batch: str, materialized: Path = paths.MATERIALIZED, out: Path | None = None) -> list[str]:
    """Admission gate for one batch: admit / sft_only / repair / block, with every check."""
    rec = run(params.admit, materialized / batch, out or paths.admission(batch))
    return [f"{batch}: {rec.decision}" + (f" ({'; '.join(rec.reasons)})" if rec.reasons else "")]


STAGE = StageSpec(name="admit", group="data", main=main)
