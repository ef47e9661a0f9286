"""Rollouts: many episodes stepped together, one batched generation per step.

An episode is a POMDP run: the state is the conversation (question, the agent's turns, tool
returns); each turn the policy writes one action; the environment answers with an observation. It
ends at `finish`, or when it reaches `max_steps` turns or `max_new_tokens` generated tokens. A turn
that is not a well-formed action costs a step and comes back as an error observation, like a failed
call. `rollout` steps every live episode at once — the policy sees one batch per step — which is
what `benchmarks/bench_agent.py` compares with a one-episode-at-a-time loop.
"""

from __future__ import annotations

from collections.abc import Callable

from clap.agent import chat, scoring
from clap.agent.tools import ReportTools, observation

Policy = Callable[[list[list[dict]]], list]  # conversations → generations with .text and .new_tokens
BAD_ACTION = 'reply with one JSON object {"thought": ..., "tool": ..., "arguments": {...}}'


def rollout(policy: Policy, tools: ReportTools, tasks: list[dict], max_steps: int, max_new_tokens: int) -> list[dict]:
    """One episode per task: {task_id, messages, steps, answer, stop, new_tokens}."""
    episodes = [{"task_id": t["task_id"], "messages": chat.start(t["question"]), "steps": [], "answer": None,
                 "stop": None, "new_tokens": 0} for t in tasks]
    live = list(range(len(episodes)))
    while live:
        generations = policy([episodes[i]["messages"] for i in live])
        still = []
        for i, gen in zip(live, generations):
            ep = episodes[i]
            ep["new_tokens"] += gen.new_tokens
            step(ep, tools, gen.text)
            if ep["stop"] is None and len(ep["steps"]) >= max_steps:
                ep["stop"] = "max_steps"
            elif ep["stop"] is None and ep["new_tokens"] >= max_new_tokens:
                ep["stop"] = "max_tokens"
            if ep["stop"] is None:
                still.append(i)
        live = still
    return episodes


def one_at_a_time(policy: Policy, tools: ReportTools, tasks: list[dict], max_steps: int,
                  max_new_tokens: int) -> list[dict]:
    """The plain loop: each episode alone to its end (the reference `bench_agent` compares against)."""
    return [rollout(policy, tools, [t], max_steps, max_new_tokens)[0] for t in tasks]


def step(episode: dict, tools: ReportTools, text: str) -> None:
    """Apply one model turn to an episode: parse, check, run the tool, append turn and observation."""
    action = chat.parse_action(text)
    problem = BAD_ACTION if action is None else tools.argument_problem(action.tool, action.arguments)
    record = {"text": text, "valid": problem is None, "tool": action.tool if action else None,
              "arguments": action.arguments if action else None}
    if problem is not None:
        obs, ok = observation({"error": problem}), False
        episode["messages"] += [{"role": "assistant", "content": text}, chat.tool_message("error", obs)]
    elif action.tool == "finish":
        obs, ok = action.arguments["answer"], True
        episode["messages"].append(action.message())
        episode["answer"], episode["stop"] = action.arguments["answer"], "finish"
    else:
        obs, ok = tools.call(action.tool, action.arguments)
        episode["messages"] += [action.message(), chat.tool_message(action.tool, obs)]
    episode["steps"].append(record | {"observation": obs, "ok": ok})


def engine_policy(engine, use_adapter, max_new_tokens: int, batch_size: int, schema: dict | None,
                  temperature: float = 0.0, seed: int | None = None) -> Policy:
    """A policy served by `clap.evaluate.generate.Engine` (built with `chat.engine_rendering` and the tools):
    greedy or sampled, every turn under the action grammar when `schema` is given. `seed` (sampled, under the
    grammar): each turn draws from its request's own generator, so a sampled episode is the same in every run
    and the engine's answer store keeps its turns (`Engine.generate`)."""
    def policy(conversations: list[list[dict]]) -> list:
        return engine.generate(conversations, use_adapter=use_adapter, max_new_tokens=max_new_tokens,
                               batch_size=batch_size, progress=False,
                               schemas=None if schema is None else [schema] * len(conversations),
                               temperature=temperature, seed=seed if schema is not None else None)
    return policy


def next_calls(policy, tools: ReportTools, tasks: list[dict]) -> list[dict]:
    """For every gold step: the model's next action on the gold prefix (`task["messages"][:turn]`),
    checked by BFCL's AST rules against the gold action."""
    prefixes, golds = [], []
    for task in tasks:
        messages = task["messages"]
        for i, m in enumerate(messages):
            if m["role"] == "assistant":
                call = m["tool_calls"][0]["function"]
                prefixes.append(messages[:i])
                golds.append((task, i, chat.Action(m["content"], call["name"], call["arguments"])))
    out = []
    for (task, turn, gold), gen in zip(golds, policy(prefixes)):
        pred = chat.parse_action(gen.text)
        checked = scoring.ast_check(pred, scoring.expected_call(gold, task), tools.schemas, task)
        out.append({"task_id": task["task_id"], "batch": task["batch"], "turn": turn, "gold_tool": gold.tool,
                    "gold_text": gold.text(), "pred_tool": pred.tool if pred else None, "text": gen.text, **checked})
    return out


def run_action(tools: ReportTools, text: str) -> dict:
    """The step an action's text makes in the environment, alone (no episode to append to): parsed, its arguments
    checked, its tool run — `finish` included, as a call. `clap train agent-rloo` scores each sampled action so."""
    action = chat.parse_action(text)
    if action is None:
        return {"text": text, "valid": False, "tool": None, "arguments": None, "observation": "", "ok": False}
    valid = tools.argument_problem(action.tool, action.arguments) is None
    returned, ok = tools.call(action.tool, action.arguments) if valid else ("", False)
    return {"text": text, "valid": valid, "tool": action.tool, "arguments": action.arguments,
            "observation": returned, "ok": ok}
