"""What the three trainers share: admitted data, the LoRA config, and writing a run's outputs.

Each trainer (`train_sft.py`, `train_dpo.py`, `train_grpo.py`) stays readable top to bottom; only
the bookkeeping that must be identical across them lives here.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import resource
import shutil
import time
from pathlib import Path

import yaml

from clap import model as base_model
from clap import paths
from clap.config import Lora
from clap.data.admission import NotAdmitted, require
from clap.domain.contracts import GuardReport
from clap.integrity import adapter_manifest, attach
from clap.io import InputFileError, OutputRefused, atomic_dir, read_json, read_jsonl, write_json
from clap.model import GEMMA_NOTICE, licence, lora_targets
from clap.train.memory import Shape, micro_batch_plan
from clap.train.spec import TrainerSpec
from clap.train.tracking import write_empty


def admitted_rows(materialized: Path, admission: Path, batches: list[str], trainer: str, filename: str
                  ) -> tuple[list[dict], dict[str, str]]:
    """Rows of `filename` from every batch whose admission allows `trainer`; refused batches with why."""
    rows, refused = [], {}
    for b in batches:
        try:
            require(Path(admission) / f"{b}.json", trainer)
        except NotAdmitted as exc:
            refused[b] = str(exc)
            continue
        rows += read_jsonl(Path(materialized) / b / filename)
    if not rows:
        raise NotAdmitted(f"{trainer}: no admitted data in {', '.join(batches)}: " + " | ".join(refused.values()))
    for b, why in refused.items():
        print(f"clap: {trainer} skips batch {b}: {why}")
    return rows, refused


def lora_config(s: Lora, model, task_type: str = "CAUSAL_LM", **extra):
    """The LoRA config of trainer section `s` for `model`: its target modules found (or checked) by module type in
    the model's decoder layers (`clap.model.lora_targets`) before training starts."""
    from peft import LoraConfig

    return LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=s.lora_dropout,
                      target_modules=lora_targets(model, s.target_modules), task_type=task_type, bias="none", **extra)


def start_from(base_dir: Path, adapter_dir: Path, expected: dict, base_identity: dict):
    """The policy a chain step continues: the base model with `adapter_dir` attached *trainable*
    through the serving check (its files must match `expected`, the manifest git pins). TRL then copies
    it into a frozen "ref" adapter, so the reference of DPO's loss and GRPO's KL is this starting policy,
    not the base model. Returns (model, sha256 of the starting weights) for the run key."""
    model = attach(base_model.load_model(base_dir), "default", Path(adapter_dir), expected, base_identity, trainable=True)
    return model, expected["files"][paths.ADAPTER_WEIGHTS]


def _plain(value):
    """A config section in a run key is its values (`model_dump`), so the key is the one its dict had."""
    from pydantic import BaseModel

    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)


def resume_point(folder: Path, run_key: dict) -> str | None:
    """The last checkpoint of *this* run, or None. Checkpoints left by a run with another config,
    data or base model are cleared: resuming them would continue a different run (with its
    learning-rate schedule), which is how a changed `max_steps` can silently train nothing."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(folder)
    key = hashlib.sha256(json.dumps(run_key, sort_keys=True, default=_plain).encode()).hexdigest()
    stamp = folder / "run_key.txt"
    if int(os.environ.get("RANK", "0")) != 0:  # data-parallel: rank 0 owns the folder; wait for its stamp
        deadline = time.time() + 120
        while time.time() < deadline and not (stamp.exists() and stamp.read_text().strip() == key):
            time.sleep(0.2)
        return get_last_checkpoint(str(folder))
    if folder.is_dir() and any(folder.iterdir()) and not stamp.exists():
        raise OutputRefused(f"{folder}: existing folder without a run stamp (run_key.txt) is not a clap checkpoint "
                            "folder; choose another --checkpoints or remove it yourself")
    if folder.is_dir() and stamp.exists() and stamp.read_text().strip() != key:
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)
    return get_last_checkpoint(str(folder))


def memory_plan(trainer: str, section, model, *, qlora: bool, bf16_on_cuda: bool):
    """The micro-batch plan of a trainer section with `memory_budget_mb` set (None without one), printed as the
    one line that says what the budget buys: the model's shape from its config, its weights held in fp32 on a
    CPU (bf16 autocast keeps fp32 weights there) and in bf16 on CUDA. A budget below what the weights alone take
    is the user's mistake, named by its key."""
    if section.memory_budget_mb is None:
        return None
    try:
        plan = micro_batch_plan(Shape.from_config(model.config), section.memory_budget_mb, lora_r=section.lora_r,
                                weights_bytes=2 if bf16_on_cuda else 4, qlora=qlora, max_length=section.max_length,
                                checkpointing=bool(getattr(section, "gradient_checkpointing", False)))
    except ValueError as exc:
        raise NotAdmitted(f"{trainer}: {exc}") from None
    print(plan.line(trainer, section.max_length), flush=True)
    return plan


