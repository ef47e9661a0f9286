"""Agent metrics (pure): BFCL's AST check of a tool call, τ-bench's pass^k, and per-episode scores.

Tool-call accuracy is measured turn by turn on the gold prefix (the agent sees the gold conversation
up to a step and writes the next action), so "when" — the right tool, finish included — is scored
apart from "how" — its arguments. Task success, hallucination, abstention, calls and steps come from
free-running episodes.
"""

from __future__ import annotations

import math

from clap.agent import rewards
from clap.agent.chat import Action
from clap.domain import quantities as nz

_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool}


def expected_call(gold: Action, task: dict) -> dict:
    """What a right next call is, from the gold action: the tool, and per argument the values that
    count (BFCL's possible answers). A search may phrase its query freely but must name the company;
    `k` is optional; a finish is right when its answer scores outcome 1."""
    allowed: dict[str, dict] = {}
    for key, value in gold.arguments.items():
        if gold.tool == "search_reports" and key == "query":
            allowed[key] = {"contains": next((e for e in task["entities"] if e in value), task["entities"][0])}
        elif gold.tool == "search_reports" and key == "k":
            allowed[key] = {"any": True}
        elif gold.tool == "finish":
            allowed[key] = {"outcome": True}
        else:
            allowed[key] = {"equals": value}
    return {"tool": gold.tool, "allowed": allowed}


def ast_check(pred: Action | None, expected: dict, tool_schemas: list[dict], task: dict) -> dict[str, bool]:
    """BFCL's AST rules: the function is the expected one (`tool_ok`, "when"); then (`args_ok`, "how")
    every required argument is present, none is unknown, each has its declared type and an allowed value."""
    if pred is None or pred.tool != expected["tool"]:
        return {"tool_ok": False, "args_ok": False}
    params = next(s["function"]["parameters"] for s in tool_schemas if s["function"]["name"] == pred.tool)
    props, required = params["properties"], params.get("required", [])
    if any(r not in pred.arguments for r in required) or set(pred.arguments) - set(props):
        return {"tool_ok": True, "args_ok": False}
    for key, value in pred.arguments.items():
        if isinstance(value, bool) or not isinstance(value, _TYPES[props[key]["type"]]):
            return {"tool_ok": True, "args_ok": False}
        rule = expected["allowed"].get(key, {"any": True})
        if not _allowed(value, rule, task):
            return {"tool_ok": True, "args_ok": False}
    return {"tool_ok": True, "args_ok": True}


def _allowed(value, rule: dict, task: dict) -> bool:
    if "any" in rule:
        return True
    if "contains" in rule:
        return nz.fold(rule["contains"]).lower() in nz.fold(value).lower()
    if "outcome" in rule:
        return rewards.outcome(value, task) == 1.0
    want = rule["equals"]
    if isinstance(want, str):
        return nz.fold(value).strip() == nz.fold(want).strip()
    return math.isclose(float(value), float(want), rel_tol=1e-6, abs_tol=1e-9)


def pass_hat_k(successes: list[int], n: int, k: int) -> float | None:
    """τ-bench's pass^k: the mean over tasks of C(c, k) / C(n, k), c of n sampled runs succeeding —
    the chance that k runs of a task all succeed. None when k > n."""
    if k > n or not successes:
        return None
    return sum(math.comb(c, k) for c in successes) / (len(successes) * math.comb(n, k))


def episode_scores(episode: dict, task: dict, per_extra_call: float, weights: dict[str, float]) -> dict:
    """One free-running episode's record scores: success, the reward parts and their sum,
    hallucination, abstention, number of calls and steps."""
    parts = rewards.parts(episode, task, per_extra_call)
    answered = episode["answer"] is not None and not rewards.is_abstention(episode["answer"])
    return {"success": float(parts["outcome"] == 1.0), **parts, "reward": rewards.composite(parts, weights),
            "hallucinated": float(answered and not rewards.supported(episode["answer"], episode)),
            "abstained": float(rewards.is_abstention(episode["answer"])),
            "finished": float(episode["stop"] == "finish"),
            "n_calls": sum(1 for s in episode["steps"] if s["tool"] != "finish"), "n_steps": len(episode["steps"])}


def pairwise_agreement(chosen: list[float], rejected: list[float], reasons: list[str]) -> dict:
    """How often a reward model agrees with the rule rewards on preference pairs: the rules (BFCL's AST
    checks, the gold trajectory) prefer every chosen action to its rejected one, so agreement is the share
    of pairs the model scores chosen above rejected — overall and by why the rejected action failed
    (format, tool, arguments) — with the mean score margin. A tie counts as disagreement."""
    if not (len(chosen) == len(rejected) == len(reasons)):
        raise ValueError("chosen, rejected and reasons must have one entry per pair")

    def share(idx: list[int]) -> float | None:
        return round(sum(chosen[i] > rejected[i] for i in idx) / len(idx), 4) if idx else None

    every = list(range(len(chosen)))
    return {"n": len(every), "agreement": share(every),
            "mean_margin": round(sum(chosen[i] - rejected[i] for i in every) / len(every), 4) if every else None,
            "by_reason": {r: share([i for i in every if reasons[i] == r]) for r in sorted(set(reasons))}}
