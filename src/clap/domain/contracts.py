"""Every data contract of CLAP in one place (docs/design.md §2).

Tables are Pandera `DataFrameModel`s validated lazily (all failures at once) by `split_valid`, which
sends each failing row to quarantine with its rule and column. JSON documents (admission record,
guard report, gate decision, evidence bundle) are pydantic models that forbid unknown keys.
"""

from __future__ import annotations

import functools
from typing import Literal

import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaErrors
from pandera.typing import Series
from pydantic import BaseModel, ConfigDict, Field

from clap.domain.names import AGENT_KINDS
from clap.domain.prompts import RISK_FOCUS
from clap.io import jsonable, quarantine_record

LANGS = ["en", "zh"]


def _non_empty(s: pd.Series) -> pd.Series:
    return s.astype(str).str.strip().str.len() > 0


# ---------------------------------------------------------------- raw inputs (unknown columns kept)
# Each field says what it holds and an example: docs/reference/raw-contract.md is generated from these models
# (`clap reference`), so the documentation of the contract cannot drift from the checks.
def _f(description: str, example, **checks):
    return pa.Field(description=description, metadata={"example": example}, **checks)


class RawChunk(pa.DataFrameModel):
    """A passage of a source document: what retrieval finds and what an answer's evidence quotes."""

    chunk_id: Series[str] = _f("unique id of the passage", "annual-2024-1a2b3c4d5e-c0003", unique=True)
    doc_id: Series[str] = _f("the document it comes from (`clap ingest`: path slug + content hash)",
                             "annual-2024-1a2b3c4d5e")
    page: Series[int] = _f("page of the document, from 1", 4, ge=1)
    text: Series[str] = _f("the passage; table rows as `cell | cell` lines", "Current assets | 2,909 | 4,585",
                           str_length={"min_value": 1})
    lang: Series[str] = _f("language of the text", "en", isin=LANGS)
    batch: Series[str] = _f("the data batch (one id of data.batches)", "b1")

    @pa.check("chunk_id", "doc_id", "text", "batch", name="non_empty")
    def non_empty(cls, s: Series[str]) -> Series[bool]:
        return _non_empty(s)

    class Config:
        strict = False
        coerce = False


class RawFact(pa.DataFrameModel):
    """A reported number with the passage that states it: the extraction target the model learns to answer with."""

    record_id: Series[str] = _f("unique id of the fact", "kpis-r2", unique=True)
    batch: Series[str] = _f("the data batch", "b1")
    doc_id: Series[str] = _f("the document that reports it", "annual-2024-1a2b3c4d5e")
    page: Series[int] = _f("page of that document, from 1", 4, ge=1)
    chunk_id: Series[str] = _f("the passage that states it; empty: assetize looks for it on the page",
                               "annual-2024-1a2b3c4d5e-c0003", nullable=True)
    entity: Series[str] = _f("whose number it is", "Acme Holdings plc")
    metric: Series[str] = _f("what is measured, as the document labels it", "Current assets")
    period: Series[str] = _f("when (`FY2024`, `2024Q3`, `2024-12-31`; normalised to `2024`, `2024Q3`)", "FY2024")
    value: Series[object] = _f("the number as the document writes it (text or JSON number)", "2,909")
    unit: Series[str] = _f("its unit as written (`million USD`, `万元`, `%`, `pcs`); see the unit list below",
                           "million USD", nullable=True)
    evidence: Series[str] = _f("the sentence or table row that states it; empty: assetize finds it in the chunk",
                               "Current assets | 2,909 | 4,585", nullable=True)
    lang: Series[str] = _f("language of the evidence", "en", isin=LANGS)
    question: Series[str] | None = _f("the question it answers; empty: generated from entity, metric, period",
                                      "What were Acme's current assets at 31 December 2024?", nullable=True)

    @pa.check("record_id", "batch", "doc_id", "entity", "metric", "period", name="non_empty")
    def non_empty(cls, s: Series[str]) -> Series[bool]:
        return _non_empty(s)

    @pa.check("value", name="not_null")
    def value_present(cls, s: Series[object]) -> Series[bool]:
        return s.notna() & (s.astype(str).str.strip().str.len() > 0)

    class Config:
        strict = False
        coerce = False


