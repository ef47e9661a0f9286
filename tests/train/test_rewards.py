import json

import pytest

from clap.train import rewards

GOLD = {"entity": "Apex Motors Co.", "metric": "Operating revenue", "period": "2023", "value": 332291.58,
        "unit": "万元", "evidence": "Operating revenue for FY2023 was 332,291.58 RMB 10k."}
SRC = "Apex Motors Co. Annual Report 2023, page 1. " + GOLD["evidence"] + " The FY2022 comparative was 214,792.99 RMB 10k."
W = {"outcome": 0.5, "format": 0.2, "grounding": 0.2, "efficiency": 0.1}


def j(**kw):
    return json.dumps(GOLD | kw)


@pytest.mark.parametrize("completion, fmt", [(j(), 1.0), ('{"value": 1}', 0.5), ("no json", 0.0), ("{", 0.0)])
def test_format_reward(completion, fmt):
    assert rewards.format_reward(completion) == fmt


def test_outcome_reward_tolerance_in_base_units():
    assert rewards.outcome_reward(j(), GOLD) == 1.0
    # same quantity in base units: the value half is earned; the unit field is not the target's spelling
    assert rewards.outcome_reward(j(value=3322915800, unit="元"), GOLD) == pytest.approx(0.5 + 0.5 * 3 / 4)
    assert rewards.outcome_reward(j(value=332291.58 * 1.0005), GOLD, value_rel_tol=1e-3) == 1.0
    assert rewards.outcome_reward(j(value=332291.58 * 1.01), GOLD, value_rel_tol=1e-3) == 0.5
    assert rewards.outcome_reward("garbage", GOLD) == 0.0


def test_grounding_reward_levels():
    assert rewards.grounding_reward(j(), GOLD, SRC) == 1.0
    assert rewards.grounding_reward(j(evidence="Apex Motors Co. Annual Report 2023, page 1."), GOLD, SRC) == 0.5
    assert rewards.grounding_reward(j(evidence="Revenue rose sharply."), GOLD, SRC) == 0.0


def test_efficiency_reward_is_monotone():
    vals = [rewards.efficiency_reward("x" * n, 100) for n in (10, 100, 150, 200, 400)]
    assert vals == sorted(vals, reverse=True) and vals[0] == 1.0 and vals[-1] == 0.0


def test_composite_orders_chosen_near_miss_rejected():
    ref = {"action": "Expedite the delayed supplier", "cause": "supplier_delay_days", "risk_focus": "delivery"}
    chosen = json.dumps(ref)
    near = json.dumps(ref | {"cause": "demand_drop_pct", "risk_focus": "cash"})
    rejected = json.dumps({"action": "Cut the next purchase order", "cause": "demand_drop_pct", "risk_focus": "cash"})
    r = [rewards.decision_reward(t, ref, W) for t in (chosen, near, rejected)]
    assert r[0] > r[1] > r[2]
    assert rewards.extraction_reward(j(), GOLD, SRC, W) == pytest.approx(1.0)


REF = {"action": "Expedite the delayed supplier", "cause": "supplier_delay_days", "risk_focus": "delivery"}


@pytest.mark.parametrize("completion, parts", [
    (json.dumps(REF), {"outcome": 1.0, "format": 1.0, "grounding": 1.0, "efficiency": 1.0}),
    # the action in other case and spacing is the same action; a wrong cause costs half the grounding
    (json.dumps(REF | {"action": " expedite the delayed SUPPLIER", "cause": "demand_drop_pct"}),
     {"outcome": 1.0, "format": 1.0, "grounding": 0.5, "efficiency": 1.0}),
    # a non-string action or risk focus scores 0 for that part instead of raising
    (json.dumps({"action": 7, "cause": "supplier_delay_days", "risk_focus": None}),
     {"outcome": 0.0, "format": 1.0, "grounding": 0.5, "efficiency": 1.0}),
    (json.dumps({"action": REF["action"]}), {"outcome": 1.0, "format": 0.5, "grounding": 0.0, "efficiency": 1.0}),
    ("Expedite the supplier " * 40, {"outcome": 0.0, "format": 0.0, "grounding": 0.0, "efficiency": 0.0}),
])
def test_decision_parts(completion, parts):
    assert rewards.decision_parts(completion, REF, max_chars=400) == pytest.approx(parts)


def test_grpo_part_rewards_weighted_are_the_decision_reward():
    """TRL sums the part rewards with `reward_weights`: the same number as `decision_reward`, whose
    weights sum to 1 in conf."""
    from clap.stages.train_grpo import REWARD_PARTS, part_reward

    texts = [json.dumps(REF), json.dumps(REF | {"cause": "x"}), "prose"]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    parts = {p: part_reward(p, 400)(completions, [json.dumps(REF)] * 3) for p in REWARD_PARTS}
    assert part_reward("outcome", 400).__name__ == "outcome"
    for i, t in enumerate(texts):
        total = sum(W[p] * parts[p][i] for p in REWARD_PARTS)
        assert total == pytest.approx(rewards.decision_reward(t, REF, W) * sum(W.values()))
