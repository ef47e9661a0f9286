"""The agent's reward parts, table-tested on episodes played through the real environment."""

import pytest

from clap.agent import chat, rewards
from clap.agent.episode import step

WEIGHTS = {"outcome": 0.5, "format": 0.1, "process": 0.3, "efficiency": 0.1}
SEARCH = chat.Action("Find.", "search_reports", {"query": "Apex Precision net profit 2022"}).text()
READ = chat.Action("Read.", "read_chunk", {"chunk_id": "c01-annual-2022-p1"}).text()
READ_OTHER = chat.Action("Read.", "read_chunk", {"chunk_id": "c02-annual-2022-p1"}).text()
SEARCH_AGAIN = chat.Action("Again.", "search_reports", {"query": "Apex Precision 2022 net profit"}).text()
RIGHT = chat.Action("Answer.", "finish", {"answer": "1,234.50 万元"}).text()
RIGHT_OTHER_UNIT = chat.Action("Answer.", "finish", {"answer": "12.345 百万元"}).text()
WRONG = chat.Action("Answer.", "finish", {"answer": "1000 万元"}).text()
ABSTAIN = chat.Action("Answer.", "finish", {"answer": "not found"}).text()


def play(tools, texts):
    episode = {"messages": chat.start("Q?"), "steps": [], "answer": None, "stop": None}
    for text in texts:
        step(episode, tools, text)
    return episode


@pytest.mark.parametrize("name, texts, expected", [
    ("gold path", [SEARCH, READ, RIGHT], {"outcome": 1, "format": 1, "process": 1, "efficiency": 1}),
    ("right answer in another unit of its kind", [SEARCH, READ, RIGHT_OTHER_UNIT],
     {"outcome": 1, "format": 1, "process": 1, "efficiency": 1}),
    ("wasteful path: a repeated search and a detour read", [SEARCH, READ_OTHER, SEARCH_AGAIN, READ, RIGHT],
     {"outcome": 1, "format": 1, "process": 3 / 5, "efficiency": 0.5}),
    ("guesses the answer without calling a tool", [RIGHT],
     {"outcome": 1, "format": 1, "process": 1 / 3, "efficiency": 1}),
    ("wrong value after the right steps", [SEARCH, READ, WRONG],
     {"outcome": 0, "format": 1, "process": 2 / 3, "efficiency": 1}),
    ("prose turn, then the gold path", ["I will look it up.", SEARCH, READ, RIGHT],
     {"outcome": 1, "format": 0.75, "process": 3 / 4, "efficiency": 0.75}),
    ("abstains on an answerable task", [SEARCH, ABSTAIN], {"outcome": 0, "format": 1, "process": 1 / 3, "efficiency": 1}),
    ("never finishes", [SEARCH, READ], {"outcome": 0, "format": 1, "process": 2 / 3, "efficiency": 1}),
])
def test_reward_parts(tools, lookup_task, name, texts, expected):
    parts = rewards.parts(play(tools, texts), lookup_task, per_extra_call=0.25)
    assert parts == pytest.approx(expected), name


def test_the_gold_path_outscores_the_wasteful_path_and_the_guess(tools, lookup_task):
    def reward(texts):
        return rewards.composite(rewards.parts(play(tools, texts), lookup_task, 0.25), WEIGHTS)

    gold, wasteful, guess = reward([SEARCH, READ, RIGHT]), reward([SEARCH, READ_OTHER, SEARCH_AGAIN, READ, RIGHT]), \
        reward([RIGHT])
    assert gold == 1.0 and gold > wasteful and gold > guess


def test_unanswerable_task_rewards_abstaining_after_a_search(tools):
    task = {"answer": "not found", "answer_type": "abstain", "needed_chunks": [], "needed_reads": [],
            "needed_values": [], "gold_calls": 1, "gold_steps": 2}
    search_2018 = chat.Action("Find.", "search_reports", {"query": "Apex Precision net profit 2018"}).text()
    assert rewards.parts(play(tools, [search_2018, ABSTAIN]), task, 0.25) == \
        {"outcome": 1.0, "format": 1.0, "process": 1.0, "efficiency": 1.0}
    invented = rewards.parts(play(tools, [search_2018, READ, RIGHT]), task, 0.25)
    assert invented["outcome"] == 0 and invented["process"] == pytest.approx(1 / 3)


def test_a_computation_counts_when_it_yields_a_needed_value(tools):
    task = {"answer": "265.5 万元", "answer_type": "number", "needed_chunks": [], "needed_reads": [],
            "needed_values": [265.5], "gold_calls": 1, "gold_steps": 2}
    sub = chat.Action("Subtract.", "calculate", {"op": "sub", "a": 1500, "b": 1234.5}).text()
    backwards = chat.Action("Subtract.", "calculate", {"op": "sub", "a": 1234.5, "b": 1500}).text()
    finish = chat.Action("Answer.", "finish", {"answer": "265.5 万元"}).text()
    assert rewards.productive_steps(play(tools, [backwards, sub, sub, finish]), task) == [False, True, False, True]


@pytest.mark.parametrize("answer, gold, answer_type, score", [
    ("1234.5 万元", "1234.5 万元", "number", 1.0),
    ("12,345,000 元", "1234.5 万元", "number", 1.0),
    ("1234.5", "1234.5 万元", "number", 0.0),            # no unit: not the same quantity
    ("1234.5 吨", "1234.5 万元", "number", 0.0),
    ("1235 万元", "1234.5 万元", "number", 0.0),          # beyond rounding
    ("Boreal Motors Co.", "Boreal Motors Co.", "entity", 1.0),
    ("boreal motors co", "Boreal Motors Co.", "entity", 1.0),  # token F1 over words: case and "." do not count
    ("Boreal Castings Co.", "Boreal Motors Co.", "entity", 0.5),
    ("Not found.", "not found", "abstain", 1.0),
    ("未找到", "not found", "abstain", 1.0),
    ("1234.5 万元", "not found", "abstain", 0.0),
    ("not found", "Boreal Motors Co.", "entity", 0.0),
    (None, "1234.5 万元", "number", 0.0),
])
def test_outcome(answer, gold, answer_type, score):
    assert rewards.outcome(answer, {"answer": gold, "answer_type": answer_type}) == pytest.approx(score)


def test_supported_needs_a_tool_return_that_holds_the_answer(tools):
    assert rewards.supported("1,234.50 万元", play(tools, [SEARCH, READ, RIGHT]))
    assert not rewards.supported("1,234.50 万元", play(tools, [RIGHT]))
    assert rewards.supported("not found", play(tools, [ABSTAIN]))
    assert rewards.supported("Boreal Motors Co.", play(tools, [READ_OTHER]))
