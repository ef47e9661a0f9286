"""Composed configuration: `conf/` → params.yaml, checked against one typed schema before any work.

    clap params                       # rewrite params.yaml from ./conf (a test checks they agree)
    clap params --check               # fail when params.yaml is stale or does not fit the schema
    clap exp run --queue -S k=v ...   # compose + check the overrides, then hand over to `dvc exp run`

`Params` is the one schema of every key: types, ranges and choices, with unknown keys refused. Every
stage loads params.yaml through `load`, so a mistake (`learning_rate: fast`, `eval_fraction: 2`,
`data.batches: b1`) stops the command in one line naming the key before a model is loaded.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml
from omegaconf import OmegaConf
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from clap.domain.names import REPLAY_ANSWER_METRICS
from clap.errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration mistake the user can fix; the message names the file and the key."""


_reads: set[str] | None = None  # the keys read, while `CLAP_PARAMS_TRACE` records them (see `load`)


class _Section(BaseModel):
    """A typed section of params.yaml. Stages receive these, never dicts: `cfg.train.sft.learning_rate`.

    Each section knows its dotted key, so that while a trace runs every leaf read is recorded (a section
    read whole, by iterating or `model_dump`, records its own key)."""

    model_config = ConfigDict(extra="forbid", strict=False)
    _key: str | None = PrivateAttr(None)  # dotted place in params.yaml; None inside a list (read as one value)

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if _reads is not None and name[0] != "_" and name in type(self).model_fields and not isinstance(value, _Section):
            key = super().__getattribute__("__pydantic_private__")["_key"]
            if key is not None:
                _reads.add(f"{key}{name}")
        return value

    def _read_whole(self) -> None:
        key = self.__pydantic_private__["_key"]
        if _reads is not None and key is not None:
            _reads.add(key.rstrip(".") or "*")

    def __iter__(self):
        self._read_whole()
        return super().__iter__()

    def model_dump(self, **kwargs) -> dict:
        self._read_whole()
        return super().model_dump(**kwargs)

    def _place(self, key: str) -> None:
        """Name this section and every section under it by its dotted key (a list's items stay unnamed)."""
        self.__pydantic_private__["_key"] = key
        for name in type(self).model_fields:
            value = BaseModel.__getattribute__(self, name)
            if isinstance(value, _Section):
                value._place(f"{key}{name}.")