class RawDecision(pa.DataFrameModel):
    """A decision record: a situation, its weighted causes and the action taken — the decision task's cases."""

    record_id: Series[str] = _f("unique id of the case", "D17", unique=True)
    batch: Series[str] = _f("the data batch", "b1")
    case_type: Series[str] = _f("the kind of case (cases of one kind share a playbook of actions)", "quality_loss")
    situation: Series[str] = _f("what happened", "Line 2's defect rate rose above plan.", str_length={"min_value": 1})
    causes: Series[object] = _f("causes and their weights, a non-empty mapping (JSON object)",
                                {"process_drift_sigma": 0.6, "supplier_lot_defect_pct": 0.4})
    action: Series[str] = _f("what was done", "Recalibrate the line and tighten SPC control limits",
                             str_length={"min_value": 1})
    risk_focus: Series[str] = _f("the risk the action addresses (the decision answer's schema allows these only)",
                                 "customer", isin=list(RISK_FOCUS))
    lang: Series[str] = _f("language of the text", "en", isin=LANGS)

    @pa.check("causes", name="mapping")
    def causes_is_mapping(cls, s: Series[object]) -> Series[bool]:
        return s.map(lambda v: isinstance(v, dict) and len(v) > 0)

    class Config:
        strict = False
        coerce = False


RAW_SCHEMAS = {"chunks": RawChunk, "facts": RawFact, "decisions": RawDecision}
ID_COLUMN = {"chunks": "chunk_id", "facts": "record_id", "decisions": "record_id"}


def _raw_types(model: type[pa.DataFrameModel]) -> dict[str, str]:
    """Column -> "str" | "int" | "object" (any JSON type, e.g. a fact's `value`), in contract order."""
    kinds = {}
    for name, column in model.to_schema().columns.items():
        dtype = str(column.dtype)
        kinds[name] = "int" if dtype.startswith("int") else "str" if dtype.startswith(("str", "string")) else "object"
    return kinds


RAW_TYPES = {name: _raw_types(model) for name, model in RAW_SCHEMAS.items()}  # what the columnar reader parses


# ---------------------------------------------------------------- assets (written by assetize)
class ChunkAsset(RawChunk):
    content_hash: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64})

    class Config:
        strict = True


class FactAsset(pa.DataFrameModel):
    record_id: Series[str] = pa.Field(unique=True)
    batch: Series[str]
    doc_id: Series[str]
    page: Series[int] = pa.Field(ge=1)
    chunk_id: Series[str] = pa.Field(nullable=True)
    entity: Series[str]
    metric: Series[str] = pa.Field(str_length={"min_value": 1})
    metric_raw: Series[str]
    period: Series[str]
    period_raw: Series[str]
    value: Series[float] = pa.Field(nullable=True)
    value_raw: Series[str]
    unit: Series[str] = pa.Field(nullable=True)
    unit_raw: Series[str] = pa.Field(nullable=True)
    evidence: Series[str] = pa.Field(nullable=True)
    lang: Series[str] = pa.Field(isin=LANGS)
    question: Series[str]
    verifiable: Series[bool]
    unverifiable_reason: Series[str] = pa.Field(nullable=True)
    repaired: Series[bool]  # the row came from a repair file (repair/fixed/): the flywheel's way back into training
    content_hash: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64})

    class Config:
        strict = True


class DecisionAsset(pa.DataFrameModel):
    record_id: Series[str] = pa.Field(unique=True)
    batch: Series[str]
    case_type: Series[str]
    situation: Series[str]
    causes_json: Series[str]
    main_cause: Series[str]
    action: Series[str]
    risk_focus: Series[str]
    lang: Series[str]
    content_hash: Series[str]

    class Config:
        strict = True


# ---------------------------------------------------------------- materialized samples
class SftSample(pa.DataFrameModel):
    sample_id: Series[str] = pa.Field(unique=True)
    record_id: Series[str]
    batch: Series[str]
    split: Series[str] = pa.Field(isin=["train", "eval"])
    system: Series[str]
    prompt: Series[str] = pa.Field(str_length={"min_value": 1})
    source: Series[str]
    target: Series[str]
    question: Series[str]
    chunk_id: Series[str]
    content_hash: Series[str]

    class Config:
        strict = True


class PreferencePair(pa.DataFrameModel):
    pair_id: Series[str] = pa.Field(unique=True)
    record_id: Series[str]
    prompt: Series[str]
    chosen: Series[str]
    rejected: Series[str]
    kind: Series[str] = pa.Field(isin=["near_miss", "rejected"])
    reward_chosen: Series[float]
    reward_rejected: Series[float]

    class Config:
        strict = True


def _graded_roles(candidates_json: str) -> bool:
    import json

    roles = [c["role"] for c in json.loads(candidates_json)]
    return roles.count("chosen") == 1 and "near_miss" in roles and "rejected" in roles


