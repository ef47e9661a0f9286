"""The registry of trainers: every trainer stage module's `SPEC`, in the order the chains run.

    clap train --help      (the commands it lists come from here)

`clap train` looks a trainer up here, checks the inputs its spec names and calls its `main`; the gate stage takes
each chain's switched-on trainers from here; the report plots the curves each spec names. Adding a trainer is one
new stage module and one line below, its conf section and its `dvc.yaml` stage: docs/how-to/extend.md. Importing
the registry imports no training library (each trainer imports torch, PEFT and TRL inside `run`, and binds a clap
module that extends TRL's classes with `clap.lazy.module`).
"""

from __future__ import annotations

from clap.config import Params
from clap.stages import (
    train_agent_dpo,
    train_agent_grpo,
    train_agent_rloo,
    train_agent_rm,
    train_agent_sft,
    train_dpo,
    train_grpo,
    train_sft,
)
from clap.train.spec import TrainerSpec

REGISTRY: dict[str, TrainerSpec] = {spec.name: spec for spec in (
    train_sft.SPEC, train_dpo.SPEC, train_grpo.SPEC,
    train_agent_sft.SPEC, train_agent_dpo.SPEC, train_agent_grpo.SPEC, train_agent_rloo.SPEC,
    train_agent_rm.SPEC,
)}


def by_command(command: str) -> TrainerSpec:
    """The trainer `clap train <command>` names; an unknown one is one line listing them all."""
    for spec in REGISTRY.values():
        if spec.command == command:
            return spec
    names = [s.command for s in REGISTRY.values()]
    raise ValueError(f"unknown trainer {command!r}: use {', '.join(names[:-1])} or {names[-1]}")


def chain(name: str) -> list[TrainerSpec]:
    """The trainers of one chain (`clap.train.spec.EXTRACTION`, `AGENT`), in the order they run."""
    return [s for s in REGISTRY.values() if s.chain == name]


def switched_on(name: str, params: Params) -> list[str]:
    """The names of a chain's trainers that train under `params` (their `enabled` switches all true)."""
    return [s.name for s in chain(name) if s.switched_off(params) is None]


def curves() -> dict[str, tuple[str, ...]]:
    """Each trainer's logged keys the report plots, by trainer."""
    return {name: spec.curves for name, spec in REGISTRY.items()}