PosInt = Annotated[StrictInt, Field(ge=1)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
OpenFraction = Annotated[float, Field(gt=0.0, lt=1.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
NonNegFloat = Annotated[float, Field(ge=0.0)]
Switch = Literal["auto", "on", "off"] | StrictBool  # auto: where the hardware makes it pay
# A trainer's peak memory in MB: each batch runs in micro-batches whose activations fit it (clap.train.memory);
# null: the whole batch at once
MemoryBudget = Annotated[StrictInt, Field(ge=1024, le=4_194_304)] | None
BatchId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]


class DemoRound(_Section):
    batches: Annotated[list[BatchId], Field(min_length=1)]
    repair_share: Fraction = 0.0  # share of the previous round's repair queue the simulated annotator corrects
    poisoned_batch: BatchId = "none"

    @field_validator("poisoned_batch")
    @classmethod
    def _poisoned_is_a_batch_of_the_round(cls, v: str, info) -> str:
        if v != "none" and v not in info.data.get("batches", [v]):
            raise ValueError(f"{v} is not one of the round's batches")
        return v


class Demo(_Section):
    seed: StrictInt
    scale: Annotated[float, Field(gt=0.0, le=100.0)]
    poisoned_batch: BatchId  # `none`, or the batch whose export is poisoned
    rounds: Annotated[list[DemoRound], Field(min_length=1)]  # `clap demo`: one commit each
    overrides: list[Annotated[str, Field(pattern=r"^[+~]?[A-Za-z_][\w.]*=")]]  # `clap demo`: Hydra overrides, every round


class Data(_Section):
    batches: Annotated[list[BatchId], Field(min_length=1)]

    @field_validator("batches")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dup = sorted({b for b in v if v.count(b) > 1})
        if dup:
            raise ValueError(f"batch ids repeat: {', '.join(dup)}")
        return v


class Materialize(_Section):
    eval_fraction: OpenFraction
    max_train_per_batch: PosInt | None
    max_eval_per_batch: PosInt | None
    max_replay_per_batch: PosInt | None
    decision_eval_fraction: OpenFraction
    app_share: Fraction
    near_dup_threshold: OpenFraction
    num_perm: Annotated[StrictInt, Field(ge=16, le=1024)]
    engine: Literal["local", "ray"]
    workers: Annotated[StrictInt, Field(ge=1, le=1024)]
    seed: StrictInt


class RewardWeights(_Section):
    outcome: NonNegFloat
    format: NonNegFloat
    grounding: NonNegFloat
    efficiency: NonNegFloat


class Rewards(_Section):
    weights: RewardWeights
    max_chars: PosInt


class Admit(_Section):
    max_overlap: Annotated[StrictInt, Field(ge=0)]
    max_unverifiable_share: Fraction
    max_unit_mismatch_share: Fraction
    min_train_samples: PosInt
    min_rank_pass_rate: Fraction
    min_reward_margin: float
    min_reward_std: NonNegFloat


class Model(_Section):
    base: Annotated[str, Field(min_length=1)]
    cache_dir: Annotated[str, Field(min_length=1)]
    download: StrictBool = False  # a Hub id is fetched only when true
    revision: Annotated[str, Field(min_length=1)] = "main"  # the Hub revision; the resolved commit is pinned


class Lora(_Section):
    lora_r: PosInt
    lora_alpha: PosInt
    lora_dropout: Annotated[float, Field(ge=0.0, lt=1.0)]
    target_modules: Literal["auto"] | Annotated[list[str], Field(min_length=1)]  # auto: found per architecture


class Sft(Lora):
    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)]
    epochs: PosInt
    per_device_batch_size: PosInt
    gradient_accumulation: PosInt
    max_length: Annotated[StrictInt, Field(ge=16)]
    group_by_length: StrictBool
    pad_to_multiple_of: Annotated[StrictInt, Field(ge=1, le=4096)] | None  # a batch's width rounded up to this
    padding_free: Switch
    qlora: Switch
    bf16: Switch
    gradient_checkpointing: StrictBool  # recompute each layer's activations in the backward pass: keeps only its input
    memory_budget_mb: MemoryBudget
    logging_steps: PosInt
    save_steps: PosInt
    max_steps: Annotated[StrictInt, Field(ge=-1)]


class Dpo(_Section):
    enabled: StrictBool
    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)]
    beta: PosFloat
    max_steps: PosInt
    per_device_batch_size: PosInt
    logging_steps: PosInt


class _GrpoRun(_Section):
    """What every GRPO step has: the switch, its optimisation and its group sampling."""
    enabled: StrictBool
    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)]
    beta: NonNegFloat
    num_generations: Annotated[StrictInt, Field(ge=2)]
    temperature: PosFloat
    max_steps: PosInt
    logging_steps: PosInt
    save_steps: PosInt


class Grpo(_GrpoRun):
    max_completion_length: PosInt
    constrained_rollouts: StrictBool
    per_device_batch_size: PosInt


class Guards(_Section):
    kl_max: PosFloat
    kl_spike_ratio: Annotated[float, Field(gt=1.0)]
    kl_spike_min: NonNegFloat      # a spike counts only at or above this KL
    kl_window: PosInt
    reward_collapse_std: float     # a negative value switches the collapse guard off
    collapse_patience: PosInt
    max_clipped_ratio: Fraction    # 1.0 switches the clipped-completion guard off


class Mlflow(_Section):
    tracking_uri: str  # "" = $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the project
    experiment: Annotated[str, Field(min_length=1)]


class Train(_Section):
    seed: StrictInt
    report_to: list[Literal["dvclive", "mlflow"]]  # where each trainer logs its steps (clap.train.tracking)
    mlflow: Mlflow
    sft: Sft
    dpo: Dpo
    grpo: Grpo
    guards: Guards


class Generate(_Section):
    backend: Literal["auto", "hf", "vllm"]
    constrained: StrictBool
    gpu_memory_utilization: OpenFraction
    ray_workers: Annotated[StrictInt, Field(ge=0, le=4096)]
    reuse_answers: StrictBool
    dtype: Literal["auto", "float32", "bfloat16"]
    jump_forward: StrictBool
    merge_adapters: StrictBool
    evidence_names_metric: StrictBool
    prefix_cache_tokens: Annotated[StrictInt, Field(ge=0, le=10_000_000)]


