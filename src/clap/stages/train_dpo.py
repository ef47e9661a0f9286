"""train dpo: the chain's preference step — DPO on the admitted decision pairs, starting from the SFT adapter.

    clap train dpo             (DVC stage `train_dpo`, writes models/dpo/; re-runs when models/sft changes)

The policy is the SFT adapter, loaded trainable through the serving check (against the manifest
dvc.lock pins for models/sft); TRL copies it into a frozen "ref" adapter, so the reference policy
of the DPO loss is the SFT policy (one base model in memory, two adapters), and the LoRA shape is
the SFT adapter's own. Pairs: chosen vs near-miss (right action, wrong cause and risk focus) and
chosen vs rejected (another case's action). The guard watches loss and the reward margin.
"""

from __future__ import annotations

import time
from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.config import Train
from clap.domain.prompts import SYSTEM_DECIDE, messages
from clap.integrity import pinned_expectation
from clap.train import guards
from clap.train.common import admitted_rows, finish, resume_point, run_training, start_from
from clap.train.spec import EXTRACTION, Call, TrainerSpec


def build_dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": messages(SYSTEM_DECIDE, r["prompt"]),
                               "chosen": [{"role": "assistant", "content": r["chosen"]}],
                               "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in rows])


def run(train: Train, materialized: Path, admission: Path, batches: list[str], base_dir: Path, out: Path,
        checkpoints: Path, start_adapter: Path, start_expected: dict, callbacks: list | None = None) -> dict:
    """`start_adapter`/`start_expected`: the SFT adapter and the manifest git pins for it."""
    import torch
    from trl import DPOConfig, DPOTrainer

    started = time.time()
    d, t = train.dpo, train
    rows, refused = admitted_rows(materialized, admission, batches, "dpo", "dpo_pairs.jsonl")
    tok = base_model.load_tokenizer(base_dir)
    base_identity = base_model.identity(base_dir)  # hashes the weights: once per run
    model, start_sha = start_from(base_dir, start_adapter, start_expected, base_identity)
    cuda = torch.cuda.is_available()
    args = DPOConfig(output_dir=str(checkpoints), max_steps=d.max_steps, learning_rate=d.learning_rate,
                     beta=d.beta, per_device_train_batch_size=d.per_device_batch_size,
                     logging_steps=d.logging_steps, save_steps=max(1, d.max_steps // 2), save_total_limit=2,
                     report_to=[], seed=t.seed, bf16=cuda and torch.cuda.is_bf16_supported(), use_cpu=not cuda,
                     max_length=512, dataloader_num_workers=0)
    guard = guards.guard_callback(SPEC.name, SPEC.signals, t.guards, Path(out) / paths.GUARD_REPORT_FILE)
    trainer = DPOTrainer(model=model, args=args, train_dataset=build_dataset(rows), processing_class=tok,
                         callbacks=[*(callbacks or []), guard])
    resume = resume_point(checkpoints, {"cfg": d, "seed": t.seed, "start": start_sha, "rows": rows,
                                        "base": base_identity})
    run_training(trainer, resume)
    return finish(trainer, guard, out, SPEC, base_identity,
                  {"pairs": len(rows), "batches_refused": refused, "resumed_from": resume,
                   "start_adapter_sha256": start_sha}, started, start_adapter)


def main(call: Call) -> dict:
    """`clap train dpo`: `train` (its `dpo` section, seed and guards), the admitted batches, the SFT adapter (--start),
    checked against the manifest dvc.lock pins for it."""
    start = SPEC.start_adapter(call.start)
    return run(call.params.train, call.materialized, call.admission, list(call.batches), call.base, call.out,
               call.checkpoints, start_adapter=start, start_expected=pinned_expectation(Path("."), start),
               callbacks=call.callbacks)


SPEC = TrainerSpec(name="dpo", chain=EXTRACTION, section="train.dpo", signals=guards.PREFERENCE, main=main,
                   switches=("train.dpo.enabled",), reads_batches=True, continues="sft",
                   curves=("loss", "rewards/margins"))
