"""Fixtures of the human-evaluation tests: a small project tree with evaluation answers of two models."""

import copy
import json

import pytest

from clap.io import write_jsonl

N_ITEMS = 25


@pytest.fixture()
def project(tmp_path, params):
    """A project tree with 25 evaluation questions answered by the base model and the candidate."""
    root = tmp_path / "proj"
    rows, records = [], []
    for i in range(N_ITEMS):
        sid = f"s{i:03d}"
        rows.append({"sample_id": sid, "record_id": f"f{i:06d}", "batch": "b1", "source": f"Report, page 1. Sales were {i}.",
                     "question": f"What were the sales in case {i}?", "target": json.dumps({"value": i})})
        for model in ("baseline", "candidate"):
            records.append({"sample_id": sid, "model": model, "output": f'{{"value": {i if model == "candidate" else -1}}}',
                            "pass_rate": float(model == "candidate"), "overall_score": 0.9 if model == "candidate" else 0.1})
    write_jsonl(root / "data/materialized/b1/sft_eval.jsonl", rows)
    write_jsonl(root / "data/eval/b1/records.jsonl", records)
    (root / "models/sft/adapter").mkdir(parents=True)
    (root / "models/sft/adapter/manifest.json").write_text('{"files": {}}')
    cfg = copy.deepcopy(params)
    cfg.data = cfg.data.model_copy(update={"batches": ["b1"]})
    cfg.human = cfg.human.model_copy(update={"items_per_batch": N_ITEMS})
    return root, cfg


def annotation(aid, rater, usefulness, correct, cancelled=False):
    return {"id": aid, "completed_by": {"id": rater, "email": f"r{rater}@x"}, "was_cancelled": cancelled,
            "result": [{"from_name": s, "to_name": "answer", "type": "rating", "value": {"rating": usefulness}}
                       for s in ("usefulness", "safety", "fluency")]
            + [{"from_name": "correctness", "to_name": "answer", "type": "choices",
                "value": {"choices": ["correct" if correct else "incorrect"]}}]}