class EvalWeights(_Section):
    parse_ok: NonNegFloat
    field_accuracy: NonNegFloat
    value_accuracy: NonNegFloat
    evidence_accuracy: NonNegFloat
    target_match: NonNegFloat


class Evaluate(_Section):
    max_new_tokens: PosInt
    batch_size: PosInt
    bootstrap: Annotated[StrictInt, Field(ge=20)]
    ci: OpenFraction
    pass_rule: Literal["value_and_evidence", "target_match"]
    weights: EvalWeights
    unconstrained_format_check: StrictBool


class EvaluateDecisions(_Section):
    max_new_tokens: PosInt
    batch_size: PosInt
    action_playbook: StrictBool


class Retrieval(_Section):
    k: PosInt
    mode: Literal["bm25", "dense", "hybrid"]
    rrf_k: PosInt


class Replay(_Section):
    max_new_tokens: PosInt
    batch_size: PosInt
    latency_requests: Annotated[StrictInt, Field(ge=0, le=64)]


class Human(_Section):
    items_per_batch: PosInt
    seed: str
    flag_usefulness_at_most: Annotated[float, Field(ge=1.0, le=5.0)]
    calibration_threshold: OpenFraction


class Canary(_Section):
    share: OpenFraction
    outcome: Literal[REPLAY_ANSWER_METRICS]  # a replay metric scored from the answer
    p_worse: OpenFraction
    p_better: OpenFraction
    alpha: Annotated[float, Field(gt=0.0, lt=0.5)]
    beta: Annotated[float, Field(gt=0.0, lt=0.5)]
    min_requests: PosInt
    max_latency_ratio: Annotated[float, Field(ge=1.0)]
    max_new_tokens: PosInt
    port: Annotated[StrictInt, Field(ge=1024, le=65535)]

    @field_validator("p_better")
    @classmethod
    def _ordered(cls, v: float, info) -> float:
        if "p_worse" in info.data and v <= info.data["p_worse"]:
            raise ValueError(f"p_better ({v}) must exceed p_worse ({info.data['p_worse']})")
        return v


class AgentTasks(_Section):
    seed: Annotated[str, Field(min_length=1)]
    eval_fraction: OpenFraction
    max_tasks_per_batch: dict[Literal["train", "eval"], PosInt]

    @field_validator("max_tasks_per_batch")
    @classmethod
    def _both_splits(cls, v: dict) -> dict:
        if set(v) != {"train", "eval"}:
            raise ValueError("needs both train and eval")
        return v


class AgentRewardWeights(_Section):
    outcome: NonNegFloat
    format: NonNegFloat
    process: NonNegFloat
    efficiency: NonNegFloat


class AgentRewards(_Section):
    weights: AgentRewardWeights
    per_extra_call: Fraction


class AgentSft(Lora):
    policy: Literal["joint", "two_stage"]
    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)]
    epochs: PosInt
    per_device_batch_size: PosInt
    gradient_accumulation: PosInt
    max_length: Annotated[StrictInt, Field(ge=64)]
    bf16: Switch
    memory_budget_mb: MemoryBudget
    logging_steps: PosInt
    save_steps: PosInt
    max_steps: Annotated[StrictInt, Field(ge=-1)]


class AgentDpo(_Section):
    enabled: StrictBool
    mine_samples: Annotated[StrictInt, Field(ge=0)]
    balance_finish: StrictBool
    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)]
    beta: PosFloat
    max_steps: PosInt
    gradient_accumulation: PosInt
    bf16: Switch


class AgentRmHuman(_Section):
    min_labels: PosInt
    min_spearman: Annotated[float, Field(ge=-1.0, le=1.0)]
    max_ece: Fraction


class AgentRm(_Section):
    eval_fraction: OpenFraction
    learning_rate: Annotated[float, Field(gt=0.0, le=1.0)]
    max_steps: PosInt
    gradient_accumulation: PosInt
    min_agreement: Fraction
    human: AgentRmHuman
    bf16: Switch


class AgentGrpo(_GrpoRun):
    reward_model_weight: NonNegFloat
    bf16: Switch


class AgentRloo(_GrpoRun):
    reward_model_weight: NonNegFloat
    states_per_step: PosInt
    gradient_checkpointing: StrictBool
    bf16: Switch


class AgentEvaluate(_Section):
    max_tasks: PosInt | None
    batch_size: PosInt
    samples: PosInt
    temperature: PosFloat
    pass_k: Annotated[list[PosInt], Field(min_length=1)]


