"""Structured-extraction metrics (docs/design.md §4), per sample; pure functions.

Every metric takes the parsed answer (or None), the gold target and the model's input material, so
"found in the input" means exactly what the model was shown.
"""

from __future__ import annotations

import json

from clap.domain import quantities as nz

TEXT_FIELDS = ("entity", "metric", "period", "unit")


def object_end(text: str, start: int) -> int | None:
    """Index just past the balanced JSON object opening at `text[start]`, or None while it is open.
    Braces inside strings (and escaped quotes) do not count."""
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def parse_answer(text: str) -> dict | None:
    """The first balanced JSON object in a completion that parses, or None."""
    if not isinstance(text, str):
        return None
    start = text.find("{")
    while start != -1:
        end = object_end(text, start)
        if end is None:
            return None
        try:
            obj = json.loads(text[start:end])
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)
    return None


def field_equal(name: str, pred, gold) -> bool:
    if pred is None:
        return False
    if name == "metric":
        return nz.metric_key(nz.clean_metric_label(pred)[0]) == nz.metric_key(gold)
    if name == "period":
        return nz.normalize_period(pred).lower() == nz.normalize_period(gold).lower()
    if name == "unit":
        return nz.canonical_unit(pred) == nz.canonical_unit(gold) and nz.canonical_unit(gold) is not None
    return nz.fold(pred).lower() == nz.fold(gold).lower()


def pred_quantity(pred: dict | None):
    if not pred or pred.get("value") is None:
        return None
    return nz.parse_quantity(pred.get("value"), pred.get("unit") or "")


def value_correct(pred: dict | None, gold: dict, rel_tol: float = 1e-4) -> bool:
    return nz.same_quantity(pred_quantity(pred), nz.parse_quantity(gold["value"], gold["unit"]), rel_tol)


def evidence_correct(pred: dict | None, gold: dict, source: str) -> bool:
    ev = nz.fold((pred or {}).get("evidence") or "")
    return bool(ev) and ev in nz.fold(source) and nz.value_in_text(float(gold["value"]), ev)


def _value_in_input(pred: dict | None, source: str) -> bool:
    q = pred_quantity(pred)
    if q is None:
        return False
    if nz.value_in_text(q.value, source):
        return True
    base = q.base()
    return base is not None and any(
        nz.value_in_text(base[1] / f, source) for u, (d, f) in nz.UNITS.items() if d == base[0])


def score_sample(pred: dict | None, gold: dict, source: str, weights: dict[str, float],
                 pass_rule: str = "value_and_evidence") -> dict[str, float]:
    """All per-sample metrics of docs/design.md §4 (latency is added by the caller)."""
    if pred is None:
        zero = {k: 0.0 for k in ("parse_ok", "field_accuracy", "value_accuracy", "evidence_accuracy",
                                 "hallucination_rate", "wrong_fact_rate", "target_match", "pass_rate")}
        zero["overall_score"] = 0.0
        return zero
    fields = [field_equal(f, pred.get(f), gold[f]) for f in TEXT_FIELDS]
    value_ok = value_correct(pred, gold)
    ev_ok = evidence_correct(pred, gold, source)
    ev = nz.fold(pred.get("evidence") or "")
    has_value = pred_quantity(pred) is not None
    in_input = _value_in_input(pred, source)
    hallucinated = (has_value and not in_input and not value_ok) or (bool(ev) and ev not in nz.fold(source))
    # a wrong fact is another number taken from the input (a distractor); the right number with a wrong
    # unit is a unit error, which value_accuracy and field_accuracy already count
    q, gold_value = pred_quantity(pred), float(gold["value"])
    same_number = q is not None and abs(abs(q.value) - abs(gold_value)) <= 1e-6 * max(1.0, abs(gold_value))
    wrong_fact = has_value and in_input and not value_ok and not same_number
    out = {
        "parse_ok": 1.0,
        "field_accuracy": sum(fields) / len(fields),
        "value_accuracy": float(value_ok),
        "evidence_accuracy": float(ev_ok),
        "hallucination_rate": float(hallucinated),
        "wrong_fact_rate": float(wrong_fact),
        "target_match": float(all(fields) and value_ok and ev_ok),
    }
    out["pass_rate"] = float(value_ok and ev_ok) if pass_rule == "value_and_evidence" else out["target_match"]
    out["overall_score"] = sum(w * out[k] for k, w in weights.items()) / sum(weights.values())
    return out


# What each extraction metric measures, per sample (the batch figure is the mean): docs/reference/metrics.md is
# generated from this and HIGHER_IS_BETTER.
MEANING = {
    "parse_ok": "the answer parses as the contract's JSON object",
    "field_accuracy": "share of entity, metric, period and unit equal to the gold (normalised)",
    "value_accuracy": "the value equals the gold in base units (`6,076.97 万元` = `60,769,700 元`)",
    "evidence_accuracy": "the evidence is a verbatim quote of the source that writes the gold value",
    "hallucination_rate": "a value written nowhere in the input, or evidence that is not in it",
    "wrong_fact_rate": "another number of the input (a distractor) given as the answer",
    "target_match": "every field, the value and the evidence right",
    "pass_rate": "the pass rule (`evaluate.pass_rule`): value and evidence right, or the whole target",
    "overall_score": "the weighted mean of the parts in `evaluate.weights`",
    "p95_latency_ms": "95th percentile of the answers' latency as decoded (batched, or read back from the answer store): "
                      "reported, never compared; the gate compares the replay's paired timing",
}
HIGHER_IS_BETTER = {"parse_ok": True, "field_accuracy": True, "value_accuracy": True, "evidence_accuracy": True,
                    "hallucination_rate": False, "wrong_fact_rate": False, "target_match": True,
                    "pass_rate": True, "overall_score": True, "p95_latency_ms": False}
