"""How a replay case is scored (docs/design.md §4): what `clap replay` records per arm and the canary's traffic
scores a request by. The arms and metric names are `clap.domain.names`'."""

from __future__ import annotations

from clap.domain.names import REPLAY_ANSWER_METRICS
from clap.evaluate.metrics import field_equal, value_correct


def score_case(pred: dict | None, gold: dict, retrieved: list[dict]) -> dict[str, float]:
    """Per-case replay metrics; pure."""
    got = {c["chunk_id"] for c in retrieved}
    pages = {(c["doc_id"], int(c["page"])) for c in retrieved}
    out = {"retrieved_target_chunk": float(gold["chunk_id"] in got),
           "retrieved_target_doc_page": float((gold["doc_id"], int(gold["page"])) in pages)}
    if pred is None:
        return {m: 0.0 for m in REPLAY_ANSWER_METRICS} | out
    value_ok = value_correct(pred, gold)
    core = value_ok and all(field_equal(f, pred.get(f), gold[f]) for f in ("entity", "metric", "period", "unit"))
    try:
        page_ok = int(pred.get("page")) == int(gold["page"])
    except (TypeError, ValueError):
        page_ok = False
    return {"answer_json_parse": 1.0, "value_exact": float(value_ok),
            "period_exact": float(field_equal("period", pred.get("period"), gold["period"])),
            "core_fields_exact": float(core), "evidence_chunk_exact": float(pred.get("chunk_id") == gold["chunk_id"]),
            "evidence_doc_page_exact": float(pred.get("doc_id") == gold["doc_id"] and page_ok)} | out
