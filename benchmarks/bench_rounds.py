"""How to train round k's candidate: from the base model on every admitted batch (what the pipeline does,
conf/config.yaml above `train:`) beside continued from the prod adapter on the new batch only — on the
demo's real data and model, both scored against the prod adapter (round 1's) on every batch's holdout:
old batches are where forgetting shows, the new one is where the new data should help.

    .venv/bin/python benchmarks/bench_rounds.py [--old b1,b2,b3] [--new b4] [--train-per-batch N] [--eval-per-batch N]

Reads data/materialized/ and params.yaml (run `dvc repro` first); trains three LoRA adapters with the
stage's SFT settings (round 1 from base on the old batches; round 2 both ways) and prints training time,
and per batch the overall score of prod and of each candidate with the candidate − prod delta and its
95 % paired-bootstrap CI. Writes benchmarks/runs/rounds.json. Run it alone: two torch jobs on two cores
slow each other down ~5×.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from clap import model as base_model
from clap.config import Params, load
from clap.evaluate.generate import Engine
from clap.integrity import adapter_manifest
from clap.io import read_jsonl, write_jsonl
from clap.stages import evaluate, train_sft
from clap.train.common import lora_config


def train(cfg: Params, base: Path, rows: list[dict], out: Path, start: Path | None) -> dict:
    """LoRA SFT with the stage's settings (`train_sft.sft_config`: bf16 autocast where native, length grouping);
    `start`: continue that adapter (trainable, its LoRA shape) instead of a fresh LoRA."""
    import torch
    from peft import PeftModel
    from trl import SFTTrainer

    s = cfg.train.sft.model_copy(update={"save_steps": 10**6})  # no checkpoints: nothing resumes here
    cuda = torch.cuda.is_available()
    tok = base_model.load_tokenizer(base)
    rows, too_long = train_sft.split_by_length(rows, tok, s.max_length)
    t0 = time.perf_counter()
    model = base_model.load_model(base)
    if start is not None:
        model = PeftModel.from_pretrained(model, str(start), is_trainable=True, use_safetensors=True)
    args = train_sft.sft_config(s, cfg.train.seed, out / "ckpt", padding_free=False,
                                bf16=base_model.use_bf16(s.bf16), cuda=cuda)
    trainer = SFTTrainer(model=model, args=args, train_dataset=train_sft.build_dataset(rows), processing_class=tok,
                         peft_config=None if start is not None else lora_config(s, model))
    trainer.train()
    trainer.model.save_pretrained(str(out / "adapter"))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"rows": len(rows), "set_aside_too_long": len(too_long), "steps": trainer.state.global_step,
            "last_logged_loss": losses[-1] if losses else None, "s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default="b1,b2,b3")
    ap.add_argument("--new", default="b4")
    ap.add_argument("--train-per-batch", type=int, default=None, help="default: every materialized train row")
    ap.add_argument("--eval-per-batch", type=int, default=None, help="default: the whole holdout")
    args = ap.parse_args()
    cfg = load(Path("params.yaml"))
    cfg.evaluate.unconstrained_format_check = False  # the format question is not this benchmark's
    base = base_model.resolve(cfg.model)
    identity = base_model.identity(base)
    old, new = args.old.split(","), args.new.split(",")
    mat = Path("data/materialized")
    train_rows = {b: read_jsonl(mat / b / "sft_train.jsonl")[: args.train_per_batch] for b in old + new}
    work = Path(tempfile.mkdtemp(prefix="bench_rounds-"))
    samples = {}
    for b in old + new:
        samples[b] = work / "samples" / f"{b}.jsonl"
        write_jsonl(samples[b], read_jsonl(mat / b / "sft_eval.jsonl")[: args.eval_per_batch])

    training = {"prod": train(cfg, base, [r for b in old for r in train_rows[b]], work / "prod", None)}  # round 1
    modes = {"from_base": ([r for b in old + new for r in train_rows[b]], None),
             "continued_from_prod": ([r for b in new for r in train_rows[b]], work / "prod" / "adapter")}
    result = {"old": old, "new": new, "train_per_batch": args.train_per_batch, "eval_per_batch": args.eval_per_batch,
              "training": training, "modes": {}}
    prod_dir = work / "prod" / "adapter"
    for mode, (rows, start) in modes.items():
        training[mode] = train(cfg, base, rows, work / mode, start)
        cand = work / mode / "adapter"
        engine = Engine(base, cand, adapter_manifest(cand, identity), prod_dir=prod_dir,
                        prod_expected=adapter_manifest(prod_dir, identity), answer_store=work / "answers")
        per_batch = {}
        for b in old + new:
            m = evaluate.run(cfg.evaluate, samples[b], engine, work / mode / "eval" / b, b, work / mode / "metrics" / f"{b}.json", constrained=cfg.generate.constrained)
            d = m["deltas_vs_prod"]["overall_score"]
            prod, cand = m["metrics"]["prod"], m["metrics"]["candidate"]
            per_batch[b] = {"prod": prod["overall_score"], "candidate": cand["overall_score"],
                            "delta": d["delta"], "ci": [d["ci_low"], d["ci_high"]],
                            "value_accuracy": [prod["value_accuracy"], cand["value_accuracy"]]}
        del engine
        result["modes"][mode] = {"per_batch": per_batch, **{
            f"mean_delta_{part}": round(statistics.fmean(per_batch[b]["delta"] for b in batches), 4)
            for part, batches in (("old", old), ("new", new))}}
    out = Path("benchmarks/runs/rounds.json")
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
