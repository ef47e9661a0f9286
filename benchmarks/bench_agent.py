"""Agent rollouts: the batched loop (every live episode stepped in one generation) beside a plain
one-episode-at-a-time loop, on the same model, tasks and grammar; greedy, so the outputs must agree.

    .venv/bin/python benchmarks/bench_agent.py [--n 12] [--adapter models/agent_sft/adapter] [--batch-size 16]

Prints episodes/s and generated tokens/s of both, and how many episodes ended identically (same
turns, same answer). Run it alone: two torch jobs on two cores slow each other down ~5×.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from clap.agent import chat
from clap.agent.episode import engine_policy, one_at_a_time, rollout
from clap.agent.tools import ReportTools
from clap.evaluate.generate import Engine
from clap.model import resolve_base
from clap.release.serving import pinned_expectation
from clap.stages.agent_tasks import load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--adapter", type=Path, default=Path("models/agent_sft/adapter"))
    ap.add_argument("--max-steps", type=int, default=7)
    ap.add_argument("--turn-tokens", type=int, default=80)
    args = ap.parse_args()
    base = resolve_base("smollm2", Path("models/base"))
    tools = ReportTools(pd.read_parquet("data/assets/chunks.parquet"))
    tasks = load(Path("data/agent"), "eval")[: args.n]
    adapter = args.adapter if args.adapter.exists() else None
    engine = Engine(base, adapter, pinned_expectation(Path("."), adapter) if adapter else None,
                    chat_template=chat.CHAT_TEMPLATE, tools=tools.schemas)
    policy = engine_policy(engine, adapter is not None, args.turn_tokens, args.batch_size,
                           chat.action_schema(tools.schemas))
    runs = {}
    for name, loop in (("batched", rollout), ("one_at_a_time", one_at_a_time)):
        t = time.perf_counter()
        episodes = loop(policy, tools, tasks, args.max_steps, 10 * args.turn_tokens)
        runs[name] = (time.perf_counter() - t, episodes)
    same = sum(a["steps"] == b["steps"] and a["answer"] == b["answer"]
               for a, b in zip(runs["batched"][1], runs["one_at_a_time"][1]))
    print(json.dumps({"episodes": len(tasks), "model": "agent_sft" if adapter else "base", "batch_size": args.batch_size,
                      **{name: {"s": round(s, 1), "episodes_s": round(len(eps) / s, 4),
                                "tokens_s": round(sum(e["new_tokens"] for e in eps) / s, 1),
                                "turns": sum(len(e["steps"]) for e in eps)} for name, (s, eps) in runs.items()},
                      "speedup": round(runs["one_at_a_time"][0] / runs["batched"][0], 2),
                      "identical_episodes": same}, indent=1))


if __name__ == "__main__":
    main()
