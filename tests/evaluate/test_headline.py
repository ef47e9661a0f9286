"""The headline figures `dvc metrics show` prints: pooled holdout weighted by each batch's n, the replay arms and
B − A, the shipped agent adapter's success — about 20 columns whatever the number of batches."""

import pytest

from clap.evaluate.headline import figures, pooled

GATE = {"decision": "promote", "candidate": "sft", "summary": {"decision_code": 0}, "agent": {"candidate": "agent_sft"}}


def _eval(n, value, wrong, base_value=0.0):
    metrics = {"value_accuracy": value, "wrong_fact_rate": wrong, "hallucination_rate": 0.0,
               "evidence_accuracy": value, "overall_score": value}
    return {"n": n, "candidate": metrics, "baseline": metrics | {"value_accuracy": base_value}}


@pytest.mark.parametrize("evaluation, want", [
    ({"b1": _eval(10, 0.5, 0.2), "b2": _eval(30, 0.9, 0.0)}, 0.8),  # (10·0.5 + 30·0.9) / 40, not the mean 0.7
    ({"b1": _eval(0, 0.5, 0.2)}, None),                              # no held-out sample: no figure, not 0
    ({}, None),
    ({"b1": _eval(4, 0.25, 0.0), "b2": {"n": 4, "candidate": {"value_accuracy": None}}}, 0.25),  # a missing figure
])
def test_pooled_weights_each_batch_by_its_held_out_n(evaluation, want):
    got = pooled(evaluation, "candidate", "value_accuracy")
    assert got == pytest.approx(want) if want is not None else got is None


def test_the_headline_is_a_few_columns_whatever_the_number_of_batches():
    evaluation = {f"b{i}": _eval(10, 0.6, 0.1, base_value=0.2) for i in range(1, 9)}
    replay = {"arms": {a: {"value_exact": v, "p95_latency_ms": 9.0} for a, v in zip("ABCD", (0.1, 0.5, 0.0, 0.3))},
              "contrasts": {"B-A": {"value_exact": {"delta": 0.4, "ci_low": 0.1, "ci_high": 0.6, "n": 20}}}}
    agent = {"n_tasks": 64, "models": {"base": {"success": 0.1}, "agent_sft": {"success": 0.55}},
             "deltas_vs_base": {"agent_sft": {"success": {"delta": 0.45, "ci_low": 0.3, "ci_high": 0.6, "n": 64}}}}
    out = figures(GATE, evaluation, replay, agent)
    assert out["holdout"]["n"] == 80 and out["holdout"]["value_accuracy_vs_base"] == pytest.approx(0.4)
    assert out["replay"] == {"value": {"A": 0.1, "B": 0.5, "C": 0.0, "D": 0.3}, "B-A": 0.4, "B-A_ci_low": 0.1}
    assert out["agent"] == {"adapter": "agent_sft", "success": 0.55, "success_vs_base": 0.45, "n_tasks": 64}

    def leaves(o):
        return sum(leaves(v) for v in o.values()) if isinstance(o, dict) else 1

    assert leaves(out) <= 24


def test_absent_evidence_leaves_its_section_out_and_a_held_agent_names_no_adapter():
    out = figures(GATE | {"agent": {}}, {}, None, {"n_tasks": 4, "models": {"base": {"success": 0.0}}})
    assert "replay" not in out and out["holdout"]["value_accuracy"] is None
    assert out["agent"]["adapter"] is None and out["agent"]["success"] is None
    assert "agent" not in figures(GATE, {}, None, {"status": "disabled"})
