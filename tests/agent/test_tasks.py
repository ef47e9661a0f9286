"""Task generation: gold trajectories from a scripted planner, executed and checked in three layers."""

import copy
import json
import random

import pandas as pd
import pytest

from clap.agent import rewards, tasks
from clap.agent.tasks import as_frame
from clap.agent.tools import ReportTools
from clap.config import AgentTasks
from clap.domain.contracts import AgentTask

CFG = AgentTasks(seed="agent-test", eval_fraction=0.3, max_tasks_per_batch={"train": 3, "eval": 2})


@pytest.fixture(scope="module")
def built(small_loop):
    chunks = pd.read_parquet(small_loop / "assets" / "chunks.parquet")
    facts = pd.read_parquet(small_loop / "assets" / "facts.parquet")
    tools = ReportTools(chunks)
    rows, report = tasks.build(facts, tools, CFG)
    return tools, facts, rows, report


def test_every_kind_in_both_splits_and_the_contract_holds(built):
    """Training kinds in both splits; the held-out compositions in eval alone."""
    _, _, rows, report = built
    assert {(t["split"], t["kind"]) for t in rows} == {(s, k) for s in ("train", "eval") for k in tasks.TRAIN_KINDS} \
        | {("eval", k) for k in tasks.HELD_OUT_KINDS}
    AgentTask.validate(as_frame(rows), lazy=True)
    assert report["tasks"] == len(rows) == len({t["task_id"] for t in rows})


def test_train_and_eval_never_share_a_company(built):
    _, _, rows, _ = built
    train = {e for t in rows if t["split"] == "train" for e in t["entities"]}
    held_out = {e for t in rows if t["split"] == "eval" for e in t["entities"]}
    assert train and held_out and not train & held_out


def test_gold_trajectories_replay_to_the_answer_with_full_reward(built):
    tools, _, rows, _ = built
    for t in rows:
        steps = [(m["content"], m["tool_calls"][0]["function"]["name"], m["tool_calls"][0]["function"]["arguments"])
                 for m in t["messages"] if m["role"] == "assistant"]
        messages, record = tasks.execute(tools, t["question"], steps)
        assert messages == t["messages"]
        parts = rewards.parts(record, t, per_extra_call=0.25)
        assert parts == {"outcome": 1.0, "format": 1.0, "process": 1.0, "efficiency": 1.0}, t["kind"]
        assert rewards.supported(record["answer"], record)


def test_tool_error_tasks_cite_a_page_that_does_not_exist_and_recover(built):
    tools, _, rows, _ = built
    t = next(t for t in rows if t["kind"] == "tool_error")
    first_return = t["messages"][3]
    assert first_return["role"] == "tool" and json.loads(first_return["content"])["error"].startswith("unknown chunk_id")
    assert t["cited"] in t["question"] and t["cited"] not in tools.chunks


@pytest.mark.parametrize("tamper, layer", [
    (lambda f: f | {"value": f["value"] + 1.0}, "execution"),          # the page does not hold the fact's value
    (lambda f: f | {"chunk_id": "no-such-page-p1"}, "execution"),       # the read fails
])
def test_a_trajectory_that_fails_a_check_is_dropped_by_name(built, tamper, layer):
    tools, facts, _, _ = built
    fact = tamper(facts[facts["verifiable"]].iloc[0].to_dict())
    question, steps, fields = tasks.plan("lookup", [fact], random.Random(0))
    task = {"needed_chunks": [fact["chunk_id"]], "needed_reads": [fact["chunk_id"]], **fields}
    _, record = tasks.execute(tools, question, steps)
    assert tasks.check(tools, task, record, [fact]).startswith(layer)


