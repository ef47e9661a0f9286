"""Generation throughput: the batched engine beside a plain one-by-one `generate` loop.

    .venv/bin/python benchmarks/bench_generate.py [--n 24] [--batch-size 8] [--max-new-tokens 64] [--backend hf|vllm]
                                                  [--constrained] [--replay [--adapter models/sft/adapter]]

`--constrained` decodes every prompt under its answer schema (xgrammar, `clap.evaluate.decoding`) in both
the engine and the plain loop, so the outputs stay comparable; the HF engine then runs twice, token by
token (`generate.jump_forward: false`, the default) and with jump-forward (`true`, what the grammar
forces appended in one pass). `--replay` takes the replay's own requests instead — arm A (base + RAG) and, with the
candidate pinned by dvc.lock, arm B (adapter + RAG), each under its answer schema with locations — in a
repository after `dvc repro index` (and `train_sft` for arm B).

Same model (the real SmolLM2 base), same holdout prompts, same greedy outputs (checked), one run.
On a GPU: `--backend vllm --n 256 --batch-size 1` and `--batch-size 64` give the batch-1 and
batch-64 rows (the plain loop stays transformers `generate`, the peer the issue names).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from clap.domain import prompts
from clap.evaluate.decoding import answer_schema
from clap.evaluate.generate import Engine, plain_generate_loop
from clap.integrity import pinned_expectation
from clap.io import read_jsonl
from clap.model import resolve_base


def timed(engine, convs, use_adapter, args, schemas) -> tuple[float, list]:
    t = time.perf_counter()
    gens = engine.generate(convs, use_adapter=use_adapter, max_new_tokens=args.max_new_tokens,
                           batch_size=args.batch_size, progress=False, schemas=schemas)
    return time.perf_counter() - t, gens


def rate(seconds: float, n: int, tokens: int) -> dict:
    return {"s": round(seconds, 2), "samples_s": round(n / seconds, 3), "tokens_s": round(tokens / seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--samples", type=Path, default=Path("data/materialized/b1/sft_eval.jsonl"))
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--constrained", action="store_true")
    ap.add_argument("--replay", action="store_true")
    ap.add_argument("--adapter", type=Path, default=None)
    args = ap.parse_args()
    base = resolve_base("smollm2", Path("models/base"))
    if args.replay:
        import yaml

        from bench_precision import requests

        convs, schemas = requests(yaml.safe_load(Path("params.yaml").read_text()), args.n)
    else:
        rows = (read_jsonl(args.samples) * 10)[: args.n]
        convs = [prompts.messages(r["system"], r["prompt"]) for r in rows]
        schemas = [answer_schema([{"text": r["source"]}], with_location=False) for r in rows] if args.constrained else None
    expected = pinned_expectation(Path("."), args.adapter) if args.adapter else None
    hf = Engine(base, args.adapter, expected, dtype="auto")
    if args.backend == "vllm":
        from clap.evaluate.generate_vllm import VLLMEngine

        engine = VLLMEngine(base)
    else:
        engine = hf
    hf.generate(convs[:2], use_adapter=False, max_new_tokens=8, batch_size=2, progress=False)  # warm-up
    if schemas:
        [hf.grammars.compiled(s) for s in schemas]  # compiled once, outside every timing
    report = {"n": len(convs), "batch_size": args.batch_size, "backend": args.backend, "constrained": bool(schemas)}
    for arm, use_adapter in (("base", False), *((("adapter", True),) if args.adapter else ())):
        t_engine, gens = timed(engine, convs, use_adapter, args, schemas)
        with hf._context(use_adapter):
            t = time.perf_counter()
            ref = plain_generate_loop(hf.model, hf.tok, convs, args.max_new_tokens, schemas, hf.grammars)
            t_plain = time.perf_counter() - t
        ref_tokens = sum(len(hf.tok(r, add_special_tokens=False)["input_ids"]) for r in ref)
        row = {"engine": rate(t_engine, len(convs), sum(g.new_tokens for g in gens)),
               "plain_loop": rate(t_plain, len(convs), ref_tokens),
               "speedup_samples": round(t_plain / t_engine, 2),
               "identical_outputs": f"{sum(g.text == r for g, r in zip(gens, ref))}/{len(convs)}"}
        if schemas and args.backend == "hf":  # the same engine with jump-forward: what it buys, what it changes
            hf.jump_forward = True
            t_jump, jump_gens = timed(hf, convs, use_adapter, args, schemas)
            hf.jump_forward = False
            row["engine_jump_forward"] = rate(t_jump, len(convs), sum(g.new_tokens for g in jump_gens))
            row["speedup_samples_jump_forward"] = round(t_plain / t_jump, 2)
            row["identical_outputs_jump_forward"] = f"{sum(g.text == r for g, r in zip(jump_gens, ref))}/{len(convs)}"
        report[arm] = row
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
