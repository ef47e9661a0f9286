"""`clap base-model` and `clap train <trainer>`: trainer dispatch, the tracking run, the trained record."""

from __future__ import annotations

from pathlib import Path

import typer

from clap import paths
from clap.cli.common import _fail, _need, _params, app, console
from clap.config import Params
from clap.domain.names import trainer_name


@app.command("base-model")
def base_model_cmd() -> None:
    """Resolve and pin the base model `model.base` names: a packaged or file GGUF dequantised once into
    `model.cache_dir`; a local folder or Hub snapshot used in place, its files' hashes pinned there."""
    from clap.stages import base_model as stage

    path, ident = stage.run(_params().model)
    console.print(f"base model ready: {ident['hub_id']} at {path} {ident['weights_sha256']}")


@app.command()
def train(kind: str = typer.Argument(..., help="sft | dpo | grpo | agent-sft | agent-dpo | agent-rm | agent-grpo | agent-rloo"),
          batches: list[str] = typer.Option(None, "--batch", help="default: all batches in params"),
          materialized: Path = typer.Option(paths.MATERIALIZED),
          admission: Path = typer.Option(paths.ADMISSION),
          out: Path = typer.Option(None), checkpoints: Path = typer.Option(None),
          start: Path = typer.Option(None, help="dpo/grpo: the adapter the step continues (default models/sft/adapter)")
          ) -> None:
    """Train a LoRA adapter on the admitted batches, under the runtime guards. sft starts from the base
    model; dpo and grpo continue the SFT adapter (--start, checked against the hashes dvc.lock pins);
    agent-sft trains the tool-calling agent on the gold trajectories of data/agent (`clap agent-tasks`);
    agent-dpo continues it on its own mistakes (`clap agent-pairs`); agent-rm fits a reward model on those
    pairs and checks it against the rule rewards and people's labels; agent-grpo continues agent SFT with GRPO on
    whole episodes in the environment; agent-rloo continues it with RLOO per turn, each action rewarded by its
    process credit and the reward model (the reward model used by both when its checks passed)."""
    from clap.domain.names import CHAIN, TRAINERS, command_name, trainer_name

    if kind not in map(command_name, TRAINERS):
        _fail(ValueError(f"unknown trainer {kind!r}: use {', '.join(map(command_name, TRAINERS[:-1]))} or "
                         f"{command_name(TRAINERS[-1])}"))
    cfg = _params()
    from clap.train.common import switched_off, write_disabled

    if switch := switched_off(cfg, trainer_name(kind)):
        write_disabled(trainer_name(kind), switch, out or paths.MODELS / trainer_name(kind))
        return console.print(f"{kind}: disabled ({switch} is false)")
    _training_inputs(kind, (batches or cfg.data.batches) if kind in CHAIN else [],
                     materialized, admission, start)
    # torch, transformers, PEFT and TRL take ≈ 13 s to import here: a switched-off trainer does not pay it
    from clap import model
    from clap.integrity import pinned_expectation
    from clap.io import check_output_dir
    from clap.stages import train_dpo, train_grpo, train_sft

    base = model.resolve(cfg.model)
    if kind.startswith("agent-"):
        name = trainer_name(kind)
        return _train_agent(cfg, kind, base, out or paths.MODELS / name, checkpoints or paths.CHECKPOINTS / name)
    out = out or paths.MODELS / kind
    check_output_dir(out, (materialized, admission, base))
    tracking = _tracking(cfg, kind)
    args = (cfg.train, materialized, admission, batches or cfg.data.batches, base, out,
            checkpoints or paths.CHECKPOINTS / kind)
    if kind == "sft":
        m = train_sft.run(*args, callbacks=tracking.callbacks())
    else:
        start = start or paths.adapter("sft")
        chain_step = train_dpo if kind == "dpo" else train_grpo
        more = {} if kind == "dpo" else {"rewards": cfg.rewards, "constrained": cfg.generate.constrained,
                                         "action_playbook": cfg.evaluate_decisions.action_playbook}
        m = chain_step.run(*args, start_adapter=start, start_expected=pinned_expectation(Path("."), start),
                           callbacks=tracking.callbacks(), **more)
    _record_trained(kind, m, tracking, out)


def _tracking(cfg: Params, kind: str):
    """The trackers of `train.report_to` for this run (`clap.train.tracking`); under `accelerate launch` rank 0's."""
    import os

    from clap.train.tracking import Tracking

    rank_zero = os.environ.get("RANK", "0") == "0"
    train = cfg.train if rank_zero else cfg.train.model_copy(update={"report_to": []})
    return Tracking(trainer_name(kind), train)


