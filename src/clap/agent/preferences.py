"""Which mined agent pairs DPO learns from: the balance between finishing too early and too late.

    clap train agent-dpo        (reads data/agent_pairs/pairs.jsonl, `agent.dpo.balance_finish`)

A mined pair rejects the agent SFT adapter's own wrong action at a state of a gold trajectory. Two kinds of
mistake pull the policy opposite ways: `finish` where gold still calls a tool (too early), and a tool call
where gold finishes (too late). On the demo corpus the SFT adapter makes the first far more often (53 of 121
pairs against 23), so DPO over all pairs mostly learns "do not finish yet": at one epoch the agent no longer
finishes any episode (benchmarks/README.md, "the agent DPO dose, swept through DVC's queue"). Balancing keeps
at most as many too-early pairs as there are too-late ones; the rest (wrong tool, wrong arguments, wrong
answer) all stay. Which too-early pairs stay is fixed by the pairs themselves: the greedy draw's first (the
mistakes the served policy makes), then by pair id — the same set every run, for DVC.
"""

from __future__ import annotations

from clap.agent import chat

TOO_EARLY = "finish_too_early"
TOO_LATE = "finish_too_late"


def _tool(text: str) -> str | None:
    action = chat.parse_action(text)
    return action.tool if action is not None else None


def finish_direction(pair: dict) -> str | None:
    """TOO_EARLY when the rejected action finishes where the chosen (gold) one calls a tool, TOO_LATE when the
    rejected action calls a tool where gold finishes, None for every other pair (both finish with different
    answers, both call tools, or the rejected text is no action at all)."""
    chosen, rejected = _tool(pair["chosen"]), _tool(pair["rejected"])
    if rejected is None or chosen is None:
        return None
    if rejected == "finish" and chosen != "finish":
        return TOO_EARLY
    if chosen == "finish" and rejected != "finish":
        return TOO_LATE
    return None


def balance_finish(pairs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(kept, left out): every pair, except too-early ones beyond the number of too-late ones. Kept pairs keep
    their order."""
    directions = [finish_direction(p) for p in pairs]
    early = [i for i, d in enumerate(directions) if d == TOO_EARLY]
    ranked = sorted(early, key=lambda i: (pairs[i].get("draw") != "greedy", pairs[i]["pair_id"]))
    dropped = set(ranked[directions.count(TOO_LATE):])
    return ([p for i, p in enumerate(pairs) if i not in dropped], [p for i, p in enumerate(pairs) if i in dropped])


def finish_counts(pairs: list[dict]) -> dict:
    """How many pairs point each way, for the stage's metrics."""
    return {d: sum(finish_direction(p) == d for p in pairs) for d in (TOO_EARLY, TOO_LATE)}
