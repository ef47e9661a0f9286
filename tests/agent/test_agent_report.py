"""The agent evaluation's figures: per-task values, intervals, paired deltas, abstention both ways, pass^k."""

import pytest

from clap.agent import report

KINDS = {"a": "lookup", "b": "lookup", "c": "unanswerable", "d": "unanswerable"}


def episode(task, success, abstained=0.0, hallucinated=0.0, n_calls=2):
    return {"task_id": task, "success": success, "reward": success, "process": success, "hallucinated": hallucinated,
            "n_calls": n_calls, "abstained": abstained}


def call(task, tool_ok, args_ok):
    return {"task_id": task, "tool_ok": tool_ok, "args_ok": args_ok}


@pytest.mark.parametrize("greedy, metric, expected", [
    # refusing an answerable task is a false abstention; answering an unanswerable one misses it
    ([episode("a", 0, abstained=1), episode("b", 1), episode("c", 1, abstained=1), episode("d", 0)],
     "false_abstention", {"a": 1.0, "b": 0.0}),
    ([episode("a", 0, abstained=1), episode("b", 1), episode("c", 1, abstained=1), episode("d", 0)],
     "abstention_recall", {"c": 1.0, "d": 0.0}),
    ([episode("a", 1, hallucinated=0), episode("b", 0, hallucinated=1)], "hallucinated", {"a": 0.0, "b": 1.0}),
])
def test_task_values_define_each_metric_on_its_own_tasks(greedy, metric, expected):
    assert report.task_values(greedy, [], KINDS)[metric] == expected


def test_next_call_accuracy_is_the_mean_over_a_tasks_gold_turns():
    values = report.task_values([], [call("a", 1, 1), call("a", 1, 0), call("a", 0, 0), call("b", 1, 1)], KINDS)
    assert values["tool_selection"] == {"a": 2 / 3, "b": 1.0}
    assert values["arguments"] == {"a": 1 / 3, "b": 1.0}


@pytest.mark.parametrize("successes, n, k, expected", [
    ({"a": 4, "b": 2}, 4, 1, {"a": 1.0, "b": 0.5}),
    ({"a": 4, "b": 2}, 4, 2, {"a": 1.0, "b": 1 / 6}),
    ({"a": 3, "b": 0}, 4, 4, {"a": 0.0, "b": 0.0}),   # one failure of four: pass^4 is 0
    ({"a": 3}, 2, 3, {}),                              # k above the samples: undefined, not 0
])
def test_pass_hat_k_per_task(successes, n, k, expected):
    assert report.pass_hat_k_values(successes, n, k) == pytest.approx(expected)


def test_abstention_precision_is_the_share_of_refusals_that_were_right():
    greedy = [episode("a", 0, abstained=1), episode("b", 1), episode("c", 1, abstained=1), episode("d", 1, abstained=1)]
    p = report.abstention_precision(greedy, KINDS, n_boot=200, ci=0.95)
    assert p["mean"] == pytest.approx(2 / 3) and p["n"] == 3 and p["ci_low"] <= p["mean"] <= p["ci_high"]
    assert report.abstention_precision([episode("a", 1)], KINDS, 200, 0.95) == {"mean": None, "ci_low": None,
                                                                                 "ci_high": None, "n": 0}


def test_deltas_pair_by_task_and_skip_metrics_without_common_tasks():
    ref = {"success": {"a": 0.0, "b": 0.0, "c": 1.0}, "abstention_recall": {"c": 1.0}, "arguments": {}}
    new = {"success": {"a": 1.0, "b": 1.0, "c": 1.0, "z": 1.0}, "abstention_recall": {"c": 0.0}, "arguments": {"a": 1.0}}
    d = report.deltas(ref, new, n_boot=200, ci=0.95)
    assert d["success"]["n"] == 3 and d["success"]["delta"] == pytest.approx(2 / 3)  # z has no pair
    assert d["success"]["ci_low"] <= d["success"]["delta"] <= d["success"]["ci_high"]
    assert d["abstention_recall"] == {"delta": -1.0, "ci_low": -1.0, "ci_high": -1.0, "n": 1}
    assert "arguments" not in d


def test_model_figures_carry_an_interval_per_metric_and_kind():
    greedy = [episode("a", 1), episode("b", 0), episode("c", 1, abstained=1), episode("d", 0)]
    values = report.task_values(greedy, [call(t, 1, 1) for t in "abcd"], KINDS)
    figures = report.model_figures(values, greedy, KINDS, n_boot=200, ci=0.95)
    assert figures["metrics"]["success"]["mean"] == 0.5 and figures["metrics"]["success"]["n"] == 4
    assert not any(m.startswith("pass^") for m in figures["metrics"])  # pass^k is the agent_pass_k stage's
    assert set(figures["by_kind"]) == {"lookup", "unanswerable"}
    assert figures["by_kind"]["lookup"]["success"]["n"] == 2


def test_pass_k_figures_per_kind_and_an_empty_interval_beyond_the_samples():
    sampled = report.pass_k_figures({"a": 4, "b": 2, "c": 0, "d": 4}, 4, [1, 4, 5], KINDS, 200, 0.95)
    assert sampled["metrics"]["pass^4"]["mean"] == 0.5 and sampled["metrics"]["pass^1"]["mean"] == pytest.approx(0.625)
    assert sampled["metrics"]["pass^5"] == {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    assert sampled["by_kind"]["lookup"]["pass^1"]["mean"] == 0.75 and sampled["by_kind"]["lookup"]["pass^4"]["n"] == 2
    assert sampled["by_kind"]["unanswerable"]["pass^1"]["mean"] == 0.5  # c 0 of 4, d 4 of 4


@pytest.mark.parametrize("reference, new, k, delta, n", [
    ({"a": 4, "b": 0}, {"a": 4, "b": 4}, 4, 0.5, 2),           # b now solved in every run
    ({"a": 3, "b": 0}, {"a": 4, "b": 0}, 4, 0.5, 2),           # 3 of 4 is pass^4 0: one failure breaks it
    ({"a": 2, "b": 2}, {"a": 2, "b": 2, "z": 4}, 1, 0.0, 2),   # z was not sampled for the reference: not paired
])
def test_pass_k_deltas_pair_by_task(reference, new, k, delta, n):
    d = report.pass_k_deltas(reference, new, 4, [k, 5], n_boot=200, ci=0.95)
    assert set(d) == {f"pass^{k}"} and d[f"pass^{k}"]["delta"] == pytest.approx(delta) and d[f"pass^{k}"]["n"] == n
