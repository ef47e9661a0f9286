"""`clap train <trainer>`: the registry's trainer called with its inputs checked, the tracking run, the trained
record."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from clap import model, paths
from clap.cli.common import _fail, _need, _params, app, console
from clap.config import Params
from clap.io import check_output_dir, read_json_if_exists, write_json
from clap.stages import trainers
from clap.train.common import write_disabled
from clap.train.spec import Call, TrainerSpec
from clap.train.tracking import Tracking


@app.command()
def train(kind: str = typer.Argument(..., help=" | ".join(s.command for s in trainers.REGISTRY.values())),
          batches: list[str] = typer.Option(None, "--batch", help="default: all batches in params"),
          materialized: Path = typer.Option(paths.MATERIALIZED),
          admission: Path = typer.Option(paths.ADMISSION),
          out: Path = typer.Option(None), checkpoints: Path = typer.Option(None),
          start: Path = typer.Option(None, help="a trainer that continues another: the adapter it starts from "
                                                "(default that trainer's, e.g. models/sft/adapter), checked against "
                                                "the hashes dvc.lock pins")
          ) -> None:
    """Train a LoRA adapter under the runtime guards; the trainers are the registry's (`clap.stages.trainers`).
    sft starts from the base model on the admitted batches; dpo and grpo continue the SFT adapter; agent-sft trains
    the tool-calling agent on the gold trajectories of data/agent (`clap agent-tasks`); agent-dpo continues it on
    its own mistakes (`clap agent-pairs`); agent-rm fits a reward model on those pairs and checks it against the
    rule rewards and people's labels; agent-grpo continues agent SFT with GRPO on whole episodes in the
    environment; agent-rloo continues it with RLOO per turn, each action rewarded by its process credit and the
    reward model (the reward model used by both when its checks passed)."""
    try:
        spec = trainers.by_command(kind)
    except ValueError as e:
        _fail(e)
    cfg = _params()
    out = out or paths.MODELS / spec.name
    if switch := spec.switched_off(cfg):
        write_disabled(spec.name, switch, out)
        return console.print(f"{kind}: disabled ({switch} is false)")
    batches = tuple(batches or cfg.data.batches) if spec.reads_batches else ()
    needs = spec.needs(batches, materialized, admission, start)
    _need(*((n.path, n.made_by) for n in needs))
    base = model.resolve(cfg.model)
    check_output_dir(out, (*(n.path for n in needs), base))
    tracking = _tracking(cfg, spec.name)
    # torch, transformers, PEFT and TRL are imported inside the trainer's `run`: a switched-off one does not pay it
    metrics = spec.main(Call(params=cfg, base=base, out=out, checkpoints=checkpoints or paths.CHECKPOINTS / spec.name,
                             batches=batches, materialized=materialized, admission=admission, start=start,
                             callbacks=tracking.callbacks()))
    _record_trained(spec, metrics, tracking, out)


def _tracking(cfg: Params, name: str) -> Tracking:
    """The trackers of `train.report_to` for this run (`clap.train.tracking`); under `accelerate launch` rank 0's."""
    rank_zero = os.environ.get("RANK", "0") == "0"
    train = cfg.train if rank_zero else cfg.train.model_copy(update={"report_to": []})
    return Tracking(name, train)


def _record_trained(spec: TrainerSpec, m: dict, tracking: Tracking, out: Path) -> None:
    """After a trainer ran: its trackers closed (the run's record added to its metrics), metrics/train_<name>.json."""
    manifest = read_json_if_exists(Path(out) / "adapter" / paths.MANIFEST) or {}
    m |= tracking.close(m, manifest.get("base_model"), (manifest.get("files") or {}).get(paths.ADAPTER_WEIGHTS))
    write_json(paths.train_metrics(spec.name), m)
    _say_trained(spec.command, m, (read_json_if_exists(Path(out) / paths.GUARD_REPORT_FILE) or {}).get("trip"))


def _say_trained(kind: str, m: dict, trip: dict | None = None) -> None:
    """One line after training; a guard that stopped it is named with its value and threshold, and where the
    adapter came from (the last good checkpoint, or the policy the step started from)."""
    speed = "taken from its finished checkpoint" if m["tokens_per_s"] is None else f"{m['tokens_per_s']} tokens/s"
    console.print(f"{kind}: {m['status']} after {m['steps']} steps, loss {m['train_loss']}, {speed}")
    if trip:
        console.print(f"{kind}: guard {trip['rule']} tripped at step {trip['step']} (value {trip['value']}, "
                      f"threshold {trip['threshold']}); adapter: {m.get('adapter_source')}")