class GrpoGroup(pa.DataFrameModel):
    group_id: Series[str] = pa.Field(unique=True)
    record_id: Series[str]
    prompt: Series[str]
    reference_json: Series[str]
    candidates_json: Series[str]

    @pa.check("candidates_json", name="one_chosen_near_miss_rejected")
    def has_roles(cls, s: Series[str]) -> Series[bool]:
        return s.map(_graded_roles)

    class Config:
        strict = True


class DecisionCase(pa.DataFrameModel):
    """A held-out decision case (split by case from the DPO/GRPO rows): the three graded answers of its group."""

    case_id: Series[str] = pa.Field(unique=True)
    record_id: Series[str] = pa.Field(unique=True)
    batch: Series[str]
    prompt: Series[str] = pa.Field(str_length={"min_value": 1})
    reference_json: Series[str]
    candidates_json: Series[str]

    @pa.check("candidates_json", name="one_chosen_near_miss_rejected")
    def has_roles(cls, s: Series[str]) -> Series[bool]:
        return s.map(_graded_roles)

    class Config:
        strict = True


class ReplayCase(pa.DataFrameModel):
    case_id: Series[str] = pa.Field(unique=True)
    record_id: Series[str]
    batch: Series[str]
    question: Series[str]
    gold_chunk_id: Series[str]
    gold_doc_id: Series[str]
    gold_page: Series[int]
    target: Series[str]

    class Config:
        strict = True


class EvalRecord(pa.DataFrameModel):
    sample_id: Series[str]
    model: Series[str] = pa.Field(isin=["baseline", "candidate"])
    input_hash: Series[str]
    output: Series[str]
    parse_ok: Series[float] = pa.Field(in_range={"min_value": 0, "max_value": 1})
    latency_ms: Series[float] = pa.Field(ge=0)

    class Config:
        strict = False


def _gold_trajectory(messages_json: str) -> bool:
    """system, user, then (assistant tool call, tool return)*, ending in one assistant finish call."""
    import json

    m = json.loads(messages_json)
    if len(m) < 3 or [x["role"] for x in m[:2]] != ["system", "user"] or len(m) % 2 == 0:
        return False
    calls, returns = m[2::2], m[3::2]
    names = [c.get("tool_calls", [{}])[0].get("function", {}).get("name") for c in calls]
    return (all(c["role"] == "assistant" for c in calls) and all(r["role"] == "tool" for r in returns)
            and names[-1] == "finish" and "finish" not in names[:-1] and None not in names)


class AgentTask(pa.DataFrameModel):
    """An agent task with its checked gold trajectory (`clap agent-tasks`; list fields as JSON text)."""

    task_id: Series[str] = pa.Field(unique=True)
    batch: Series[str]
    split: Series[str] = pa.Field(isin=["train", "eval"])
    kind: Series[str] = pa.Field(isin=list(AGENT_KINDS))
    lang: Series[str] = pa.Field(isin=LANGS)
    template: Series[str] = pa.Field(str_matches=r"^[a-z_]+/[a-z]+/\d+$")
    question: Series[str] = pa.Field(str_length={"min_value": 1})
    answer: Series[str] = pa.Field(str_length={"min_value": 1})
    answer_type: Series[str] = pa.Field(isin=["number", "entity", "abstain"])
    gold_calls: Series[int] = pa.Field(ge=0)
    gold_steps: Series[int] = pa.Field(ge=1)
    record_ids_json: Series[str]
    entities_json: Series[str]
    needed_chunks_json: Series[str]
    needed_reads_json: Series[str]
    needed_values_json: Series[str]
    cited: Series[str] = pa.Field(nullable=True)
    messages_json: Series[str]

    @pa.check("messages_json", name="gold_trajectory")
    def trajectory(cls, s: Series[str]) -> Series[bool]:
        return s.map(_gold_trajectory)

    class Config:
        strict = True


AGENT_LIST_FIELDS = [c.removesuffix("_json") for c in AgentTask.to_schema().columns if c.endswith("_json")]


# ---------------------------------------------------------------- JSON documents
class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Check(_Doc):
    name: str
    value: float | None
    threshold: float | None
    op: Literal[">=", "<=", "==", ">", "<"]
    passed: bool
    consequence: str


class AdmissionRecord(_Doc):
    batch: str
    decision: Literal["admit", "sft_only", "repair", "block"]
    reasons: list[str]
    checks: list[Check]
    trainable: list[str]


class GuardTrip(_Doc):
    rule: str
    step: int
    value: float | None
    threshold: float | None


class GuardReport(_Doc):
    trainer: str
    status: Literal["ok", "stopped", "disabled"]  # disabled: `enabled: false` in conf/, the trainer did not run
    trip: GuardTrip | None
    peaks: dict[str, float | None]
    last_good_checkpoint: str | None
    steps: int


