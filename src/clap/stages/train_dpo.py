"""train dpo: LoRA DPO on the admitted preference pairs (chosen vs near-miss / rejected decisions).

    clap train dpo             (DVC stage `train_dpo`, writes models/dpo/)

The reference policy is the base model with the adapter switched off (PEFT), so no second copy of
the weights is held. The guard watches loss and the chosen-minus-rejected reward margin.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import model as base_model
from clap.guards import GuardCallback
from clap.prompts import SYSTEM_DECIDE
from clap.stages.train_common import admitted_rows, finish, lora_config, resume_point


def build_dataset(rows: list[dict]):
    from datasets import Dataset

    def msg(role, text):
        return [{"role": role, "content": text}]

    return Dataset.from_list([{"prompt": msg("system", SYSTEM_DECIDE) + msg("user", r["prompt"]),
                               "chosen": msg("assistant", r["chosen"]), "rejected": msg("assistant", r["rejected"])}
                              for r in rows])


def run(cfg: dict, materialized: Path, admission: Path, batches: list[str], base_dir: Path, out: Path,
        checkpoints: Path, callbacks: list | None = None) -> dict:
    import torch
    from trl import DPOConfig, DPOTrainer

    started = time.time()
    d, t = cfg["train"]["dpo"], cfg["train"]
    rows, refused = admitted_rows(materialized, admission, batches, "dpo", "dpo_pairs.jsonl")
    tok = base_model.load_tokenizer(base_dir)
    model = base_model.load_model(base_dir)
    cuda = torch.cuda.is_available()
    args = DPOConfig(output_dir=str(checkpoints), max_steps=d["max_steps"], learning_rate=d["learning_rate"],
                     beta=d["beta"], per_device_train_batch_size=d["per_device_batch_size"],
                     logging_steps=d["logging_steps"], save_steps=max(1, d["max_steps"] // 2), save_total_limit=2,
                     report_to=[], seed=t["seed"], bf16=cuda and torch.cuda.is_bf16_supported(), use_cpu=not cuda,
                     max_length=512, dataloader_num_workers=0)
    guard = GuardCallback("dpo", t["guards"], Path(out) / "guard_report.json")
    trainer = DPOTrainer(model=model, args=args, train_dataset=build_dataset(rows), processing_class=tok,
                         peft_config=lora_config(cfg["train"]["sft"]), callbacks=[*(callbacks or []), guard])
    base_identity = base_model.identity(base_dir)  # hashes the weights: once per run
    resume = resume_point(checkpoints, {"cfg": t["dpo"], "seed": t["seed"],
                                          "lora": [t["sft"][x] for x in ("lora_r", "lora_alpha", "lora_dropout", "target_modules")], "rows": rows, "base": base_identity})
    trainer.train(resume_from_checkpoint=resume)
    return finish(trainer, guard, out, "dpo", base_identity,
                  {"pairs": len(rows), "batches_refused": refused, "resumed_from": resume}, started)
