"""Agent rollouts: the batched loop (every live episode stepped in one generation), the same with prefix reuse
(each turn prefills only what follows the conversation the model already read, `clap.evaluate.prefix_cache`),
beside a plain one-episode-at-a-time loop, on the same model, tasks and grammar; greedy, so the outputs must agree.

    .venv/bin/python benchmarks/bench_agent.py [--n 12] [--adapter models/agent_sft/adapter] [--batch-size 16]
                                               [--dtype auto] [--prefix-tokens 65536]

Needs `data/agent/` (`clap agent-tasks`); without the adapter folder the base model answers. Prints episodes/s,
generated tokens/s and prompt tokens prefilled of each, and how many episodes ended identically to the plain
loop's (same turns, same answer). Run it alone: two torch jobs on two cores slow each other down ~5×.
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
from clap.evaluate.prefix_cache import PrefixCache
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
    ap.add_argument("--dtype", default="auto", help="generate.dtype: auto | float32 | bfloat16")
    ap.add_argument("--prefix-tokens", type=int, default=65536, help="generate.prefix_cache_tokens of the reusing run")
    args = ap.parse_args()
    base = resolve_base("smollm2", Path("models/base"))
    tools = ReportTools(pd.read_parquet("data/assets/chunks.parquet"))
    tasks = load(Path("data/agent"), "eval")[: args.n]
    adapter = args.adapter if args.adapter.exists() else None
    engine = Engine(base, adapter, pinned_expectation(Path("."), adapter) if adapter else None,
                    chat_template=chat.CHAT_TEMPLATE, tools=tools.schemas, dtype=args.dtype)
    policy = engine_policy(engine, adapter is not None, args.turn_tokens, args.batch_size,
                           chat.action_schema(tools.schemas))
    prefilled = []

    def policy_counting(conversations: list) -> list:  # prompt tokens of a run without reuse: every prompt whole
        prefilled.append(sum(len(engine.encode(c)) for c in conversations))
        return policy(conversations)

    runs = {}
    for name, loop, reuse in (("batched", rollout, 0), ("batched_prefix_reuse", rollout, args.prefix_tokens),
                              ("one_at_a_time", one_at_a_time, 0)):
        engine.prefixes = PrefixCache(reuse) if reuse else None
        prefilled.clear()
        t = time.perf_counter()
        episodes = loop(policy_counting, tools, tasks, args.max_steps, 10 * args.turn_tokens)
        seconds = time.perf_counter() - t
        prompt_tokens = engine.prefixes.prefilled_tokens if reuse else sum(prefilled)
        runs[name] = (seconds, episodes, prompt_tokens)
    plain = runs["one_at_a_time"][1]
    print(json.dumps({"episodes": len(tasks), "model": "agent_sft" if adapter else "base", "batch_size": args.batch_size,
                      "precision": engine.precision,
                      **{name: {"s": round(s, 1), "episodes_s": round(len(eps) / s, 4),
                                "tokens_s": round(sum(e["new_tokens"] for e in eps) / s, 1),
                                "turns": sum(len(e["steps"]) for e in eps), "prompt_tokens_prefilled": tokens,
                                "speedup_vs_one_at_a_time": round(runs["one_at_a_time"][0] / s, 2),
                                "identical_to_one_at_a_time": sum(a["steps"] == b["steps"] and a["answer"] == b["answer"]
                                                                  for a, b in zip(eps, plain))}
                        for name, (s, eps, tokens) in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()