class Agent(_Section):
    enabled: StrictBool
    tasks: AgentTasks
    max_steps: Annotated[StrictInt, Field(ge=2, le=32)]
    max_new_tokens: PosInt
    turn_tokens: Annotated[StrictInt, Field(ge=16)]
    rewards: AgentRewards
    sft: AgentSft
    dpo: AgentDpo
    rm: AgentRm
    grpo: AgentGrpo
    rloo: AgentRloo
    evaluate: AgentEvaluate

    @field_validator("evaluate")
    @classmethod
    def _k_within_samples(cls, v: AgentEvaluate) -> AgentEvaluate:
        if max(v.pass_k) > v.samples:
            raise ValueError(f"pass_k {max(v.pass_k)} exceeds samples {v.samples}")
        return v


ActsOn = Literal["point", "interval"]


class GateActsOn(_Section):
    """What each rule group decides on: the point estimate or its confidence interval."""

    batch: ActsOn
    pooled: ActsOn
    decision: ActsOn
    chain_extraction: ActsOn
    human: ActsOn
    agent: ActsOn


class Gate(_Section):
    name: Annotated[str, Field(min_length=1)]
    acts_on: GateActsOn
    min_overall_delta: float
    ci_lower_must_exceed: float
    max_batch_regression: Annotated[float, Field(le=0.0)]
    max_regressed_batches: Annotated[StrictInt, Field(ge=0)]
    max_hallucination_rate: Fraction
    max_hallucination_increase: Fraction
    max_wrong_fact_increase: Fraction
    max_wrong_fact_rate: Fraction
    max_p95_latency_ratio: Annotated[float, Field(ge=1.0)]
    min_parse_ok: Fraction
    require_guards_ok: StrictBool
    require_replay_gain: StrictBool
    rollback_on_prod_regression: StrictBool
    min_prod_delta_vs_base: Annotated[float, Field(ge=-1.0, le=1.0)]
    min_decision_delta: float
    decision_ci_lower_must_exceed: float
    chain_step_must_beat_start: StrictBool
    max_chain_extraction_regression: Annotated[float, Field(le=0.0)]
    require_human: StrictBool
    min_human_usefulness_delta: float
    min_human_agreement: Annotated[float, Field(ge=-1.0, le=1.0)]
    release_via_canary: StrictBool
    agent_min_success_delta: float
    agent_ci_lower_must_exceed: float
    agent_max_hallucination_rate: Fraction
    agent_min_tool_call_accuracy: Fraction


class Assetize(_Section):
    engine: Literal["local", "ray"]
    memory_budget_mb: Annotated[StrictInt, Field(ge=64, le=1 << 20)]
    read_rows: Annotated[StrictInt, Field(ge=1, le=10_000_000)]
    row_group_rows: Annotated[StrictInt, Field(ge=1, le=10_000_000)]
    workers: Annotated[StrictInt, Field(ge=1, le=1024)]


class Transform(_Section):
    """One declarative transform of a mapped field: exactly one key (`{prefix: FY}`, `{date: quarter}`)."""

    strip: StrictBool | None = None
    lower: StrictBool | None = None
    upper: StrictBool | None = None
    prefix: str | None = None
    suffix: str | None = None
    replace: dict[str, str] | None = None          # substrings: {"'000": "", "RMB": "元"}
    map: dict[str, str | int | float] | None = None  # whole values: {"Q": quality_loss}; values not listed pass as they are
    multiply: float | None = None
    from_json: StrictBool | None = None             # the cell holds JSON text (a decision's `causes` mapping)
    date: Literal["year", "quarter", "month", "day"] | None = None  # a date cell as `2024`, `2024Q1`, `2024-03`, `2024-03-31`

    @model_validator(mode="after")
    def _one_op(self):
        given = [k for k, v in self if v is not None and v is not False]
        if len(given) != 1:
            raise ValueError(f"a transform is one of {', '.join(type(self).model_fields)}, one at a time (got "
                             f"{', '.join(given) or 'none'})")
        return self

    def op(self) -> tuple[str, object]:
        return next((k, v) for k, v in self if v is not None and v is not False)


