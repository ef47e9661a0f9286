"""The engine's grammar loop beside transformers' `generate` with xgrammar's logits processor, in one process.

    .venv/bin/python benchmarks/bench_grammar_loop.py {eval|replay|norag} [--adapter models/sft/adapter] [--arm base]

Same batches (length-sorted, left-padded, `evaluate.*` or `replay.*` batch size and token limit), same
grammars, same weights (bf16 where native): `generate` + `xgrammar.contrib.hf.LogitsProcessor` + the stop at
the JSON end (what `Engine.generate` ran until 2026-12-02) against `clap.evaluate.generate.decode_under_grammar`
token by token: with transformers' `DynamicCache` (a `torch.cat` of the whole cache every step) and PEFT's unmerged
adapter (the loop before 2026-12-03), with the loop's `GrowingCache`, then with the adapter folded into the weights
(`generate.merge_adapters: true`, the default), and with jump-forward (`generate.jump_forward: true`). Requests: `eval`,
the holdout prompts of b1 and b2 (one chunk, schema without location); `replay`, the replay's first 20 requests
over the retrieved chunks (arms A / B); `norag`, the same questions with no chunk (arms C / D). Prints seconds
per variant (the best of `--repeat` interleaved rounds, each round listed) and how many answers equal
`generate`'s, per arm. Run in a repository after `dvc repro index
train_sft`; nothing else running.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch
import yaml
from transformers import DynamicCache, LogitsProcessorList, StoppingCriteriaList

from bench_precision import requests
from clap.domain import prompts
from clap.evaluate import generate as gen
from clap.evaluate.decoding import answer_schema
from clap.evaluate.merged_lora import MergedAdapters
from clap.integrity import pinned_expectation
from clap.io import read_jsonl
from clap.stages import replay


def workload(cfg: dict, kind: str) -> tuple[list, list, int, int]:
    if kind == "eval":
        samples = [s for b in ("b1", "b2") for s in read_jsonl(Path("data/materialized") / b / "sft_eval.jsonl")]
        convs = [prompts.messages(s["system"], s["prompt"]) for s in samples]
        schemas = [answer_schema([{"text": s["source"]}], with_location=False) for s in samples]
        return convs, schemas, cfg["evaluate"]["batch_size"], cfg["evaluate"]["max_new_tokens"]
    if kind == "replay":
        convs, schemas = requests(cfg, 20)
    else:
        cases = [c for b in ("b1", "b2") for c in read_jsonl(Path("data/materialized") / b / "replay_cases.jsonl")][:20]
        convs, schemas = replay.requests(cases, [[] for _ in cases], constrained=True)
    return convs, schemas, cfg["replay"]["batch_size"], cfg["replay"]["max_new_tokens"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["eval", "replay", "norag"])
    ap.add_argument("--adapter", type=Path, default=Path("models/sft/adapter"))
    ap.add_argument("--arm", choices=["adapter", "base", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=3, help="rounds over the variants, interleaved; the best round counts")
    args = ap.parse_args()
    cfg = yaml.safe_load(Path("params.yaml").read_text())
    convs, schemas, batch_size, max_new = workload(cfg, args.kind)
    engine = gen.Engine(Path("models/base"), args.adapter, pinned_expectation(Path("."), args.adapter), dtype="auto")
    merged = MergedAdapters(engine.model)
    engine.generate(convs[:2], use_adapter=False, max_new_tokens=8, batch_size=2, progress=False)  # warm-up
    compiled = [engine.grammars.compiled(s) for s in schemas]  # compiled once, outside every timing
    encoded = [engine.encode(c) for c in convs]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    pad = engine.tok.pad_token_id

    def hf_generate(ids, mask, idx):
        width = ids.shape[1]
        out = engine.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                                    use_cache=True, pad_token_id=pad,
                                    logits_processor=LogitsProcessorList([engine.grammars.processor([schemas[i] for i in idx])]),
                                    stopping_criteria=StoppingCriteriaList([gen.StopOnJsonEnd(engine.tok, width)]))
        return [out[r, width:].tolist() for r in range(len(idx))]

    def loop(jump_forward: bool, cat_cache: bool = False, merge: bool = False):
        def run(ids, mask, idx):
            cache = DynamicCache(config=engine.model.config) if cat_cache else None
            with merged.active("candidate") if merge else contextlib.nullcontext():
                return gen.decode_under_grammar(engine.model, ids, mask, [compiled[i] for i in idx], max_new,
                                                jump_forward, cache=cache)
        return run

    def decode(use_adapter, variant) -> list[str]:
        texts = [""] * len(encoded)
        with engine._context(use_adapter), torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                width = max(len(encoded[i]) for i in idx)
                ids = torch.tensor([[pad] * (width - len(encoded[i])) + encoded[i] for i in idx])
                mask = torch.tensor([[0] * (width - len(encoded[i])) + [1] * len(encoded[i]) for i in idx])
                for i, row in zip(idx, variant(ids, mask, idx)):
                    texts[i] = gen.truncate_at_json_end(engine.tok.decode(row, skip_special_tokens=True))
        return texts

    per_arm = {"adapter": (True, (("generate + xgrammar processor", hf_generate),
                                  ("loop, DynamicCache, unmerged", loop(False, cat_cache=True)),  # before 2026-12-03
                                  ("loop, token by token, unmerged", loop(False)),
                                  ("loop, token by token, merged", loop(False, merge=True)),  # the default
                                  ("loop, jump-forward, merged", loop(True, merge=True)))),
               "base": (False, (("generate + xgrammar processor", hf_generate),  # nothing to merge
                                ("loop, DynamicCache", loop(False, cat_cache=True)),
                                ("loop, token by token", loop(False)),
                                ("loop, jump-forward", loop(True))))}
    for arm in per_arm if args.arm == "both" else (args.arm,):
        use_adapter, variants = per_arm[arm]
        seconds: dict[str, list[float]] = {name: [] for name, _ in variants}
        texts: dict[str, list[str]] = {}
        for _ in range(args.repeat):  # interleaved, so a slow spell of the VM hits every variant alike
            for name, variant in variants:
                t = time.perf_counter()
                texts[name] = decode(use_adapter, variant)
                seconds[name].append(time.perf_counter() - t)
        ref = texts[variants[0][0]]
        line = f"{args.kind} {arm}:"
        for name, _ in variants:
            same = sum(a == b for a, b in zip(texts[name], ref))
            line += f" | {name} {min(seconds[name]):.1f} s (rounds: {', '.join(f'{x:.1f}' for x in seconds[name])}; {same}/{len(ref)} as generate)"
        print(line, flush=True)

if __name__ == "__main__":
    main()
