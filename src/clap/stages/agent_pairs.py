"""agent pairs: on-policy hard negatives — the agent adapter's own wrong actions, paired with gold.

    clap agent-pairs            (DVC stage `agent_pairs`, writes data/agent_pairs/)

For every step of every train trajectory, the current agent adapter (models/agent_sft) writes its next
action on the gold conversation so far, greedy and in `agent.dpo.mine_samples` sampled draws. Each
action BFCL's AST rules reject — the wrong tool ("when"), wrong arguments ("how") or no action at all —
becomes a DPO pair: the gold action chosen, the model's own action rejected, at the state where it
went wrong. These are the mistakes this adapter actually makes, not synthetic corruptions, so DPO
spends its updates where the policy is wrong. Duplicates (same state, same text) are kept once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from clap.agent import chat
from clap.agent.episode import engine_policy, next_calls
from clap.agent.tasks import load
from clap.config import Agent
from clap.io import atomic_dir, check_output_dir, write_json, write_jsonl


def run(a: Agent, tasks_dir: Path, engine, tools, out: Path, *, constrained: bool) -> dict:
    """`a`: the `agent` section (the mining draws, turn size and sampling); `constrained`: actions under the action
    grammar (`generate.constrained`)."""
    check_output_dir(out, (Path(tasks_dir),))
    d = a.dpo
    tasks = load(tasks_dir, "train")
    by_id = {t["task_id"]: t for t in tasks}
    schema = chat.action_schema(tools.schemas) if constrained else None
    draws = [("greedy", engine_policy(engine, "agent_sft", a.turn_tokens, a.evaluate.batch_size, schema))]
    for k in range(d.mine_samples):  # seeded per request by the draw's seed below: the same draws every run
        draws.append((f"sample{k}", engine_policy(engine, "agent_sft", a.turn_tokens, a.evaluate.batch_size, schema,
                                                  a.evaluate.temperature, seed=2000 + len(draws))))
    pairs, seen, checked = [], set(), 0
    for k, (draw, policy) in enumerate(draws):
        torch.manual_seed(2000 + k)
        for call in next_calls(policy, tools, tasks):
            checked += 1
            key = (call["task_id"], call["turn"], call["text"])
            if call["args_ok"] or key in seen:
                continue
            seen.add(key)
            reason = "format" if call["pred_tool"] is None else "tool" if not call["tool_ok"] else "arguments"
            pairs.append({"pair_id": "p" + hashlib.sha256(repr(key).encode()).hexdigest()[:12],
                          "task_id": call["task_id"], "batch": call["batch"], "turn": call["turn"], "draw": draw,
                          "reason": reason, "prompt_messages": by_id[call["task_id"]]["messages"][:call["turn"]],
                          "chosen": call["gold_text"], "rejected": call["text"]})
    report = {"states": checked // len(draws), "draws": len(draws), "pairs": len(pairs),
              "by_reason": {r: sum(p["reason"] == r for p in pairs) for r in ("format", "tool", "arguments")}}
    with atomic_dir(out, (Path(tasks_dir),)) as tmp:
        write_jsonl(tmp / "pairs.jsonl", pairs)
        write_json(tmp / "report.json", report)
    return report