class TableSource(_Section):
    """One table of the user's, mapped onto a contract table (`clap ingest`; docs/how-to/own-data.md)."""

    path: Annotated[str, Field(min_length=1)]       # relative to the project root
    kind: Literal["facts", "decisions", "chunks"]
    sheet: str | None = None                        # XLSX: the sheet (default: the first)
    columns: Annotated[dict[str, str], Field(min_length=1)]  # contract field -> the file's column
    constants: dict[str, str | int | float] = {}    # contract field -> one value for every row
    transforms: dict[str, list[Transform]] = {}     # contract field -> transforms, in order

    @model_validator(mode="after")
    def _fields_once(self):
        both = sorted(set(self.columns) & set(self.constants))
        if both:
            raise ValueError(f"{', '.join(both)}: mapped to a column and given a constant; keep one")
        return self


class Ingest(_Section):
    docs: Annotated[str, Field(min_length=1)]       # folder of documents (PDF, HTML/XHTML incl. inline XBRL, DOCX, MD, TXT)
    batch_by: Literal["single", "folder", "date"]   # one batch | the first sub-folder's name | the document's date
    batch: BatchId                                  # the batch of `single`
    date_format: Literal["year", "quarter", "month"]  # a date's batch id under `date`
    lang: Literal["auto", "en", "zh"]               # auto: zh when CJK characters are over a fifth of the letters
    max_chunk_chars: Annotated[StrictInt, Field(ge=200, le=20_000)]
    workers: Annotated[StrictInt, Field(ge=1, le=256)]  # documents read at once (processes)
    max_document_mb: Annotated[StrictInt, Field(ge=1, le=1 << 16)]  # a file, or a DOCX's unpacked XML, above it: too_large
    max_html_depth: Annotated[StrictInt, Field(ge=16, le=100_000)]  # deeper HTML elements are read as one block's text
    follow_symlinks: StrictBool                      # read a symlink that leads outside the documents folder
    table_layout: Literal["row", "cells"]            # a table's data row as one line, or one line per value
    tables: list[TableSource] = []


class Params(_Section):
    """Every key of params.yaml, with its type and range; `load` returns one, and each stage gets its sections."""

    gate: Gate
    demo: Demo | None = None  # the demo's corpus and rounds (`clap init --demo`, this repository)
    ingest: Ingest | None = None  # a project's own sources (`clap init`)
    data: Data
    assetize: Assetize
    materialize: Materialize
    rewards: Rewards
    admit: Admit
    model: Model
    train: Train
    generate: Generate
    evaluate: Evaluate
    evaluate_decisions: EvaluateDecisions
    retrieval: Retrieval
    replay: Replay
    human: Human
    canary: Canary
    agent: Agent

    @model_validator(mode="after")
    def _named(self):
        self._place("")
        return self

    def as_yaml_dict(self) -> dict:
        """The keys as params.yaml spells them (defaults the file left out stay out)."""
        return self.model_dump(mode="json", exclude_unset=True)


def conf_dir() -> Path:
    """The conf/ of the working directory: the project the user runs, not the installed package."""
    return Path.cwd() / "conf"


