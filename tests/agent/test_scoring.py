"""BFCL's AST rules on a tool call, τ-bench's pass^k, episode scores."""

import pytest

from clap.agent import chat, scoring
from clap.agent.tools import ReportTools

SCHEMAS = ReportTools.tool_schemas()
TASK = {"answer": "265.5 万元", "answer_type": "number", "entities": ["Apex Precision Co.", "Boreal Motors Co."]}


@pytest.mark.parametrize("gold, pred, expected", [
    # search: the query is free text but must name the company being searched; k is optional
    (("search_reports", {"query": "Boreal Motors Co. Net profit 2022", "k": 3}),
     ("search_reports", {"query": "net profit of Boreal Motors Co. in 2022"}), (True, True)),
    (("search_reports", {"query": "Boreal Motors Co. Net profit 2022", "k": 3}),
     ("search_reports", {"query": "Apex Precision Co. net profit"}), (True, False)),
    (("search_reports", {"query": "Boreal Motors Co. Net profit 2022", "k": 3}),
     ("search_reports", {"query": "Boreal Motors Co.", "k": "3"}), (True, False)),          # wrong type
    (("search_reports", {"query": "Boreal Motors Co. Net profit 2022", "k": 3}),
     ("search_reports", {"k": 3}), (True, False)),                                          # required missing
    (("search_reports", {"query": "Boreal Motors Co. Net profit 2022", "k": 3}),
     ("search_reports", {"query": "Boreal Motors Co.", "top": 3}), (True, False)),          # unknown argument
    (("read_chunk", {"chunk_id": "c02-annual-2022-p1"}), ("read_chunk", {"chunk_id": "c02-annual-2022-p1"}), (True, True)),
    (("read_chunk", {"chunk_id": "c02-annual-2022-p1"}), ("read_chunk", {"chunk_id": "c02-annual-2023-p1"}), (True, False)),
    (("read_chunk", {"chunk_id": "c02-annual-2022-p1"}), ("search_reports", {"query": "Boreal"}), (False, False)),
    # calculate: operation and operand order matter; 1500 and 1500.0 are one number
    (("calculate", {"op": "sub", "a": 1500, "b": 1234.5}), ("calculate", {"op": "sub", "a": 1500.0, "b": 1234.5}),
     (True, True)),
    (("calculate", {"op": "sub", "a": 1500, "b": 1234.5}), ("calculate", {"op": "sub", "a": 1234.5, "b": 1500}),
     (True, False)),
    (("calculate", {"op": "sub", "a": 1500, "b": 1234.5}), ("calculate", {"op": "add", "a": 1500, "b": 1234.5}),
     (True, False)),
    # finish: right when the answer is
    (("finish", {"answer": "265.5 万元"}), ("finish", {"answer": "2,655,000 元"}), (True, True)),
    (("finish", {"answer": "265.5 万元"}), ("finish", {"answer": "265.5"}), (True, False)),
    (("finish", {"answer": "265.5 万元"}), ("calculate", {"op": "sub", "a": 1500, "b": 1234.5}), (False, False)),
])
def test_ast_check(gold, pred, expected):
    expected_call = scoring.expected_call(chat.Action("", *gold), TASK)
    checked = scoring.ast_check(chat.Action("", *pred), expected_call, SCHEMAS, TASK)
    assert (checked["tool_ok"], checked["args_ok"]) == expected


def test_ast_check_of_an_unparsable_turn():
    expected_call = scoring.expected_call(chat.Action("", "finish", {"answer": "x"}), TASK)
    assert scoring.ast_check(None, expected_call, SCHEMAS, TASK) == {"tool_ok": False, "args_ok": False}


def test_pass_hat_k_by_hand():
    # three tasks, n = 4 runs each: 4, 2 and 0 successes
    # pass^1 = (4/4 + 2/4 + 0) / 3 = 0.5; pass^2 = (6/6 + 1/6 + 0) / 3 = 7/18; pass^4 = (1 + 0 + 0) / 3
    successes = [4, 2, 0]
    assert scoring.pass_hat_k(successes, 4, 1) == pytest.approx(0.5)
    assert scoring.pass_hat_k(successes, 4, 2) == pytest.approx(7 / 18)
    assert scoring.pass_hat_k(successes, 4, 4) == pytest.approx(1 / 3)
    assert scoring.pass_hat_k(successes, 4, 5) is None and scoring.pass_hat_k([], 4, 1) is None


def test_episode_scores_flag_an_unsupported_answer(tools, lookup_task):
    from tests.agent.test_agent_rewards import RIGHT, play

    guess = scoring.episode_scores(play(tools, [RIGHT]), lookup_task, 0.25,
                                   {"outcome": 0.5, "format": 0.1, "process": 0.3, "efficiency": 0.1})
    assert guess["success"] == 1.0 and guess["hallucinated"] == 1.0 and guess["n_calls"] == 0 and guess["n_steps"] == 1


@pytest.mark.parametrize("chosen, rejected, reasons, agreement, margin, by_reason", [
    ([2.0, 1.0, 0.5], [1.0, 3.0, 0.5], ["tool", "tool", "format"], 0.3333, -0.3333, {"format": 0.0, "tool": 0.5}),
    ([1.0, 1.0], [0.0, -1.0], ["arguments", "arguments"], 1.0, 1.5, {"arguments": 1.0}),
    ([0.0], [0.0], ["tool"], 0.0, 0.0, {"tool": 0.0}),  # a tie is no agreement: the model cannot tell them apart
    ([], [], [], None, None, {}),
])
def test_reward_model_agreement_with_the_rule_rewards(chosen, rejected, reasons, agreement, margin, by_reason):
    got = scoring.pairwise_agreement(chosen, rejected, reasons)
    assert got == {"n": len(chosen), "agreement": agreement, "mean_margin": margin, "by_reason": by_reason}


def test_agreement_needs_one_score_per_pair():
    with pytest.raises(ValueError, match="one entry per pair"):
        scoring.pairwise_agreement([1.0], [], ["tool"])
