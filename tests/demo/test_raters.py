"""The demo's SIMULATED raters judge an agent episode by its final answer against the task's gold."""

import pytest

from clap.demo.raters import judge_episode

TASK = {"answer": "1234.5 万元", "answer_type": "number"}
CALLS = "1. search_reports(query='Apex net profit 2022')\n   → [...]\n2. read_chunk(chunk_id='c1-p1')\n   → ...\n"


@pytest.mark.parametrize("text, correct", [
    (CALLS + "Final answer: 1234.5 万元", "correct"),
    (CALLS + "Final answer: 12.345 百万元", "correct"),      # the same quantity in another unit
    (CALLS + "Final answer: 1000 万元", "incorrect"),
    (CALLS + "Final answer: (none: max_steps)", "incorrect"),  # never finished
    (CALLS, "incorrect"),
])
def test_an_agent_episode_is_correct_when_its_final_answer_is_the_gold(text, correct):
    labels = judge_episode(text, TASK)
    assert labels["correctness"] == correct and (labels["usefulness"] == 5) == (correct == "correct")
