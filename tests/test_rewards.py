import json

import pytest

from clap import rewards

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