class Reason(_Doc):
    rule: str
    observed: float | str | None
    threshold: float | str | None
    batch: str | None = None
    outcome: str


class GateDecision(_Doc):
    decision: Literal["promote", "canary", "hold", "reject", "rollback"]
    reasons: list[Reason]
    per_batch: dict[str, str]
    requires_rag: bool
    policy: str
    candidate: str
    trainers: dict[str, str]
    summary: dict[str, float | int | None]  # numeric, so `dvc metrics diff` shows decision changes
    candidates: dict[str, dict] = {}  # every step of the chain the gate judged: its decision, reasons, summary
    agent: dict = {}  # the tool-calling agent adapter's own verdict (decision, reasons, summary), when that track ran


class BundleFile(_Doc):
    path: str
    sha256: str
    role: str


class EvidenceBundle(_Doc):
    candidate: str
    code_commit: str
    base_model: dict
    config_sha256: str
    config: dict
    files: list[BundleFile] = Field(default_factory=list)
    decision: dict
    dataset_versions: dict[str, str]
    signature: str | None = None  # "hmac-sha256:…" when CLAP_BUNDLE_KEY was set at `clap bundle`
    tracks: dict = {}  # per track (extraction, agent): the candidate, its verdict, what ships (bundle.release_tracks)


# ---------------------------------------------------------------- applying table contracts
def typed_empty(df: pd.DataFrame, model: type[pa.DataFrameModel]) -> pd.DataFrame:
    """An empty table with the contract's dtypes: an input whose every row was quarantined still
    writes a valid, empty asset instead of failing on the dtype of columns that hold nothing."""
    if len(df):
        return df
    columns = model.to_schema().columns
    return pd.DataFrame({c: pd.Series(dtype=columns[c].dtype.type) if c in columns else df[c] for c in df.columns})


def split_valid(df: pd.DataFrame, model: type[pa.DataFrameModel], stage: str, file: str,
                id_column: str | None = None, duplicates: bool = True) -> tuple[pd.DataFrame, list[dict]]:
    """Validate lazily; return (valid rows, quarantine records). Rows in = valid + quarantined.

    Duplicate IDs keep the first occurrence and quarantine the rest (`duplicate_id`); with
    `duplicates=False` the id column is not checked for repeats (a caller reading in blocks finds
    them over the whole input, e.g. `clap.data.duck.drops`).
    """
    failed: dict = {}  # index -> (rule, column), first failure of each row
    if duplicates and id_column and id_column in df:
        dup = df[id_column].notna() & df.duplicated(subset=[id_column], keep="first")
        failed = dict.fromkeys(df.index[dup].tolist(), ("duplicate_id", id_column))
    try:  # the whole frame at once: uniqueness failures are the duplicates already found above
        _without_unique(model, id_column).validate(df, lazy=True)  # raw models are not strict: `_row` passes
        cases = None
    except SchemaErrors as exc:
        cases = exc.failure_cases
    if cases is not None:
        frame_level = cases[cases["index"].isna()]
        frame_level = frame_level[~frame_level["check"].astype(str).str.startswith(("dtype(", "field_uniqueness"))]
        missing = frame_level[frame_level["check"].astype(str).str.contains("column_in_dataframe")]
        if len(missing):
            cols = ", ".join(sorted(set(missing["failure_case"].astype(str))))
            raise ValueError(f"{file}: required column(s) missing from every row: {cols}")
        rows = cases[cases["index"].notna()]
        for idx, check, column in zip(rows["index"].tolist(), rows["check"].astype(str).tolist(), rows["column"].tolist()):
            if check.startswith("field_uniqueness"):  # only without an id column: else found above
                check = "duplicate_id"
            if idx not in failed:
                failed[idx] = (check, column)
    if not failed:
        return df, []
    originals = df.loc[list(failed)]
    row_numbers = originals["_row"].tolist() if "_row" in originals else [None] * len(failed)
    originals = originals.drop(columns=["_row"], errors="ignore").astype(object)
    originals = originals.where(originals.notna(), None).to_dict("records")
    bad = [quarantine_record(stage, file, None if n is None else int(n), rule, None if column is None else str(column),
                             {k: jsonable(v) for k, v in original.items()})
           for (rule, column), n, original in zip(failed.values(), row_numbers, originals)]
    return df.drop(index=list(failed)), bad


@functools.lru_cache(maxsize=16)
def _without_unique(model: type[pa.DataFrameModel], id_column: str | None):
    """The model's schema, minus the uniqueness check on the id column that split_valid makes itself
    (keeping the first row of each id, which a plain unique check cannot say)."""
    schema = model.to_schema()
    return schema.update_column(id_column, unique=False) if id_column in schema.columns else schema
