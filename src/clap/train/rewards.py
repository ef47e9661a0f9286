"""Reward functions for preference data and GRPO; pure, one concern each, composed by weights.

Extraction rewards score a completion against the gold target and the source it was given;
decision rewards score a recommendation against the original decision record.
"""

from __future__ import annotations

from clap.domain import prompts
from clap.domain import quantities as nz
from clap.evaluate.metrics import evidence_correct, field_equal, parse_answer, value_correct

DECISION_FIELDS = prompts.DECISION_KEYS


def format_reward(completion: str, required=prompts.ANSWER_KEYS) -> float:
    """1 for a JSON object with every required field, 0.5 for JSON missing some, 0 otherwise."""
    obj = parse_answer(completion)
    if obj is None:
        return 0.0
    return 1.0 if all(k in obj for k in required) else 0.5


def outcome_reward(completion: str, gold: dict, value_rel_tol: float = 1e-3) -> float:
    """Half for the value (base units, within tolerance), half shared by entity/metric/period/unit."""
    obj = parse_answer(completion)
    if obj is None:
        return 0.0
    fields = sum(field_equal(f, obj.get(f), gold[f]) for f in ("entity", "metric", "period", "unit")) / 4
    return 0.5 * float(value_correct(obj, gold, value_rel_tol)) + 0.5 * fields


def grounding_reward(completion: str, gold: dict, source: str) -> float:
    """1 when the evidence is a verbatim quote of the source holding the value; 0.5 quote only; 0 else."""
    obj = parse_answer(completion)
    if obj is None:
        return 0.0
    if evidence_correct(obj, gold, source):
        return 1.0
    ev = nz.fold(obj.get("evidence") or "")
    return 0.5 if ev and ev in nz.fold(source) else 0.0


def efficiency_reward(completion: str, max_chars: int = 400) -> float:
    """1 up to max_chars, then linearly down to 0 at twice that length."""
    n = len(completion or "")
    return 1.0 if n <= max_chars else max(0.0, 1.0 - (n - max_chars) / max_chars)


def extraction_reward(completion: str, gold: dict, source: str, weights: dict, value_rel_tol: float = 1e-3,
                      max_chars: int = 400) -> float:
    parts = {"outcome": outcome_reward(completion, gold, value_rel_tol), "format": format_reward(completion),
             "grounding": grounding_reward(completion, gold, source),
             "efficiency": efficiency_reward(completion, max_chars)}
    return sum(weights[k] * parts[k] for k in parts) / sum(weights.values())


def decision_hits(answer: dict | None, reference: dict) -> dict[str, bool]:
    """Which of the recommendation's fields match the reference: action and risk focus case- and
    width-folded, cause exactly (a field name)."""
    answer = answer or {}
    return {"action": _folded(answer.get("action")) == _folded(reference["action"]),
            "cause": answer.get("cause") == reference["cause"],
            "risk_focus": _folded(answer.get("risk_focus")) == _folded(reference["risk_focus"])}


def decision_parts(completion: str, reference: dict, max_chars: int = 400) -> dict[str, float]:
    """The decision reward's parts. outcome: the action; grounding: the cited cause (half) and the
    risk focus (half); format: JSON with every key (0.5 with some); efficiency: length."""
    obj = parse_answer(completion)
    fmt = 0.0 if obj is None else (1.0 if all(k in obj for k in DECISION_FIELDS) else 0.5)
    hits = decision_hits(obj, reference)
    return {"outcome": float(hits["action"]), "format": fmt,
            "grounding": 0.5 * hits["cause"] + 0.5 * hits["risk_focus"],
            "efficiency": efficiency_reward(completion, max_chars)}


def decision_reward(completion: str, reference: dict, weights: dict, max_chars: int = 400) -> float:
    parts = decision_parts(completion, reference, max_chars)
    return sum(weights[k] * parts[k] for k in parts) / sum(weights.values())


def _folded(v) -> str:
    return nz.fold(v if isinstance(v, str) else "").lower()
