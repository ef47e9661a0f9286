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
from collections.abc import Iterator
from pathlib import Path

from clap import paths
from clap.agent import chat
from clap.agent.engine import agent_engine
from clap.agent.episode import engine_policy, next_calls
from clap.agent.tasks import load
from clap.agent.tools import ReportTools
from clap.config import Agent, Params
from clap.evaluate.engines import reuse_lines
from clap.io import atomic_dir, check_output_dir, require_inputs, write_json, write_jsonl, write_switched_off
from clap.stages.spec import StageSpec


def run(a: Agent, tasks_dir: Path, engine, tools, out: Path, *, constrained: bool) -> dict:
    """`a`: the `agent` section (the mining draws, turn size and sampling); `constrained`: actions under the action
    grammar (`generate.constrained`)."""
    import torch

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


def main(params: Params, tasks: Path = paths.AGENT_TASKS, assets: Path = paths.ASSETS,
         out: Path = paths.AGENT_PAIRS) -> Iterator[str]:
    """On-policy hard negatives: the agent SFT adapter's own wrong next actions on the train
    trajectories, each paired with the gold action (the agent DPO step's data)."""
    if not params.agent.enabled:
        yield write_switched_off("agent-pairs", "agent.enabled", out, ("pairs.jsonl",))
        return
    require_inputs([(tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"),
                    (paths.adapter("agent_sft"), "dvc repro train_agent_sft")])
    tools = ReportTools.over_batches(assets, params.data.batches)
    engine = agent_engine(params.generate, params.model, ["agent_sft"])
    report = run(params.agent, tasks, engine, tools, out, constrained=params.generate.constrained)
    yield from reuse_lines(engine)
    yield (f"agent pairs → {out}: {report['pairs']} from {report['states']} states × {report['draws']} draws; "
           f"by reason {report['by_reason']}")


STAGE = StageSpec(name="agent_pairs", group="agent", main=main)