def test_a_wrong_gold_answer_fails_the_answer_check(built):
    tools, facts, _, _ = built
    fact = facts[facts["verifiable"]].iloc[0].to_dict()
    question, steps, fields = tasks.plan("lookup", [fact], random.Random(0))
    steps[-1] = ("Answer.", "finish", {"answer": "12345678 万元"})
    task = {"needed_chunks": [fact["chunk_id"]], "needed_reads": [fact["chunk_id"]], **fields}
    _, record = tasks.execute(tools, question, steps)
    assert tasks.check(tools, task, record, [fact]).startswith("answer")


def test_the_contract_refuses_a_trajectory_without_a_final_finish(built):
    _, _, rows, _ = built
    broken = copy.deepcopy(rows[0])
    broken["messages"] = broken["messages"][:-1]
    with pytest.raises(Exception, match="gold_trajectory"):
        AgentTask.validate(as_frame([broken]), lazy=True)


def test_held_out_phrasings_and_compositions_never_reach_training(built):
    """Read from the text: every train question fits the training phrasing of its kind (or is the corpus's own
    lookup question) and no held-out one; every eval question fits a held-out phrasing of its kind and not the
    training one; the held-out kinds' plans compute something no training plan does."""
    _, _, rows, report = built
    assert tasks.leakage(rows) == []
    for t in rows:
        fits = tasks.phrasings_matched(t["question"])
        if t["split"] == "eval":
            assert (t["kind"], t["lang"], int(t["template"].rsplit("/", 1)[1])) in fits, t["question"]
            assert (t["kind"], t["lang"], 0) not in fits, t["question"]
        else:
            assert all(i == 0 for _, _, i in fits), t["question"]
            assert t["template"].endswith("/0")
    train_plans = {tasks.composition(t) for t in rows if t["split"] == "train"}
    held_out = {tasks.composition(t) for t in rows if t["kind"] in tasks.HELD_OUT_KINDS}
    assert held_out == {("calculate:sub", "convert_unit"), ("calculate:add",)} and not held_out & train_plans
    assert {k.split("/")[0] for k in report["by_split_template"]} == {"train", "eval"}


def _as_train(task: dict, question: str | None = None) -> dict:
    return copy.deepcopy(task) | {"split": "train", "task_id": "leak", **({"question": question} if question else {})}


@pytest.mark.parametrize("leak", ["phrasing", "composition", "company"])
def test_leakage_names_a_train_task_that_reuses_what_evaluation_holds_out(built, leak):
    """The check fails on leakage, read from the task's text and plan, not from its labels."""
    _, _, rows, _ = built
    train = next(t for t in rows if t["split"] == "train" and t["kind"] == "change" and t["lang"] == "en")
    held = next(t for t in rows if t["split"] == "eval" and t["kind"] == "total")
    if leak == "phrasing":  # a train task phrased by a held-out template, its labels left as training's
        q = tasks.TEMPLATES[("change", "en")][1].format(entity=train["entities"][0], metric="revenue",
                                                        period="2021", period_b="2022")
        bad = _as_train(train, q)
        expect = "phrased as held-out change/en/1"
    elif leak == "composition":  # a held-out plan under a training phrasing and kind
        bad = _as_train(held, train["question"]) | {"kind": "change", "entities": train["entities"]}
        expect = "held-out plan calculate:add"
    else:
        bad = _as_train(train) | {"entities": held["entities"]}
        expect = f"company {held['entities'][0]!r} is in train and eval"
    problems = tasks.leakage(rows + [bad])
    assert problems and expect in problems[0], problems


def test_held_out_compositions_replay_with_their_computation(built):
    """change_convert subtracts then converts; total adds: each computed value is one the task needs."""
    tools, _, rows, _ = built
    for kind, ops in (("change_convert", ["calculate", "convert_unit"]), ("total", ["calculate"])):
        t = next(t for t in rows if t["kind"] == kind)
        calls = [m["tool_calls"][0]["function"] for m in t["messages"] if m["role"] == "assistant"]
        assert [c["name"] for c in calls if c["name"] in ("calculate", "convert_unit")] == ops
        assert len(t["needed_values"]) == len(ops) and t["answer_type"] == "number"


