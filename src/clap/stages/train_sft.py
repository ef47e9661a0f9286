"""train sft: LoRA (QLoRA on CUDA) supervised fine-tuning on the admitted extraction samples.

    clap train sft             (DVC stage `train_sft`, writes models/sft/)

Loss is on the answer only (prompt–completion data), and the LM head runs only there
(`clap.train.labelled_head`). Defaults follow the paper (r 16, alpha 32);
the learning rate and epochs in conf/ are sized for the 135M CPU demo, see the comments there.
Padding-free batching packs a batch into one row without pad tokens, which saves the compute
padding wastes on variable-length prompts; on CPU, where that does not pay, batches of similar
length (`group_by_length`) cut the padding instead. A killed run resumes from its last checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import lazy, paths
from clap import model as base_model
from clap.config import Sft, Train
from clap.data.admission import NotAdmitted
from clap.domain import prompts
from clap.train import guards
from clap.train.common import (
    admitted_rows,
    estimate_callback,
    finish,
    lora_config,
    memory_plan,
    planned_steps,
    resume_point,
    run_training,
    sizing_line,
)
from clap.train.spec import EXTRACTION, Call, TrainerSpec

labelled_head = lazy.module("clap.train.labelled_head")  # extends TRL's trainer


def split_by_length(rows: list[dict], tok, max_length: int | None) -> tuple[list[dict], list[dict]]:
    """Rows whose whole conversation fits `max_length` tokens, and the others with their length.
    TRL truncates longer rows from the right — an answer cut mid-JSON, or dropped with its prompt when
    the prompt alone fills the window — so they are set aside here, by name, instead."""
    if max_length is None:
        return rows, []
    fits, too_long = [], []
    for r in rows:
        n = len(tok.apply_chat_template(prompts.messages(r["system"], r["prompt"], r["target"]), tokenize=True,
                                        return_dict=True)["input_ids"])
        if n <= max_length:
            fits.append(r)
        else:
            too_long.append(r | {"tokens": n})
    return fits, too_long


def build_dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{
        "prompt": [{"role": "system", "content": r["system"]}, {"role": "user", "content": r["prompt"]}],
        "completion": [{"role": "assistant", "content": r["target"]}]} for r in rows])


def run(train: Train, materialized: Path, admission: Path, batches: list[str], base_dir: Path, out: Path,
        checkpoints: Path, callbacks: list | None = None) -> dict:
    import torch
    from peft import prepare_model_for_kbit_training

    started = time.time()
    s, t = train.sft, train
    rows, refused = admitted_rows(materialized, admission, batches, "sft", "sft_train.jsonl")
    qlora = base_model.use_qlora(s.qlora)
    tok = base_model.load_tokenizer(base_dir)
    cuda = torch.cuda.is_available()
    padding_free = _padding_free(s.padding_free, cuda)
    bf16 = base_model.use_bf16(s.bf16)
    rows, too_long = split_by_length(rows, tok, None if padding_free else s.max_length)
    for r in too_long:
        print(f"clap: sft sets aside {r['batch']}/{r['sample_id']}: {r['tokens']} tokens > train.sft.max_length "
              f"{s.max_length}")
    if not rows:
        raise NotAdmitted(f"sft: every admitted row is longer than train.sft.max_length {s.max_length}")
    dataset = build_dataset(rows)
    model = base_model.load_model(base_dir, quantize_4bit=qlora)
    if qlora:
        model = prepare_model_for_kbit_training(model)
    plan = memory_plan("sft", s, model, qlora=qlora, bf16_on_cuda=bf16 and cuda)
    args = sft_config(s, t.seed, checkpoints, padding_free=padding_free, bf16=bf16, cuda=cuda,
                      checkpointing=s.gradient_checkpointing or bool(plan and plan.checkpointing))
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    steps, per_epoch = planned_steps(len(rows), s.per_device_batch_size, s.gradient_accumulation, s.epochs, s.max_steps)
    print(sizing_line("sft", len(rows), steps, per_epoch, "train.sft.max_steps or materialize.max_train_per_batch"),
          flush=True)
    trainer = labelled_head.LabelledHeadSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok,
                                     peft_config=lora_config(s, model),
                                     callbacks=[*(callbacks or []), guard, estimate_callback("sft", steps)])
    trainer.memory_budget = plan
    base_identity = base_model.identity(base_dir)  # hashes the weights: once per run
    resume = resume_point(checkpoints, {"cfg": s, "seed": t.seed, "rows": rows, "base": base_identity})
    if resume:
        print(f"clap: resuming SFT from {resume}")
    run_training(trainer, resume)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"samples": len(rows), "samples_set_aside_too_long": [f"{r['batch']}/{r['sample_id']}" for r in too_long],
                   "batches_refused": refused, "qlora": qlora, "resumed_from": resume,
                   "padding_free": padding_free, "bf16": bf16, "memory_budget_mb": s.memory_budget_mb,
                   "gradient_checkpointing": args.gradient_checkpointing}, started)


def sft_config(s: Sft, seed: int, checkpoints: Path, padding_free: bool, bf16: bool, cuda: bool,
               checkpointing: bool | None = None):
    """TRL's SFTConfig from `train.sft`: the stage's and `benchmarks/bench_rounds.py`'s one setting."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(checkpoints), num_train_epochs=s.epochs, max_steps=s.max_steps,
        learning_rate=s.learning_rate, per_device_train_batch_size=s.per_device_batch_size,
        gradient_accumulation_steps=s.gradient_accumulation, logging_steps=s.logging_steps,
        save_steps=s.save_steps, save_total_limit=2,
        max_length=None if padding_free else s.max_length,  # padding-free: TRL cannot truncate; demo rows are short
        padding_free=padding_free, completion_only_loss=True, pad_to_multiple_of=s.pad_to_multiple_of,
        train_sampling_strategy="group_by_length" if s.group_by_length else "random", report_to=[], seed=seed,
        bf16=bf16, use_cpu=not cuda, dataloader_num_workers=0,
        lr_scheduler_type="linear", warmup_steps=0, save_only_model=False, include_num_input_tokens_seen="all",
        disable_tqdm=False,
        gradient_checkpointing=s.gradient_checkpointing if checkpointing is None else checkpointing)


def _padding_free(setting, cuda: bool) -> bool:
    """Padding-free pays off only with varlen attention kernels (flash-attention on CUDA)."""
    if setting == "auto":
        import importlib.util

        return cuda and importlib.util.find_spec("flash_attn") is not None
    return bool(setting)


def main(call: Call) -> dict:
    """`clap train sft`: `train` (its `sft` section, seed and guards), the admitted batches."""
    return run(call.params.train, call.materialized, call.admission, list(call.batches), call.base, call.out,
               call.checkpoints, callbacks=call.callbacks)


SPEC = TrainerSpec(name="sft", chain=EXTRACTION, section="train.sft", signals=guards.LOSS, main=main,
                   reads_batches=True, task_tag="structured-extraction")
