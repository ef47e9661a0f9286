"""What a trainer is, declared once: the spec each trainer's stage module (`clap/stages/train_*.py`) exports as
`SPEC`, and `clap.stages.trainers` collects.

    clap train sft         (the CLI looks the spec up by its command name, checks its inputs, calls `main`)

Everything that used to name a trainer in its own list reads the spec instead: `clap train`'s dispatch and input
checks, the switch that keeps it off, its guard signals, its model card's tag, the report's training curves and the
gate's chains. Adding a trainer: docs/how-to/extend.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from clap import paths
from clap.config import Params
from clap.domain.names import REWARD_MODEL
from clap.integrity import pinned_expectation

# The chains a trainer can belong to (`TrainerSpec.chain`): the extraction/decision chain the gate judges on the
# holdout and replay, the tool-calling agent's chain it judges on held-out tasks, or neither (the reward model).
EXTRACTION, AGENT, NO_CHAIN = "extraction", "agent", ""


@dataclass(frozen=True)
class Need:
    """An input a trainer reads, checked before the base model is converted or loaded; `made_by` is the command
    that makes it, named in the one line a missing input gets."""
    path: Path
    made_by: str


@dataclass(frozen=True)
class Call:
    """What `clap train <command>` hands a trainer's `main`: the typed params (each trainer reads its own section
    and the few shared keys its spec's docstring names), the base model's folder, where it writes, the batches and
    data folders of the extraction chain, the adapter it continues (`--start`) and the tracking callbacks."""
    params: Params
    base: Path
    out: Path
    checkpoints: Path
    batches: tuple[str, ...] = ()
    materialized: Path = paths.MATERIALIZED
    admission: Path = paths.ADMISSION
    start: Path | None = None
    callbacks: list = field(default_factory=list)


@dataclass(frozen=True)
class TrainerSpec:
    """One trainer. `name`: its folder `models/<name>/`, its record `metrics/train_<name>.json`, its DVC stage
    `train_<name>`. `section`: its typed config section (dotted, e.g. `train.sft`). `switches`: the `enabled` keys
    that must all be true for it to train, outermost first. `inputs`: the files it reads beside the base model;
    `reads_batches`: it also reads each batch's admission record and materialized rows. `continues`: the trainer
    whose adapter it starts from (None: the base model). `optional`: what it reads when present (the reward model and
its verdict), never required. `signals`: its guard signals (`clap.train.guards`).
    `curves`: the logged keys the report plots. `task_tag`: the model card's task tag. `main`: trains, returns the
    metrics record."""
    name: str
    chain: str
    section: str
    signals: dict[str, str]
    main: Callable[[Call], dict]
    switches: tuple[str, ...] = ()
    inputs: tuple[Need, ...] = ()
    reads_batches: bool = False
    continues: str | None = None
    optional: tuple[Path, ...] = ()
    curves: tuple[str, ...] = ("loss",)
    task_tag: str = "decision"

    @property
    def command(self) -> str:
        """The trainer as `clap train` names it (`agent_sft` → `agent-sft`)."""
        return self.name.replace("_", "-")

    def settings(self, params: Params) -> BaseModel:
        """Its typed config section."""
        return _at(params, self.section)

    def switched_off(self, params: Params) -> str | None:
        """The first of its `enabled` switches that is false (the key, as `clap params` names it), or None."""
        return next((key for key in self.switches if not _at(params, key)), None)

    def start_adapter(self, start: Path | None = None) -> Path | None:
        """The adapter it continues: `--start`, else the adapter of the trainer it continues."""
        return start or (paths.adapter(self.continues) if self.continues else None)

    def needs(self, batches: tuple[str, ...] | list[str], materialized: Path = paths.MATERIALIZED,
              admission: Path = paths.ADMISSION, start: Path | None = None) -> list[Need]:
        """Every input it reads, in the order they are checked."""
        needs = []
        if self.reads_batches:
            needs += [Need(Path(admission) / f"{b}.json", f"dvc repro admit@{b}") for b in batches]
            needs += [Need(Path(materialized) / b, f"dvc repro materialize@{b}") for b in batches]
        needs += list(self.inputs)
        if self.continues:
            needs.append(Need(self.start_adapter(start), f"dvc repro train_{self.continues}"))
        return needs


def _at(params: Params, key: str):
    """The value at a dotted key of the typed params (`train.dpo.enabled`)."""
    for part in key.split("."):
        params = getattr(params, part)
    return params


# What both of the agent's RL steps (GRPO on episodes, RLOO per turn) read: the tasks and the assets their tools
# answer from, then, when present, the reward model and its verdict.
AGENT_RL_INPUTS = (Need(paths.AGENT_TASKS, "dvc repro agent_tasks"), Need(paths.ASSETS, "dvc repro assetize"))
AGENT_RL_OPTIONAL = (paths.adapter(REWARD_MODEL).parent, paths.AGENT_RM_CHECK)


def agent_rl_arguments(spec: TrainerSpec, call: Call) -> tuple[tuple, dict]:
    """The arguments both agent RL steps' `run` take from a call: the tasks, assets, base, out and checkpoints, the
    agent SFT adapter with the manifest git pins for it, and the reward model's folder, pins (when it was trained)
    and verdict; with `call.params`' agent, train and data sections."""
    p, start = call.params, spec.start_adapter(call.start)
    rm_dir, rm_check = AGENT_RL_OPTIONAL
    rm = paths.adapter(REWARD_MODEL)
    args = (p.agent, paths.AGENT_TASKS, paths.ASSETS, call.base, call.out, call.checkpoints, start,
            pinned_expectation(Path("."), start))
    return args, {"rm_dir": rm_dir, "rm_expected": pinned_expectation(Path("."), rm) if rm.exists() else None,
                  "rm_check": rm_check, "callbacks": call.callbacks, "train": p.train, "batches": p.data.batches}
