"""The decision task's scoring (clap.train.decision_eval): hand-computed scores and ranking, and the comparisons."""

import json

import pytest
from tests.stages.test_evaluate_decisions import NEAR, REF, REWARDS, case

from clap.train.decision_eval import comparisons, score_case


@pytest.mark.parametrize("answer, logprobs, expected", [
    (REF, (-1.0, -2.0, -3.0), dict(decision_pass=1.0, action_accuracy=1.0, cause_accuracy=1.0, rank_accuracy=1.0,
                                   decision_score=1.0, margin_chosen_near_miss=1.0, margin_chosen_rejected=2.0)),
    # the near-miss: right action, wrong cause and risk; the policy prefers the near-miss (rank fails)
    (NEAR, (-2.0, -1.0, -3.0), dict(decision_pass=0.0, action_accuracy=1.0, cause_accuracy=0.0,
                                    risk_focus_accuracy=0.0, rank_accuracy=0.0, decision_score=0.8,
                                    margin_chosen_near_miss=-1.0)),
    # prose: nothing parses; rejected ranked above near-miss fails the order too
    ("I would expedite.", (-1.0, -3.0, -2.0), dict(decision_pass=0.0, format_ok=0.0, action_accuracy=0.0,
                                                   rank_accuracy=0.0, decision_score=0.1)),
    # the risk focus in capitals still counts; a missing key makes the format partial
    ({"action": REF["action"], "risk_focus": "Delivery"}, (-1.0, -2.0, -3.0),
     dict(cause_accuracy=0.0, risk_focus_accuracy=1.0, format_ok=0.0, decision_score=0.8)),
])
def test_score_case(answer, logprobs, expected):
    text = answer if isinstance(answer, str) else json.dumps(answer)
    got = score_case(text, case(0), dict(zip(("chosen", "near_miss", "rejected"), logprobs)), REWARDS)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v), k


def test_comparisons():
    assert comparisons(["base", "sft", "dpo", "grpo"]) == [
        ("sft", "base"), ("dpo", "base"), ("grpo", "base"), ("dpo", "sft"), ("grpo", "sft")]
    assert ("dpo", "prod") in comparisons(["base", "prod", "sft", "dpo"])
