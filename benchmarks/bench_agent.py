"""Agent rollouts: the batched loop (every live episode stepped in one generation), the same with prefix reuse
(each turn prefills only what follows the conversation the model already read, `clap.evaluate.prefix_cache`),
beside a plain one-episode-at-a-time loop, on the same model, tasks and grammar; greedy, so the outputs must agree.

    .venv/bin/python benchmarks/bench_agent.py [--n 12] [--adapter models/agent_sft/adapter] [--batch-size 16]
                                               [--dtype auto] [--prefix-tokens 65536] [--temperature 0.7]

Needs `data/agent/` (`clap agent-tasks`); without the adapter folder the base model answers. Prints episodes/s,
generated tokens/s and prompt tokens prefilled of each, and how many episodes ended identically to the plain
loop's (same turns, same answer). Run it alone: two torch jobs on two cores slow each other down ~5×.

`--temperature T` (> 0) measures sampled episodes instead (the pass^k runs and the mined draws): transformers'
`generate(do_sample=True)` with xgrammar's logits processor, batched over the live episodes (what the engine ran
for sampled rows until 2026-12-03), beside the engine's own grammar loop sampling the same way
(`clap.evaluate.generate.Sampling`), without and with prefix reuse. Draws differ between the paths, so it prints
what the episodes did (turns, well-formed turns, finished) instead of a match count; each run starts from
`torch.manual_seed(--seed)`. The last path draws with a generator per request seeded by `--seed` and its prompt (what
`evaluate_agent` and `agent_pairs` run since 2026-12-03: the same episodes in every run, stored like greedy answers).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import LogitsProcessorList, StoppingCriteriaList

from clap.agent import chat
from clap.agent.episode import engine_policy, one_at_a_time, rollout
from clap.agent.tasks import load
from clap.agent.tools import ReportTools
from clap.evaluate.generate import Engine, Generation, StopOnJsonEnd, truncate_at_json_end
from clap.evaluate.prefix_cache import PrefixCache
from clap.integrity import pinned_expectation
from clap.model import resolve_base


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--adapter", type=Path, default=Path("models/agent_sft/adapter"))
    ap.add_argument("--max-steps", type=int, default=7)
    ap.add_argument("--turn-tokens", type=int, default=80)
    ap.add_argument("--dtype", default="auto", help="generate.dtype: auto | float32 | bfloat16")
    ap.add_argument("--prefix-tokens", type=int, default=65536, help="generate.prefix_cache_tokens of the reusing run")
    ap.add_argument("--temperature", type=float, default=0.0, help="> 0: sampled episodes, generate() vs the loop")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    base = resolve_base("smollm2", Path("models/base"))
    tools = ReportTools(pd.read_parquet("data/assets/chunks.parquet"))
    tasks = load(Path("data/agent"), "eval")[: args.n]
    adapter = args.adapter if args.adapter.exists() else None
    engine = Engine(base, adapter, pinned_expectation(Path("."), adapter) if adapter else None,
                    chat_template=chat.CHAT_TEMPLATE, tools=tools.schemas, dtype=args.dtype)
    policy = engine_policy(engine, adapter is not None, args.turn_tokens, args.batch_size,
                           chat.action_schema(tools.schemas))
    if args.temperature > 0:
        return sampled(args, engine, adapter is not None, tools, tasks)
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


def generate_sampled_policy(engine: Engine, use_adapter: bool, max_new_tokens: int, batch_size: int, schema: dict,
                            temperature: float):
    """The peer: sampled turns through `generate(do_sample=True)` with xgrammar's logits processor, batched."""
    def policy(conversations: list) -> list:
        out, pad = [], engine.tok.pad_token_id
        with torch.inference_mode(), engine._context(use_adapter):
            for s in range(0, len(conversations), batch_size):
                encoded = [engine.encode(c) for c in conversations[s:s + batch_size]]
                width = max(map(len, encoded))
                ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
                mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
                gen = engine.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                            do_sample=True, temperature=temperature, use_cache=True, pad_token_id=pad,
                                            logits_processor=LogitsProcessorList([engine.grammars.processor(
                                                [schema] * len(encoded))]),
                                            stopping_criteria=StoppingCriteriaList([StopOnJsonEnd(engine.tok, width)]))
                for row in range(len(encoded)):
                    tokens = [t for t in gen[row, width:].tolist() if t != pad]
                    text = truncate_at_json_end(engine.tok.decode(tokens, skip_special_tokens=True))
                    out.append(Generation(text=text, new_tokens=len(tokens), latency_ms=0.0))
        return out
    return policy


def sampled(args, engine: Engine, use_adapter: bool, tools: ReportTools, tasks: list[dict]) -> None:
    schema = chat.action_schema(tools.schemas)
    runs = {}
    for name, policy, reuse in (
            ("generate_sampled", generate_sampled_policy(engine, use_adapter, args.turn_tokens, args.batch_size, schema,
                                                         args.temperature), 0),
            ("loop_sampled", engine_policy(engine, use_adapter, args.turn_tokens, args.batch_size, schema,
                                           args.temperature), 0),
            ("loop_sampled_prefix_reuse", engine_policy(engine, use_adapter, args.turn_tokens, args.batch_size, schema,
                                                        args.temperature), args.prefix_tokens),
            ("loop_seeded_per_request_prefix_reuse", engine_policy(engine, use_adapter, args.turn_tokens,
                                                                   args.batch_size, schema, args.temperature,
                                                                   seed=args.seed), args.prefix_tokens)):
        engine.prefixes = PrefixCache(reuse) if reuse else None
        torch.manual_seed(args.seed)
        t = time.perf_counter()
        episodes = rollout(policy, tools, tasks, args.max_steps, 10 * args.turn_tokens)
        runs[name] = (time.perf_counter() - t, episodes)
    peer = runs["generate_sampled"][0]
    print(json.dumps({"episodes": len(tasks), "model": "agent_sft" if use_adapter else "base",
                      "batch_size": args.batch_size, "precision": engine.precision, "temperature": args.temperature,
                      **{name: {"s": round(s, 1), "episodes_s": round(len(eps) / s, 4),
                                "tokens_s": round(sum(e["new_tokens"] for e in eps) / s, 1),
                                "turns": sum(len(e["steps"]) for e in eps),
                                "well_formed_turns": sum(st["valid"] for e in eps for st in e["steps"]),
                                "finished": sum(e["stop"] == "finish" for e in eps),
                                "speedup_vs_generate_sampled": round(peer / s, 2)}
                         for name, (s, eps) in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()
