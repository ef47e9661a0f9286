"""Agent rewards (pure): outcome, format, process, efficiency, and their weighted sum.

An episode is the dict `clap.agent.episode` writes: `steps` (each with `valid`, `tool`, `arguments`,
`observation`, `ok`) and `answer` (None when it never finished). A task says what a good episode
needs: its gold `answer` and `answer_type` (number, entity or abstain), the pages it must see
(`needed_chunks`), the page ids it must try (`needed_reads`, which includes a page the user cited
that does not exist), the intermediate results it must compute (`needed_values`), and the gold
trajectory's number of tool calls and steps.
"""

from __future__ import annotations

import json
import math

from clap.agent.tools import ABSTAIN
from clap.domain import quantities as nz
from clap.retrieval import tokenize


def is_abstention(answer: str | None) -> bool:
    return answer is not None and nz.fold(answer).strip().lower().rstrip(".") in (ABSTAIN, "未找到")


def outcome(answer: str | None, task: dict) -> float:
    """1 for the gold answer: the same quantity (any unit of its kind, 0.01% tolerance for rounding),
    the same company, or an abstention where the reports do not hold it; a company answer that is not
    exact scores its token F1; a number or unit that differs scores 0."""
    if answer is None:
        return 0.0
    kind = task["answer_type"]
    if kind == "abstain" or is_abstention(answer):
        return float(kind == "abstain" and is_abstention(answer))
    if kind == "number":
        return float(nz.same_quantity(nz.parse_quantity(answer), nz.parse_quantity(task["answer"]), rel_tol=1e-4))
    if nz.fold(answer).strip().lower() == nz.fold(task["answer"]).strip().lower():
        return 1.0
    return token_f1(answer, task["answer"])


def token_f1(pred: str, gold: str) -> float:
    p, g = tokenize(pred), tokenize(gold)
    common = sum(min(p.count(t), g.count(t)) for t in set(p))
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return round(2 * precision * recall / (precision + recall), 6)


def format_score(episode: dict) -> float:
    """Share of the agent's turns that are a well-formed action (known tool, valid arguments)."""
    steps = episode["steps"]
    return sum(s["valid"] for s in steps) / len(steps) if steps else 0.0


def productive_steps(episode: dict, task: dict) -> list[bool]:
    """Whether each step moves the task forward: a search whose hits bring a needed page not seen
    before (on a task the reports cannot answer: the first search), a read of a needed page not read
    before, a computation whose result is a needed value not computed before, a finish with the right
    answer. Repeats, detours, invalid turns and wrong answers do not."""
    seen, read, computed, out = set(), set(), [], []
    needed_chunks, needed_reads = set(task["needed_chunks"]), set(task["needed_reads"])
    searched = False
    for s in episode["steps"]:
        good = False
        if s["valid"] and s["tool"] == "search_reports" and s["ok"]:
            hits = {h["chunk_id"] for h in json.loads(s["observation"])}
            good = bool((hits & needed_chunks) - seen) or (task["answer_type"] == "abstain" and not searched)
            seen |= hits
            searched = True
        elif s["valid"] and s["tool"] == "read_chunk":
            cid = s["arguments"]["chunk_id"]
            good = cid in needed_reads and cid not in read
            read.add(cid)
        elif s["valid"] and s["tool"] in ("calculate", "convert_unit") and s["ok"]:
            value = float(s["observation"])
            good = any(_close(value, v) for v in task["needed_values"]) and not any(_close(value, v) for v in computed)
            computed.append(value)
        elif s["valid"] and s["tool"] == "finish":
            good = outcome(s["arguments"]["answer"], task) == 1.0
        out.append(good)
    return out


def step_credit(prefix_steps: list[dict], step: dict, task: dict) -> float:
    """The dense process reward of one turn: 1 when `step` moves the task forward after `prefix_steps` (the
    episode's earlier steps, by `productive_steps`' rules: a new needed page found or read, a new needed value
    computed, the right answer given), else 0. What an RL step credits per turn rather than per episode."""
    return float(productive_steps({"steps": [*prefix_steps, step]}, task)[-1])


def process(episode: dict, task: dict) -> float:
    """Productive steps over the steps taken, and never over fewer steps than the gold trajectory
    needs: a right answer guessed without a tool call gets 1 / gold steps, not 1."""
    good = productive_steps(episode, task)
    return sum(good) / max(len(good), task["gold_steps"]) if good else 0.0


def efficiency(episode: dict, task: dict, per_extra_call: float) -> float:
    """1 − `per_extra_call` for each tool call beyond the gold trajectory's (finish excluded), floored at 0."""
    calls = sum(1 for s in episode["steps"] if s["tool"] != "finish")
    return max(0.0, 1.0 - per_extra_call * max(0, calls - task["gold_calls"]))


def parts(episode: dict, task: dict, per_extra_call: float) -> dict[str, float]:
    return {"outcome": outcome(episode["answer"], task), "format": format_score(episode),
            "process": process(episode, task), "efficiency": efficiency(episode, task, per_extra_call)}


def composite(scores: dict[str, float], weights: dict[str, float]) -> float:
    """The weighted mean of the reward parts (weights from conf/ `agent.rewards.weights`)."""
    total = sum(weights.values())
    return sum(weights[k] * scores[k] for k in weights) / total


def supported(answer: str | None, episode: dict) -> bool:
    """Whether a final answer is backed by a tool return: its number among the numbers the tools
    returned, or its company named in one. An abstention needs no support."""
    if answer is None or is_abstention(answer):
        return True
    returns = [s["observation"] for s in episode["steps"] if s["ok"] and s["tool"] != "finish"]
    quantity = nz.parse_quantity(answer)
    if quantity is not None:
        return any(nz.value_in_text(quantity.value, text, rel_tol=1e-6) for text in returns)
    folded = nz.fold(answer).strip().lower()
    return bool(folded) and any(folded in nz.fold(text).lower() for text in returns)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6)