def _record_trained(kind: str, m: dict, tracking, out: Path) -> None:
    """After a trainer ran: its trackers closed (the run's record added to its metrics), metrics/train_<kind>.json."""
    from clap.io import read_json_if_exists, write_json

    manifest = read_json_if_exists(Path(out) / "adapter" / paths.MANIFEST) or {}
    m |= tracking.close(m, manifest.get("base_model"), (manifest.get("files") or {}).get(paths.ADAPTER_WEIGHTS))
    write_json(paths.train_metrics(trainer_name(kind)), m)
    _say_trained(kind, m, (read_json_if_exists(Path(out) / paths.GUARD_REPORT_FILE) or {}).get("trip"))


def _training_inputs(kind: str, batches: list[str], materialized: Path, admission: Path, start: Path | None) -> None:
    """What `kind` reads, checked before the base model is converted or loaded: one line names the first missing
    input and the stage that makes it."""
    from clap.domain.names import CHAIN

    if kind in CHAIN:
        needed = [(Path(admission) / f"{b}.json", f"dvc repro admit@{b}") for b in batches]
        needed += [(Path(materialized) / b, f"dvc repro materialize@{b}") for b in batches]
        if kind != "sft":
            needed.append((start or paths.adapter("sft"), "dvc repro train_sft"))
    else:
        needed = {"agent-sft": [(paths.AGENT_TASKS, "dvc repro agent_tasks")],
                  "agent-dpo": [(paths.AGENT_PAIRS, "dvc repro agent_pairs"),
                                (paths.adapter("agent_sft"), "dvc repro train_agent_sft")],
                  "agent-rm": [(paths.AGENT_PAIRS, "dvc repro agent_pairs")],
                  "agent-grpo": [(paths.AGENT_TASKS, "dvc repro agent_tasks"), (paths.ASSETS, "dvc repro assetize"),
                                 (paths.adapter("agent_sft"), "dvc repro train_agent_sft")],
                  "agent-rloo": [(paths.AGENT_TASKS, "dvc repro agent_tasks"), (paths.ASSETS, "dvc repro assetize"),
                                 (paths.adapter("agent_sft"), "dvc repro train_agent_sft")]}[kind]
    _need(*needed)


def _train_agent(cfg: Params, kind: str, base: Path, out: Path, checkpoints: Path) -> None:
    from clap.integrity import pinned_expectation
    from clap.io import check_output_dir
    from clap.stages import train_agent_dpo, train_agent_grpo, train_agent_rloo, train_agent_rm, train_agent_sft

    tracking = _tracking(cfg, kind)
    if kind == "agent-sft":
        check_output_dir(out, (paths.AGENT_TASKS, base))
        m = train_agent_sft.run(cfg.agent.sft, paths.AGENT_TASKS, base, out, checkpoints, callbacks=tracking.callbacks(),
                                train=cfg.train)
    elif kind == "agent-rm":
        check_output_dir(out, (paths.AGENT_PAIRS, base))
        m = train_agent_rm.run(cfg.agent, paths.AGENT_PAIRS, base, out, checkpoints, callbacks=tracking.callbacks(),
                               train=cfg.train)
    elif kind in ("agent-grpo", "agent-rloo"):
        check_output_dir(out, (paths.AGENT_TASKS, paths.ASSETS, base))
        start, rm = paths.adapter("agent_sft"), paths.adapter("agent_rm")
        step = train_agent_grpo if kind == "agent-grpo" else train_agent_rloo
        more = {"constrained": cfg.generate.constrained} if kind == "agent-grpo" else {}
        m = step.run(cfg.agent, paths.AGENT_TASKS, paths.ASSETS, base, out, checkpoints, start,
                     pinned_expectation(Path("."), start), rm_dir=rm.parent,
                     rm_expected=pinned_expectation(Path("."), rm) if rm.exists() else None,
                     rm_check=paths.AGENT_RM_CHECK, callbacks=tracking.callbacks(), train=cfg.train,
                     batches=cfg.data.batches, **more)
    else:
        check_output_dir(out, (paths.AGENT_PAIRS, base))
        start = paths.adapter("agent_sft")
        m = train_agent_dpo.run(cfg.agent, paths.AGENT_PAIRS, base, out, checkpoints, start,
                                pinned_expectation(Path("."), start), callbacks=tracking.callbacks(), train=cfg.train)
    _record_trained(kind, m, tracking, out)


def _say_trained(kind: str, m: dict, trip: dict | None = None) -> None:
    """One line after training; a guard that stopped it is named with its value and threshold, and where the
    adapter came from (the last good checkpoint, or the policy the step started from)."""
    speed = "taken from its finished checkpoint" if m["tokens_per_s"] is None else f"{m['tokens_per_s']} tokens/s"
    console.print(f"{kind}: {m['status']} after {m['steps']} steps, loss {m['train_loss']}, {speed}")
    if trip:
        console.print(f"{kind}: guard {trip['rule']} tripped at step {trip['step']} (value {trip['value']}, "
                      f"threshold {trip['threshold']}); adapter: {m.get('adapter_source')}")
