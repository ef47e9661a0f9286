"""The replay's arms and metrics, defined once (docs/design.md §4): what `clap replay` runs and scores, what the
canary's traffic scores a request by, and what the gate and the report read.

A: base + RAG, B: adapter + RAG, C: base alone, D: adapter alone; P: the adapter in prod + RAG.
"""

from __future__ import annotations

from clap.evaluate.metrics import field_equal, value_correct

ARMS = {"A": (False, True), "B": (True, True), "C": (False, False), "D": (True, False)}  # adapter, rag
PROD_ARM = {"P": ("prod", True)}  # the adapter in prod + RAG: the champion the candidate must beat in the application
CONTRASTS = {"B-A": ("A", "B"), "D-C": ("C", "D"), "B-P": ("P", "B")}  # (reference, new) arm
METRICS = ["answer_json_parse", "value_exact", "period_exact", "core_fields_exact", "evidence_chunk_exact",
           "evidence_doc_page_exact", "retrieved_target_chunk", "retrieved_target_doc_page"]
ANSWER_METRICS = METRICS[:6]  # scored from the answer; the last two score the retriever, the same for every arm


def score_case(pred: dict | None, gold: dict, retrieved: list[dict]) -> dict[str, float]:
    """Per-case replay metrics; pure."""
    got = {c["chunk_id"] for c in retrieved}
    pages = {(c["doc_id"], int(c["page"])) for c in retrieved}
    out = {"retrieved_target_chunk": float(gold["chunk_id"] in got),
           "retrieved_target_doc_page": float((gold["doc_id"], int(gold["page"])) in pages)}
    if pred is None:
        return {m: 0.0 for m in ANSWER_METRICS} | out
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
