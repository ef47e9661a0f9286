"""The prompts the model sees, in one place: offline extraction, the application chain, decisions.

Training, evaluation and replay all build their inputs here, so the adapter is trained on exactly
the format the application sends.
"""

from __future__ import annotations

import json

_EXTRACT = ("Extract the asked fact from the source. Reply with one JSON object with keys entity, metric, period, "
            "evidence, value, unit. evidence quotes the source sentence verbatim; value is its number as written; ")


def system_extract(units: list[str]) -> str:
    """The offline extraction task's system prompt, naming the units this project's facts use (canonical spellings,
    registry order: `clap.domain.quantities.UNITS`), and `""` when some of its facts have none (a count: the model
    must be told that a number may have no unit, or it gives every number a currency); with none named, the unit is
    the one written beside the number (the decoding grammar constrains it either way)."""
    named = [u for u in units if u]
    unitless = ', or "" for a number without one' if "" in units else ""
    if named:
        return _EXTRACT + f"unit is one of {' '.join(named)}{unitless}."
    return _EXTRACT + ('unit is "": these facts have none.' if unitless else "unit is the one written beside it.")
SYSTEM_APP = ("Answer from the retrieved sources. Reply with one JSON object with keys entity, metric, period, "
              "evidence, value, unit, chunk_id, doc_id, page. evidence quotes the source sentence verbatim; value "
              "is its number as written.")
SYSTEM_DECIDE = ("Recommend how to handle the case. Reply with one JSON object with keys action, cause, "
                 "risk_focus; cause is the cause field that drives the case; risk_focus is one of delivery, cash, "
                 "customer, compliance.")
DECISION_KEYS = ("action", "cause", "risk_focus")  # the order a recommendation writes them in
RISK_FOCUS = ("delivery", "cash", "customer", "compliance")


# The order targets write them in: the quote before the number, so the model copies the value from the sentence it
# has just quoted instead of committing to a number first (the per-quote grammar, clap.evaluate.decoding, ties the two).
ANSWER_KEYS = ("entity", "metric", "period", "evidence", "value", "unit")
LOCATION_KEYS = ("chunk_id", "doc_id", "page")  # the application chain's answer adds where the evidence is


def source_block(chunk: dict) -> str:
    return f"[chunk_id={chunk['chunk_id']} doc_id={chunk['doc_id']} page={int(chunk['page'])}]\n{chunk['text']}"


def extraction_prompt(question: str, chunk: dict) -> str:
    return f"Source:\n{chunk['text']}\n\nQuestion: {question}"


def app_prompt(question: str, chunks: list[dict]) -> str:
    if not chunks:
        return f"Question: {question}"
    return "Sources:\n" + "\n\n".join(source_block(c) for c in chunks) + f"\n\nQuestion: {question}"


def decision_prompt(situation: str, causes_json: str) -> str:
    return f"Case: {situation}\nCause fields: {causes_json}"


def decision_cause_fields(prompt: str) -> list[str]:
    """The cause field names a decision prompt offers (the keys of its `Cause fields:` object)."""
    _, _, fields = prompt.rpartition("Cause fields: ")
    try:
        obj = json.loads(fields)
    except ValueError:
        return []
    return sorted(obj) if isinstance(obj, dict) else []


def target_json(fact: dict, with_location: bool = False) -> str:
    obj = {"entity": fact["entity"], "metric": fact["metric"], "period": fact["period"], "evidence": fact["evidence"],
           "value": json_number(fact["value"]), "unit": fact["unit"]}
    if with_location:
        obj.update(chunk_id=fact["chunk_id"], doc_id=fact["doc_id"], page=int(fact["page"]))
    return json.dumps(obj, ensure_ascii=False)


def json_number(v: float) -> int | float:
    """A number as a target writes it: 7.0 → 7, 7.5 → 7.5."""
    return int(v) if float(v).is_integer() else float(v)


def messages(system: str, user: str, assistant: str | None = None) -> list[dict]:
    out = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if assistant is not None:
        out.append({"role": "assistant", "content": assistant})
    return out
