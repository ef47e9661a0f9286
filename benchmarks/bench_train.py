"""SFT throughput: `clap train sft` beside a plain TRL `SFTTrainer` script, same model/data/settings.

    .venv/bin/python benchmarks/bench_train.py [--steps 6] [--model models/base] [--seed N]

Both run `--steps` optimiser steps on the same admitted SFT samples with the same LoRA settings,
batch size and accumulation; tokens/s counts the tokens each trainer actually consumed. The plain
script is what a user would write from the TRL docs (messages format, default padding collator,
TRL's default gradient checkpointing). On CUDA the project also switches to 4-bit QLoRA / bf16.
Each trainer runs in its own process, one after the other, so each peak RSS is its own. A third run,
`clap_fp32`, is the project's trainer with `train.sft.bf16: off`: the same trainer and loss, so its
final loss beside `clap`'s shows what bf16 autocast changes (the plain script's loss is over every
token of the conversation, the project's over the answer only, so those two losses do not compare).
A fourth, `clap_tiled`, is the project's trainer with TRL's own LM head (every position projected onto the
vocabulary in tiles, on CPU) instead of `clap.train.labelled_head`'s (the labelled positions only): same
loss, so its speed and memory beside `clap`'s are what computing the head only where the loss is saves.
A fifth, `clap_whole`, is the project's trainer with `train.sft.memory_budget_mb: null`: each batch forwarded
whole, as before micro-batches; beside `clap` (the budget in params.yaml) it shows what the budget saves in peak
memory and costs in samples/s, and the two loss curves (`losses`, one a step) show the trajectory is the same.
`--runs` picks which run, in order; `--repeat N` runs the list N times, interleaved, and reports the median.
`--set train.sft.KEY=VALUE` sizes every run alike (e.g. the demo's batch on another project's rows).
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from clap.config import Params, load
from clap.io import read_jsonl
from clap.model import load_model, load_tokenizer
from clap.stages import train_sft
from clap.train.common import lora_config

TRAINERS = ("clap", "clap_whole", "clap_tiled", "clap_fp32", "plain")


def plain_trl(cfg: Params, rows: list[dict], model_dir: Path, out: Path, steps: int) -> dict:
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    s = cfg.train.sft
    ds = Dataset.from_list([{"messages": [{"role": "system", "content": r["system"]},
                                          {"role": "user", "content": r["prompt"]},
                                          {"role": "assistant", "content": r["target"]}]} for r in rows])
    args = SFTConfig(output_dir=str(out), max_steps=steps, learning_rate=s.learning_rate,
                     per_device_train_batch_size=s.per_device_batch_size,
                     gradient_accumulation_steps=s.gradient_accumulation, logging_steps=1, save_strategy="no",
                     report_to=[], max_length=s.max_length, use_cpu=not torch.cuda.is_available(),
                     include_num_input_tokens_seen="all", bf16=torch.cuda.is_available())
    model = load_model(model_dir)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds,
                         processing_class=load_tokenizer(model_dir), peft_config=lora_config(s, model))
    t = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t
    return {"steps": trainer.state.global_step, "tokens": trainer.state.num_input_tokens_seen, "s": round(wall, 2),
            "tokens_s": round(trainer.state.num_input_tokens_seen / wall, 1),
            "loss": next((h["train_loss"] for h in trainer.state.log_history if "train_loss" in h), None)}


def sized(overrides: list[str]) -> Params:
    """params.yaml with `train.sft.KEY=VALUE` overrides (YAML values), validated as the stage would."""
    cfg = copy.deepcopy(load(Path("params.yaml")))
    update = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if not key.startswith("train.sft."):
            raise SystemExit(f"--set {item}: only train.sft.KEY=VALUE")
        update[key.removeprefix("train.sft.")] = yaml.safe_load(value)
    cfg.train.sft = type(cfg.train.sft).model_validate(cfg.train.sft.model_dump() | update)
    return cfg


def one(which: str, steps: int, model: Path, seed: int | None = None, overrides: list[str] = ()) -> dict:
    cfg = sized(list(overrides))
    if seed is not None:  # LoRA init and data order: the seed-to-seed spread of the loss
        cfg.train.seed = seed
    cfg.train.sft = cfg.train.sft.model_copy(update=dict(max_steps=steps, save_steps=10_000, logging_steps=1))
    if which == "clap_whole":
        cfg.train.sft.memory_budget_mb = None
    if which == "clap_fp32":
        cfg.train.sft.bf16 = "off"
    if which == "clap_tiled":  # this process only: the project's trainer, TRL's own head
        from trl import SFTTrainer

        from clap.train.labelled_head import LabelledHeadSFTTrainer

        LabelledHeadSFTTrainer.compute_loss = SFTTrainer.compute_loss
    rows = [r for p in sorted(Path("data/materialized").glob("*/sft_train.jsonl")) for r in read_jsonl(p)]
    with tempfile.TemporaryDirectory() as tmp:
        if which == "plain":
            out = plain_trl(cfg, rows, model, Path(tmp) / "plain", steps)
        else:
            t = time.perf_counter()
            m = train_sft.run(cfg.train, Path("data/materialized"), Path("data/admission"), cfg.data.batches,
                              model, Path(tmp) / "clap", Path(tmp) / "ckpt")
            wall = time.perf_counter() - t
            log = list(csv.DictReader((Path(tmp) / "clap" / "train_log.csv").open()))
            out = {"steps": m["steps"], "tokens": m["tokens_seen"], "s": round(wall, 2), "loss": m["train_loss"],
                   "tokens_s": round(m["tokens_seen"] / wall, 1), "padding_free": m["padding_free"], "bf16": m["bf16"],
                   "memory_budget_mb": m["memory_budget_mb"], "gradient_checkpointing": m["gradient_checkpointing"],
                   "losses": [round(float(r["loss"]), 4) for r in log if r.get("loss")]}
    return out | {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--model", type=Path, default=Path("models/base"))
    ap.add_argument("--seed", type=int, help="train.seed of the project's runs (default: params.yaml's; the plain script keeps TRL's)")
    ap.add_argument("--only", choices=TRAINERS, help="run one trainer in this process (used internally)")
    ap.add_argument("--runs", default=",".join(TRAINERS), help="comma-separated trainers to run, in this order")
    ap.add_argument("--repeat", type=int, default=1, help="run the list this many times, interleaved")
    ap.add_argument("--set", action="append", default=[], metavar="train.sft.KEY=VALUE",
                    help="size every run alike, e.g. --set train.sft.per_device_batch_size=4")
    args = ap.parse_args()
    common = ["--steps", str(args.steps), "--model", str(args.model),
              *(["--seed", str(args.seed)] if args.seed is not None else []), *(f"--set={x}" for x in args.set)]
    if args.only:
        print("RESULT " + json.dumps(one(args.only, args.steps, args.model, args.seed, args.set)))
        return
    tries: dict[str, list[dict]] = {}
    for _ in range(args.repeat):
        for which in args.runs.split(","):
            done = subprocess.run([sys.executable, __file__, "--only", which, *common],
                                  capture_output=True, text=True, check=True)
            tries.setdefault(which, []).append(
                json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))[7:]))
    cfg = sized(args.set)
    samples = args.steps * cfg.train.sft.per_device_batch_size * cfg.train.sft.gradient_accumulation
    runs = {}
    for which, done in tries.items():
        runs[which] = done[0] | {"s": statistics.median(r["s"] for r in done),
                                 "peak_rss_mb": max(r["peak_rss_mb"] for r in done),
                                 "s_each": [r["s"] for r in done]}
        runs[which]["samples_s"] = round(samples / runs[which]["s"], 3)
    ratios = {f"samples_s_{which}_over_{peer}": round(runs[which]["samples_s"] / runs[peer]["samples_s"], 2)
              for which, peer in (("clap", "plain"), ("clap_fp32", "plain"), ("clap", "clap_tiled"),
                                  ("clap", "clap_whole"))
              if which in runs and peer in runs}
    if "clap" in runs and "plain" in runs:
        ratios["tokens_s_clap_over_plain"] = round(runs["clap"]["tokens_s"] / runs["plain"]["tokens_s"], 2)
    print(json.dumps({"sizing": {k: getattr(cfg.train.sft, k) for k in (
        "per_device_batch_size", "gradient_accumulation", "max_length", "memory_budget_mb")}, "steps": args.steps}
        | runs | {"ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()
