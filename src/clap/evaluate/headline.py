"""The round's headline figures: the one metrics file `dvc metrics show` and `dvc metrics diff main` print.

    dvc metrics diff main          # about 20 columns: the gate, the pooled holdout, the replay arms, the agent
    dvc metrics diff main --targets metrics/eval/b1.json   # any detail file, on request

Every other figure file the pipeline writes (per batch evaluation, replay contrasts, training summaries, the gate's
record) stays an output a reviewer can diff by name; declaring them all as metrics made a terminal table of over a
thousand columns. The holdout figures pool the batches the gate judged, each weighted by its number of held-out
samples; the replay shows each arm's exact-value rate and B − A with its interval; the agent, the shipped agent
adapter's task success and its difference from the base model. Written by the gate stage (`metrics/headline.json`).
"""

from __future__ import annotations

HOLDOUT = ("value_accuracy", "wrong_fact_rate", "hallucination_rate", "evidence_accuracy", "overall_score")
ARMS = ("A", "B", "C", "D")


def _round(x):
    return None if x is None else round(float(x), 4)


def pooled(evaluation: dict[str, dict], model: str, metric: str) -> float | None:
    """`metric` of `model` ("candidate", "baseline") over the batches, each weighted by its held-out n (pure)."""
    rows = [(e["n"], e[model][metric]) for e in evaluation.values()
            if e.get("n") and (e.get(model) or {}).get(metric) is not None]
    total = sum(n for n, _ in rows)
    return None if not total else sum(n * v for n, v in rows) / total


def figures(gate: dict, evaluation: dict[str, dict], replay: dict | None, agent: dict | None) -> dict:
    """The headline (pure): `gate` is metrics/gate.json, `evaluation` each judged batch's metrics/eval/<batch>.json,
    `replay` metrics/replay.json and `agent` metrics/agent.json (None or a disabled record when absent)."""
    out: dict = {"decision": gate["decision"], "decision_code": gate["summary"]["decision_code"],
                 "candidate": gate.get("candidate")}
    holdout: dict = {"n": sum(e.get("n") or 0 for e in evaluation.values())}
    for metric in HOLDOUT:
        holdout[metric] = _round(pooled(evaluation, "candidate", metric))
    base = pooled(evaluation, "baseline", "value_accuracy")
    holdout["value_accuracy_vs_base"] = _round(None if base is None or holdout["value_accuracy"] is None
                                               else holdout["value_accuracy"] - base)
    out["holdout"] = holdout
    if replay and replay.get("arms"):
        arms = {arm: _round(replay["arms"][arm].get("value_exact")) for arm in ARMS if arm in replay["arms"]}
        b_a = (replay.get("contrasts") or {}).get("B-A", {}).get("value_exact") or {}
        out["replay"] = {"value": arms, "B-A": _round(b_a.get("delta")), "B-A_ci_low": _round(b_a.get("ci_low"))}
    if agent and agent.get("models"):
        shipped = (gate.get("agent") or {}).get("candidate")
        name = shipped if shipped in agent["models"] else None
        delta = ((agent.get("deltas_vs_base") or {}).get(name) or {}).get("success") or {}
        out["agent"] = {"adapter": name, "success": _round(agent["models"][name]["success"]) if name else None,
                        "success_vs_base": _round(delta.get("delta")), "n_tasks": agent.get("n_tasks")}
    return out
