"""Generation throughput: the batched engine beside a plain one-by-one `generate` loop.

    .venv/bin/python benchmarks/bench_generate.py [--n 24] [--batch-size 8] [--max-new-tokens 64] [--backend hf|vllm]
                                                  [--constrained]

`--constrained` decodes every prompt under its answer schema (xgrammar, `clap.evaluate.decoding`) in both
the engine and the plain loop, so the outputs stay comparable.

Same model (the real SmolLM2 base), same holdout prompts, same greedy outputs (checked), one run.
On a GPU: `--backend vllm --n 256 --batch-size 1` and `--batch-size 64` give the batch-1 and
batch-64 rows (the plain loop stays transformers `generate`, the peer the issue names).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from clap import prompts
from clap.evaluate.decoding import answer_schema
from clap.evaluate.generate import Engine, plain_generate_loop
from clap.io import read_jsonl
from clap.model import resolve_base


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--samples", type=Path, default=Path("data/materialized/b1/sft_eval.jsonl"))
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--constrained", action="store_true")
    args = ap.parse_args()
    base = resolve_base("smollm2", Path("models/base"))
    rows = (read_jsonl(args.samples) * 10)[: args.n]
    convs = [prompts.messages(r["system"], r["prompt"]) for r in rows]
    hf = Engine(base)
    if args.backend == "vllm":
        from clap.evaluate.generate_vllm import VLLMEngine

        engine = VLLMEngine(base)
    else:
        engine = hf
    t = time.perf_counter()
    schemas = [answer_schema([{"text": r["source"]}], with_location=False) for r in rows] if args.constrained else None
    gens = engine.generate(convs, use_adapter=False, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                           progress=False, schemas=schemas)
    t_engine = time.perf_counter() - t
    tokens = sum(g.new_tokens for g in gens)
    t = time.perf_counter()
    ref = plain_generate_loop(hf.model, hf.tok, convs, args.max_new_tokens, schemas, hf.grammars)
    t_plain = time.perf_counter() - t
    ref_tokens = sum(len(hf.tok(r, add_special_tokens=False)["input_ids"]) for r in ref)
    same = sum(g.text == r for g, r in zip(gens, ref))
    print(json.dumps({"n": len(convs), "batch_size": args.batch_size, "backend": args.backend,
                      "constrained": args.constrained,
                      "engine": {"s": round(t_engine, 2), "samples_s": round(len(convs) / t_engine, 3),
                                 "tokens_s": round(tokens / t_engine, 1)},
                      "plain_loop": {"s": round(t_plain, 2), "samples_s": round(len(convs) / t_plain, 3),
                                     "tokens_s": round(ref_tokens / t_plain, 1)},
                      "speedup_samples": round(t_plain / t_engine, 2), "identical_outputs": f"{same}/{len(convs)}"},
                     indent=2))


if __name__ == "__main__":
    main()
