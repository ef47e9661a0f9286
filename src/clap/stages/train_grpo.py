"""train grpo: LoRA GRPO on the admitted decision prompts with the composite reward.

    clap train grpo            (DVC stage `train_grpo`, writes models/grpo/)

The paper used GRPO as a failure-boundary probe: static admission passed, yet KL peaked at
168–6712 at runtime. So the KL coefficient is non-zero by default (the KL guard needs the signal and
fails closed without it), and the guard watches KL level and spikes, reward collapse and clipped
completions. A held GRPO run is evidence for the gate, not a failure of the pipeline.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from clap import model as base_model
from clap.guards import GuardCallback
from clap.prompts import SYSTEM_DECIDE
from clap.rewards import decision_reward
from clap.stages.train_common import admitted_rows, finish, lora_config, resume_point


def build_dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "system", "content": SYSTEM_DECIDE},
                                          {"role": "user", "content": r["prompt"]}],
                               "reference_json": r["reference_json"]} for r in rows])


def make_reward(weights: dict, max_chars: int):
    def composite_reward(completions, reference_json, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [decision_reward(t, json.loads(r), weights, max_chars) for t, r in zip(texts, reference_json)]
    return composite_reward


def run(cfg: dict, materialized: Path, admission: Path, batches: list[str], base_dir: Path, out: Path,
        checkpoints: Path, callbacks: list | None = None, reward_funcs: list | None = None) -> dict:
    """`reward_funcs` replaces the composite reward (tests use one a random model can vary)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    started = time.time()
    g, t = cfg["train"]["grpo"], cfg["train"]
    rows, refused = admitted_rows(materialized, admission, batches, "grpo", "grpo_groups.jsonl")
    tok = base_model.load_tokenizer(base_dir)
    tok.padding_side = "left"
    model = base_model.load_model(base_dir)
    cuda = torch.cuda.is_available()
    args = GRPOConfig(output_dir=str(checkpoints), max_steps=g["max_steps"], learning_rate=g["learning_rate"],
                      beta=g["beta"], num_generations=g["num_generations"],
                      max_completion_length=g["max_completion_length"],
                      per_device_train_batch_size=g["per_device_batch_size"], logging_steps=g["logging_steps"],
                      save_steps=max(1, g["max_steps"] // 2), save_total_limit=2, report_to=[], seed=t["seed"],
                      bf16=cuda and torch.cuda.is_bf16_supported(), use_cpu=not cuda, dataloader_num_workers=0)
    guard = GuardCallback("grpo", t["guards"], Path(out) / "guard_report.json")
    trainer = GRPOTrainer(model=model, args=args, train_dataset=build_dataset(rows), processing_class=tok,
                          reward_funcs=reward_funcs or [make_reward(cfg["rewards"]["weights"], cfg["rewards"]["max_chars"])],
                          peft_config=lora_config(cfg["train"]["sft"]), callbacks=[*(callbacks or []), guard])
    base_identity = base_model.identity(base_dir)  # hashes the weights: once per run
    resume = resume_point(checkpoints, {"cfg": t["grpo"], "seed": t["seed"],
                                          "lora": [t["sft"][x] for x in ("lora_r", "lora_alpha", "lora_dropout", "target_modules")], "rows": rows, "base": base_identity})
    trainer.train(resume_from_checkpoint=resume)
    return finish(trainer, guard, out, "grpo", base_identity,
                  {"groups": len(rows), "batches_refused": refused, "resumed_from": resume, "beta": g["beta"]}, started)
