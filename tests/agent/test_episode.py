"""The rollout loop: episodes stepped together end as they would alone, within their bounds."""

import json
from dataclasses import dataclass

from clap.agent import chat
from clap.agent.episode import BAD_ACTION, one_at_a_time, rollout


@dataclass
class Gen:
    text: str
    new_tokens: int


def scripted(script: dict[str, list[str]], calls: list[int] | None = None):
    """A policy that answers each question with its script, turn by turn (the turn = assistant turns so far)."""
    def policy(conversations):
        if calls is not None:
            calls.append(len(conversations))
        out = []
        for conv in conversations:
            turn = sum(m["role"] == "assistant" for m in conv)
            texts = script[conv[1]["content"]]
            out.append(Gen(texts[min(turn, len(texts) - 1)], 10))
        return out
    return policy


SEARCH = chat.Action("Find.", "search_reports", {"query": "Apex Precision net profit 2022"}).text()
READ = chat.Action("Read.", "read_chunk", {"chunk_id": "c01-annual-2022-p1"}).text()
FINISH = chat.Action("Answer.", "finish", {"answer": "1234.5 万元"}).text()
SCRIPT = {"lookup": [SEARCH, READ, FINISH], "guess": [FINISH], "loops": [SEARCH], "prose": ["Let me think.", FINISH]}
TASKS = [{"task_id": q, "question": q} for q in SCRIPT]


def test_episodes_end_at_finish_or_their_bounds(tools):
    episodes = {e["task_id"]: e for e in rollout(scripted(SCRIPT), tools, TASKS, max_steps=4, max_new_tokens=1000)}
    assert episodes["lookup"]["stop"] == "finish" and episodes["lookup"]["answer"] == "1234.5 万元"
    assert [s["tool"] for s in episodes["lookup"]["steps"]] == ["search_reports", "read_chunk", "finish"]
    assert "Net profit for FY2022 was 1,234.50" in episodes["lookup"]["messages"][5]["content"]
    assert episodes["loops"]["stop"] == "max_steps" and len(episodes["loops"]["steps"]) == 4
    assert episodes["loops"]["answer"] is None
    prose = episodes["prose"]
    assert prose["steps"][0]["valid"] is False and json.loads(prose["steps"][0]["observation"]) == {"error": BAD_ACTION}
    assert prose["messages"][2] == {"role": "assistant", "content": "Let me think."} and prose["stop"] == "finish"


def test_the_token_budget_ends_an_episode(tools):
    episode = rollout(scripted(SCRIPT), tools, TASKS[2:3], max_steps=30, max_new_tokens=25)[0]
    assert episode["stop"] == "max_tokens" and episode["new_tokens"] == 30 and len(episode["steps"]) == 3


def test_batched_rollout_equals_one_episode_at_a_time_with_fewer_policy_calls(tools):
    batched_calls, alone_calls = [], []
    batched = rollout(scripted(SCRIPT, batched_calls), tools, TASKS, max_steps=4, max_new_tokens=1000)
    alone = one_at_a_time(scripted(SCRIPT, alone_calls), tools, TASKS, max_steps=4, max_new_tokens=1000)
    assert batched == alone
    assert batched_calls == [4, 3, 2, 1] and len(alone_calls) == 3 + 1 + 4 + 2