def compose(overrides: list[str] | None = None, conf: Path | None = None) -> dict:
    """Compose conf/config.yaml with Hydra, exactly as DVC's Hydra integration does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    conf = Path(conf) if conf is not None else conf_dir()
    if not (conf / "config.yaml").is_file():
        raise ConfigError(f"{conf}/config.yaml: no such file (run clap from the project root)")
    try:
        with initialize_config_dir(config_dir=str(conf.resolve()), version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides or [])
        return OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(f"{conf}: {str(exc).splitlines()[0]}") from None


def dump(params: dict) -> str:
    return yaml.safe_dump(params, sort_keys=False, allow_unicode=True)


def check(params: dict, source: str = "params.yaml") -> dict:
    """Validate `params` against the schema; raise ConfigError naming the first bad keys."""
    _validated(params, source)
    return params


def _validated(params: dict, source: str) -> Params:
    if not isinstance(params, dict):
        raise ConfigError(f"{source}: not a mapping of config sections")
    try:
        return Params.model_validate(params)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(_describe(e) for e in exc.errors()[:3])) from None


def _describe(err: dict) -> str:
    key = _dotted(err)
    if err["type"] == "extra_forbidden":
        return f"unknown key {key}"
    if err["type"] == "missing":
        return f"missing key {key}"
    return f"{key}: {err['msg'].lower()} (got {err.get('input')!r})"


# A key CLAP renamed or moved: old dotted key → new. `clap upgrade` carries a project's value to the new key.
MOVED_KEYS = {"evaluate.latency_requests": "replay.latency_requests"}


@dataclass(frozen=True)
class UpgradePlan:
    """What `clap upgrade` changes in a project's composed conf to meet this CLAP's schema (`upgrade_plan`)."""
    moves: tuple[tuple[str, str, object], ...] = ()   # (old key, new key, the project's value)
    adds: tuple[tuple[str, object], ...] = ()         # (key, CLAP's default): keys this CLAP has that the project lacks
    unknown: tuple[str, ...] = ()                     # keys no CLAP schema knows and no move names: the user's to fix
    invalid: tuple[str, ...] = ()                     # values the schema refuses (type, range): the user's to fix
    upgraded: dict = field(default_factory=dict, compare=False, repr=False)  # the conf with the moves and adds made


def upgrade_plan(project: dict, template: dict, moved: dict[str, str] = MOVED_KEYS) -> UpgradePlan:
    """How a project's composed conf meets this CLAP's schema (pure): each moved key's value carried to its new
    key, each key the schema requires that the project lacks taken from CLAP's own conf (`template`, composed with
    the project's groups), and what is left for the user: unknown keys and refused values."""
    conf = copy.deepcopy(project)
    moves = []
    for old, new in moved.items():  # a project that has both keys keeps both: the old one is then unknown
        if _get(conf, old) is not _ABSENT and _get(conf, new) is _ABSENT:
            value = _pop(conf, old)
            _put(conf, new, value)
            moves.append((old, new, value))
    adds, unknown, invalid = [], [], []
    for _ in range(64):  # a missing section is added whole; its own checks come on the next pass
        try:
            Params.model_validate(conf)
            break
        except ValidationError as exc:
            missing = [e for e in exc.errors() if e["type"] == "missing"]
            unknown = [_dotted(e) for e in exc.errors() if e["type"] == "extra_forbidden"]
            invalid = [_describe(e) for e in exc.errors() if e["type"] not in ("missing", "extra_forbidden")]
            found = [(k, _get(template, k)) for k in map(_dotted, missing)]
            found = [(k, v) for k, v in found if v is not _ABSENT]
            if not found:
                unknown += [f"{_dotted(e)} (missing, and CLAP's conf has no value for it)" for e in missing]
                break
            for k, v in found:
                _put(conf, k, copy.deepcopy(v))
            adds += found
    return UpgradePlan(tuple(moves), tuple(adds), tuple(unknown), tuple(invalid), conf)


_ABSENT = object()


def _dotted(err: dict) -> str:
    return ".".join(str(p) for p in err["loc"] if not str(p).startswith(("constrained-", "function-")))


def _get(tree: dict, key: str):
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _ABSENT
        tree = tree[part]
    return tree


def _pop(tree: dict, key: str):
    *parents, last = key.split(".")
    for part in parents:
        if not isinstance(tree, dict) or part not in tree:
            return _ABSENT
        tree = tree[part]
    return tree.pop(last) if isinstance(tree, dict) and last in tree else _ABSENT


def _put(tree: dict, key: str, value) -> None:
    *parents, last = key.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


TRACE_ENV = "CLAP_PARAMS_TRACE"


def typed(params: dict, source: str = "params.yaml") -> Params:
    """`params` checked against the schema and typed: what every stage receives, section by section."""
    return _validated(params, source)


def _trace() -> None:
    """With `CLAP_PARAMS_TRACE=FILE` each `clap` command appends {"argv", "reads"} to FILE at exit; the
    pipeline test compares the reads of every stage with the `params:` its dvc.yaml entry declares, so
    a stage that reads an undeclared key (and would not re-run when it changes) fails the suite."""
    global _reads
    trace = os.environ.get(TRACE_ENV)
    if not trace or _reads is not None:
        return
    _reads = set()

    def dump_reads() -> None:
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"argv": sys.argv[1:], "reads": sorted(_reads)}) + "\n")

    atexit.register(dump_reads)


def read(path: Path = Path("params.yaml")) -> dict:
    """params.yaml as written, checked against the schema: for what pins the file itself (the release bundle)."""
    params = _parse(Path(path))
    _trace()
    return check(params, str(path))


def load(path: Path = Path("params.yaml")) -> Params:
    """Load params.yaml, checked against the schema (unknown keys, types, ranges) and typed."""
    params = _parse(Path(path))
    _trace()
    return typed(params, str(path))


def _parse(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (run `clap params` in the project root)") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