def _correction(task: dict, cid: str = "fix-1", **change) -> dict:
    actions = [{"thought": m["content"], "tool": m["tool_calls"][0]["function"]["name"],
                "arguments": m["tool_calls"][0]["function"]["arguments"]}
               for m in task["messages"] if m["role"] == "assistant"]
    return {"correction_id": cid, "question": task["question"], "actions": actions} | change


def test_a_corrected_trajectory_becomes_a_checked_training_task(built):
    tools, facts, rows, _ = built
    train = next(t for t in rows if t["split"] == "train" and t["kind"] == "change")
    task, why = tasks.from_correction(tools, _correction(train), sorted(set(facts["entity"])))
    assert why is None and task["kind"] == "corrected" and task["split"] == "train"
    assert task["answer"] == train["answer"] and task["entities"] == train["entities"][:1]
    assert task["needed_values"] and rewards.parts(tasks.execute(tools, task["question"], [
        (a["thought"], a["tool"], a["arguments"]) for a in _correction(train)["actions"]])[1], task, 0.25)["process"] == 1.0
    AgentTask.validate(as_frame(rows + [task]), lazy=True)
    assert tasks.leakage(rows + [task]) == []


@pytest.mark.parametrize("change, reason", [
    ({"actions": []}, "format: needs correction_id, question and a non-empty list of actions"),
    ({"actions": [{"thought": "x", "tool": "read_chunk", "arguments": {"chunk_id": "nope-p1"}},
                  {"thought": "x", "tool": "finish", "arguments": {"answer": "1 万元"}}]}, "execution: read_chunk failed"),
    ({"actions": [{"thought": "x", "tool": "finish", "arguments": {"answer": "123456 万元"}}]},
     "answer: '123456 万元' is not supported"),
    ({"actions": [{"thought": "x", "tool": "teleport", "arguments": {}}]}, "format: teleport"),
    ({"actions": [{"thought": "x", "tool": "search_reports", "arguments": {"query": "q"}}]},
     "format: the last action, and only it, must be finish"),
])
def test_a_correction_that_fails_a_check_is_refused_with_the_reason(built, change, reason):
    tools, facts, rows, _ = built
    train = next(t for t in rows if t["split"] == "train")
    task, why = tasks.from_correction(tools, _correction(train, **change), sorted(set(facts["entity"])))
    assert task is None and why.startswith(reason), why


def test_the_stage_keeps_good_corrections_and_refuses_a_held_out_company_by_file_and_line(built, small_loop, tmp_path):
    tools, facts, rows, _ = built
    train = next(t for t in rows if t["split"] == "train" and t["kind"] == "lookup")
    held = next(t for t in rows if t["split"] == "eval" and t["kind"] == "lookup")
    (tmp_path / "fixes").mkdir()
    lines = [_correction(train, "fix-good"), _correction(held, "fix-eval"), "not json"]
    (tmp_path / "fixes" / "a.jsonl").write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)
                                                          for x in lines) + "\n")
    kept, ids, refused = tasks.corrected(tools, tmp_path / "fixes", rows, sorted(set(facts["entity"])))
    assert [t["kind"] for t in kept] == ["corrected"] and list(ids) == ["fix-good"]
    assert [(r["line"], r["correction_id"]) for r in refused] == [(2, "fix-eval"), (3, None)]
    assert refused[0]["reason"].startswith(f"leakage: company {held['entities'][0]!r} is in train and eval")
    assert refused[1]["reason"] == "format: not a JSON object"


def test_a_capped_evaluation_still_covers_every_kind():
    listed = [{"task_id": f"{k}{i}", "kind": k} for k in ("lookup", "change", "compare") for i in range(3)]
    picked = tasks.by_kind_round_robin(listed, 4)
    assert [t["task_id"] for t in picked] == ["change0", "compare0", "lookup0", "change1"]
    assert tasks.by_kind_round_robin(listed, None) == listed == tasks.by_kind_round_robin(listed, 50)