def planned_steps(rows: int, batch: int, accumulation: int, epochs: float, max_steps: int) -> tuple[int, int]:
    """(optimizer steps, steps per epoch) a run will take (pure): `max_steps` when set (> 0), else epochs × the
    steps one pass over `rows` takes at `batch` × `accumulation` rows a step."""
    per_epoch = max(1, -(-rows // max(1, batch * accumulation)))
    return (max_steps if max_steps > 0 else max(1, int(-(-epochs * per_epoch // 1)))), per_epoch


def sizing_line(trainer: str, rows: int, steps: int, per_epoch: int, cap_keys: str) -> str:
    """The one line a trainer prints before it starts: what it will do, and where to cap it."""
    return (f"clap: {trainer}: {rows} rows, {steps} steps ({steps / per_epoch:.1f} epochs of {per_epoch} steps); "
            f"the time per step follows after the first one; cap it with {cap_keys}")


def estimate_callback(trainer: str, steps: int):
    """A transformers callback: after the first optimizer step, one line with that step's time and the run's
    estimate on this machine."""
    from transformers import TrainerCallback

    class EstimateCallback(TrainerCallback):
        started: float | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.time()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1 and self.started is not None:
                took = time.time() - self.started
                print(f"clap: {trainer}: the first step took {took:.1f} s → about {took * steps / 60:.0f} min for "
                      f"{steps} steps on this machine", flush=True)

    return EstimateCallback()


def run_training(trainer, resume: str | None) -> None:
    """`trainer.train(resume_from_checkpoint=resume)`, except when `resume` already holds the run's last step:
    then its adapter and state are taken as they are. (Transformers resumed from the final checkpoint runs one
    more optimizer step; the demo's round 3, whose admitted data equalled round 2's, trained 21 of 20 steps
    and so decoded every answer of an adapter that should have been round 2's again.)"""
    if resume and _ran_to_the_end(Path(resume)):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file
        from transformers import TrainerState

        print(f"clap: {resume} holds the run's last step; taken as it is, not trained again")
        set_peft_model_state_dict(trainer.model, load_file(Path(resume) / paths.ADAPTER_WEIGHTS))
        trainer.state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
        return
    trainer.train(resume_from_checkpoint=resume)


def _ran_to_the_end(checkpoint: Path) -> bool:
    try:
        state = read_json(checkpoint / "trainer_state.json")
    except (OSError, InputFileError):
        return False
    return (checkpoint / paths.ADAPTER_WEIGHTS).exists() and 0 < state.get("max_steps", 0) <= \
        state.get("global_step", 0)


def finish(trainer, guard, out: Path, spec: TrainerSpec, base_identity: dict, extra: dict, started: float,
           start_adapter: Path | None = None) -> dict:
    """`spec`'s run done: write adapter (last good checkpoint when a guard tripped; a chain step tripped before its first
    checkpoint keeps `start_adapter`, the policy it started from), metrics, log, model card, guard report."""
    report = guard.report()
    history = [h for h in trainer.state.log_history if "train_loss" not in h]
    summary = next((h for h in trainer.state.log_history if "train_loss" in h), {})
    tokens = trainer.state.num_input_tokens_seen or 0
    runtime = time.time() - started
    metrics = {"trainer": spec.name, "status": report.status, "steps": trainer.state.global_step,
               "train_loss": summary.get("train_loss"), "train_runtime_s": round(runtime, 2),
               "tokens_seen": tokens,  # tokens/s None: no train() summary, `run_training` took a finished checkpoint
               "tokens_per_s": round(tokens / max(summary.get("train_runtime", runtime), 1e-9), 2) if summary else None,
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1), **extra}
    if not trainer.is_world_process_zero():
        return metrics  # under `accelerate launch`, rank 0 writes the run's outputs
    with atomic_dir(out) as tmp:
        adapter = tmp / "adapter"
        good = report.last_good_checkpoint if report.last_good_checkpoint and \
            Path(report.last_good_checkpoint).exists() else None
        if report.trip is not None and (good or start_adapter):
            adapter.mkdir()
            for name in (paths.ADAPTER_CONFIG, paths.ADAPTER_WEIGHTS):
                shutil.copy2(Path(good or start_adapter) / name, adapter / name)
            metrics["adapter_source"] = good or f"start ({start_adapter}): tripped before the first checkpoint"
        else:
            trainer.model.save_pretrained(adapter, safe_serialization=True, selected_adapters=["default"])
            metrics["adapter_source"] = "final" if report.trip is None else "final_after_trip_no_good_checkpoint"
        for stray in adapter.glob("*.bin"):
            stray.unlink()
        config = read_json(adapter / paths.ADAPTER_CONFIG)
        config["base_model_name_or_path"] = base_identity["hub_id"]  # not the local cache path models/base
        if isinstance(config.get("target_modules"), list):  # PEFT writes a set: its order changes run to run, and
            config["target_modules"] = sorted(config["target_modules"])  # so would the adapter's hash and stored answers
        (adapter / paths.ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
        stamp = Path(trainer.args.output_dir) / "run_key.txt"
        run_key = stamp.read_text().strip() if stamp.exists() else None
        (adapter / "README.md").write_text(_model_card(spec, base_identity, metrics, report.model_dump(), run_key))
        write_json(adapter / paths.MANIFEST, adapter_manifest(adapter, base_identity))
        write_json(tmp / paths.TRAIN_METRICS_FILE, metrics)
        write_json(tmp / paths.GUARD_REPORT_FILE, report.model_dump())
        (tmp / "train_log.csv").write_text(_log_csv(history))
    return metrics


def write_untrained(folder: Path, trainer: str, metrics: dict, status: str = "ok") -> None:
    """The record of a trainer that ran no step (disabled, nothing to learn from): its metrics, a guard report
    that watched nothing, an empty log — the files the pipeline and the gate read of every trainer."""
    write_json(folder / paths.TRAIN_METRICS_FILE, metrics)
    write_json(folder / paths.GUARD_REPORT_FILE, GuardReport(trainer=trainer, status=status, trip=None, peaks={},
                                                        last_good_checkpoint=None, steps=0).model_dump())
    (folder / "train_log.csv").write_text("step\n")


def _log_csv(history: list[dict]) -> str:
    keys = ["step"] + sorted({k for h in history for k in h if k not in ("step", "epoch")})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    for h in history:
        w.writerow(h)
    return buf.getvalue()


def _model_card(spec: TrainerSpec, base: dict, metrics: dict, guard: dict, run_key: str | None) -> str:
    """A Hugging Face model card: metadata the Hub and PEFT read, then CLAP's provenance. `base_model` names a
    Hub repository only when the weights trained on are that repository's bytes (a pinned snapshot); a
    dequantised GGUF or a local folder is described, not claimed. The release (version, gate decision, bundle
    hash) is in the git tag and the bundle that pin this file's hash."""
    terms = licence(base)
    front = {"library_name": "peft"} | ({"base_model": base["hub_id"]} if base.get("commit") else {})
    front |= {"license": terms} if terms else {}
    front |= {"pipeline_tag": "text-classification" if spec.task_tag == "reward-model" else "text-generation",
              "tags": ["clap", "lora", spec.name, spec.task_tag]}
    if base.get("gguf"):
        origin = (f"{base['name']}, dequantised to float from the {base['quantisation'] or 'quantised'} GGUF "
                  f"`{base['gguf']}` (sha256 {base['gguf_sha256']})"
                  + (f"; not bit-identical to {base['quantised_from']}" if base.get("quantised_from") else ""))
    elif base.get("commit"):
        origin = f"{base['hub_id']} at commit {base['commit']}"
    else:
        origin = f"{base['hub_id']} (a local folder)"
    notice = f"\n\n{GEMMA_NOTICE}. This adapter is a Model Derivative under those terms.\n" \
        if terms == "gemma" else ""
    return ("---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n"
            f"# CLAP {spec.name.upper()} LoRA adapter\n\nBase model: {origin} "
            f"(weights sha256 {json.dumps(base['weights_sha256'])}; loaded from `{base['path']}`).{notice}\n\n"
            f"Trained by `clap train {spec.command}`; status **{metrics['status']}**, {metrics['steps']} steps; training run "
            f"key (sha256 of config, data rows and base) `{run_key}`.\n\n"
            "Release provenance — version, gate decision and reasons, dataset versions, bundle — lives in the git "
            "tag `clap-adapter@vX.Y.Z` and in `release/bundle.json` at that tag, which pin this folder by hash "
            "(`clap registry`, `gto show`, `clap verify`).\n\n"
            f"## Training metrics\n\n```json\n{json.dumps(metrics, indent=2)}\n```\n\n"
            f"## Guard report\n\n```json\n{json.dumps(guard, indent=2)}\n```\n\n"
            "Load it only through `clap.integrity.load_adapter`, which checks its hashes against the ones git pins.\n")


def write_disabled(trainer: str, switch: str, out: Path) -> dict:
    """A switched-off trainer trains nothing: its folder says so (status `disabled` in its guard report and
    metrics, an empty DVCLive log) so that the pipeline's outputs exist, and evaluation and the gate leave it out.
    The one writer of that record; returns the metrics written."""
    metrics = {"trainer": trainer, "status": "disabled", "steps": 0, "train_loss": None,
               "note": f"{switch} is false: not trained, not evaluated, not judged"}
    with atomic_dir(out) as tmp:
        write_untrained(tmp, trainer, metrics, status="disabled")
    write_empty(paths.dvclive(trainer))
    write_json(paths.train_metrics(trainer), metrics)
    return metrics
