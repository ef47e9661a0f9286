"""The steps of `clap assetize` (the stage is `clap.stages.assetize`): read and spill each raw table, one unit of
work's chunks hashed, facts verified and decisions parsed, and the ordered write of every batch with the quarantine.

Phase A (`read_tables`) reads every table in blocks, coerces types, checks the raw contract and spills valid rows by
unit (clap.data.spill); phase C (`assetize_unit`) runs per unit, here or on Ray (clap.data.engine); `finish` writes
the assets in input order out of DuckDB (clap.data.duck) and checks rows in = kept + quarantined per table.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from clap.data import duck, spill
from clap.data.columnar import Chunks, pylist
from clap.data.facts import NOISE_KEYS, verify_facts
from clap.data.stream import TableReader
from clap.domain import quantities as nz
from clap.domain.contracts import (
    ID_COLUMN,
    RAW_SCHEMAS,
    RAW_TYPES,
    ChunkAsset,
    DecisionAsset,
    FactAsset,
    split_valid,
)
from clap.io import InputFileError, content_hash, quarantine_record

STAGE = "assetize"
log = logging.getLogger("clap.assetize")
TABLES = spill.TABLES
ASSETS = {"chunks": ChunkAsset, "facts": FactAsset, "decisions": DecisionAsset}
# Peak memory of a unit per byte of raw input it holds (JSONL), measured on the demo generator's facts and
# chunks (benchmarks/bench_scale.py): the units are sized so that this times their raw bytes fits the budget.
MEMORY_PER_RAW_BYTE = 6.0


@contextlib.contextmanager
def gc_paused():
    """Millions of short-lived tuples make the cyclic GC rescan a large heap again and again (~15 % of
    the stage at 1M facts); nothing here builds reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def timed(step: str):
    """Each phase's wall and CPU time (this process and the worker processes it waited for) at INFO on the
    `clap.assetize` logger (benchmarks/bench_scale.py shows them)."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    yield
    log.info("%s: %.1f s (cpu %.1f s)", step, time.perf_counter() - start, _cpu_seconds() - cpu)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def unit_count(raw_bytes: int, budget_mb: int, workers: int) -> int:
    """Units such that `workers` of them at once fit the budget; a multiple of `workers` (no unit left to run alone)."""
    units = math.ceil(raw_bytes * MEMORY_PER_RAW_BYTE * workers / (budget_mb << 20))
    return 1 if units <= 1 else math.ceil(units / workers) * workers


def read_tables(sources: dict[str, list[Path]], files: list[str], sp: spill.Spill, read_rows: int) -> dict:
    """Phase A: every table in blocks → spill (valid rows by unit, ids) and quarantine (reader, types, contract).
    Chunks are read beside facts: arrow's JSON parser releases the GIL while the other table is validated."""
    report: dict = {"inputs": {}, "_rows_in_by_file": {}}
    with ThreadPoolExecutor(1) as pool:
        chunks = pool.submit(_read_table, "chunks", sources, files, sp, read_rows, report)
        for name in ("facts", "decisions"):
            _read_table(name, sources, files, sp, read_rows, report)
        chunks.result()
    report["inputs"] = {name: report["inputs"][name] for name in TABLES}
    sp.close()
    return report


def _read_table(name: str, sources: dict[str, list[Path]], files: list[str], sp: spill.Spill, read_rows: int,
                report: dict) -> None:
    contract = RAW_SCHEMAS[name].to_schema().columns
    entry = {"file": str(sources[name][0]), "rows_in": 0, "extra_columns": set()}
    for path in sources[name]:
        file_no = files.index(str(path))
        reader = TableReader(path, STAGE, RAW_TYPES[name], read_rows)
        for block, bad in reader:
            sp.quarantine(name, file_no, bad)
            block, type_bad = _coerce(block, name, str(path))
            sp.quarantine(name, file_no, type_bad)
            for column in contract:  # a column absent from this block only: its rows fail the contract one by one
                if column not in block:
                    block[column] = pd.Series([None] * len(block), index=block.index, dtype=object)
            kept, invalid = split_valid(block, RAW_SCHEMAS[name], STAGE, str(path), ID_COLUMN[name], duplicates=False)
            sp.ids(name, file_no, block, block.index.isin(kept.index))
            sp.quarantine(name, file_no, invalid, maybe_duplicate=True)
            sp.rows(name, file_no, kept)
        missing = sorted(c for c, column in contract.items() if column.required and c not in reader.columns)
        if missing and reader.rows_in:  # an empty table (a project without decisions) has no columns to miss
            raise InputFileError(f"{path}: required column(s) missing from every row: {', '.join(missing)}")
        entry["rows_in"] += reader.rows_in
        entry["extra_columns"] |= reader.columns - set(contract)
        report["_rows_in_by_file"][file_no] = reader.rows_in
    entry["extra_columns"] = sorted(entry["extra_columns"])
    report["inputs"][name] = entry


def assetize_unit(work: Path, files: list[str], repaired_files: list[int], unit: int) -> dict:
    """Phase C for one unit: its chunks hashed, its facts verified against its chunks (and those it
    borrows), its decisions parsed; rows written per batch to `work/parts/`, quarantine to
    `work/quarantine/`. Returns counts only: the engine moves summaries, the files stay where they are."""
    with gc_paused():  # also in a worker process of either engine, where run() did not pause it
        return _assetize_unit(work, files, repaired_files, unit)


def _assetize_unit(work: Path, files: list[str], repaired_files: list[int], unit: int) -> dict:
    bad: dict[str, list[dict]] = {name: [] for name in TABLES}
    tables = {name: _without_dropped(work, name, spill.read_rows(work, name, unit), files, bad[name]) for name in TABLES}
    chunks = _chunk_asset(tables["chunks"])
    borrowed = Path(work) / "borrowed" / f"unit={unit}"
    lent = spill.decode("chunks", pq.read_table(borrowed)) if borrowed.exists() else tables["chunks"].iloc[:0]
    facts, fact_bad, noise = verify_facts(tables["facts"], Chunks(pd.concat([tables["chunks"], lent])), files,
                                           repaired_files)
    bad["facts"] += fact_bad
    decisions = _decisions(tables["decisions"], files, bad["decisions"])
    batches = {}
    for name, df in (("chunks", chunks), ("facts", facts), ("decisions", decisions)):
        if len(df):
            ASSETS[name].validate(df.drop(columns=["_file", "_row"]), lazy=True)
        batches[name] = _write_parts(Path(work) / "parts" / name, unit, df, name)
    file_no = {f: i for i, f in enumerate(files)}
    (Path(work) / "quarantine").mkdir(parents=True, exist_ok=True)  # the read phase makes it only when it quarantined
    with pq.ParquetWriter(Path(work) / "quarantine" / f"unit-{unit}.parquet", spill.QUARANTINE_SCHEMA,
                          **spill.SPILL_WRITE) as writer:
        for t, name in enumerate(TABLES):
            if bad[name]:
                spill.write_quarantine(writer, t, [file_no[r["file"]] for r in bad[name]], bad[name], (unit + 1) << 40)
    return {"kept": {name: len(df) for name, df in (("chunks", chunks), ("facts", facts), ("decisions", decisions))},
            "batches": batches, "noise": {k: int(v) for k, v in noise.items()}, "verifiable": int(facts["verifiable"].sum()),
            "repaired_verifiable": int((facts["repaired"] & facts["verifiable"]).sum())}


def _without_dropped(work: Path, name: str, df: pd.DataFrame, files: list[str], bad: list[dict]) -> pd.DataFrame:
    """The unit's rows less those the global step dropped (repeated ids, superseded raw rows), quarantined."""
    drops = pq.read_table(Path(work) / "drops" / f"{name}.parquet").to_pandas()
    if not len(drops) or not len(df):
        return df
    keys = df["_file"].to_numpy(np.int64) << 40 | df["_row"].to_numpy(np.int64)
    rule = dict(zip((drops["_file"].to_numpy(np.int64) << 40 | drops["_row"].to_numpy(np.int64)).tolist(), drops["rule"]))
    hit = np.isin(keys, np.fromiter(rule, dtype=np.int64, count=len(rule)))
    gone = df[hit]
    for k, f, r, original in zip(keys[hit].tolist(), gone["_file"].tolist(), gone["_row"].tolist(), spill.originals(name, gone)):
        bad.append(quarantine_record(STAGE, files[f], int(r), rule[k], ID_COLUMN[name], original))
    return df[~hit]


def finish(con, work: Path, tmp: Path, summaries: list[dict], report: dict, row_group_rows: int, repaired: bool) -> None:
    """Every batch written in input order; duplicates counted over all facts; quarantine merged; the report."""
    noise, rows = dict.fromkeys(NOISE_KEYS, 0), {name: {} for name in TABLES}
    for s in summaries:
        for k, v in s["noise"].items():
            noise[k] += v
        for name in TABLES:
            for b, n in s["batches"][name].items():
                rows[name][b] = rows[name].get(b, 0) + n
    for name in TABLES:
        folder = tmp / f"{name}.parquet"
        folder.mkdir()
        schema = asset_schema(ASSETS[name])
        if not rows[name]:
            pq.write_table(schema.empty_table(), folder / "empty.parquet")
        for b in sorted(rows[name]):
            duck.write_ordered(con, Path(work) / "parts" / name / _slug(b), folder / f"{_slug(b)}.parquet", schema,
                               row_group_rows)
    noise["duplicate_content"], noise["duplicate_across_batches"] = duck.duplicate_counts(con, tmp / "facts.parquet")
    per_table, per_rule = duck.write_quarantine(con, work, tmp / "quarantine.jsonl")
    for name in TABLES:
        entry = report["inputs"][name]
        entry["quarantined"], entry["kept"] = per_table[name], sum(s["kept"][name] for s in summaries)
        if entry["kept"] + entry["quarantined"] != entry["rows_in"]:
            raise AssertionError(f"{name}: rows in {entry['rows_in']} != kept {entry['kept']} + quarantined {entry['quarantined']}")
    verifiable = sum(s["verifiable"] for s in summaries)
    report |= {"noise": noise, "batches": _batch_ids(rows), "quarantine_by_rule": per_rule, "verifiable_facts": verifiable,
               "unverifiable_facts": report["inputs"]["facts"]["kept"] - verifiable, "units": len(summaries)}
    if repaired:  # the flywheel's effect: how many repaired rows are now usable for training
        report["repaired_rows_verifiable"] = sum(s["repaired_verifiable"] for s in summaries)


def asset_schema(model) -> pa.Schema:
    """The Arrow schema of an asset, from its contract."""
    kinds = {"int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(c, kinds.get(str(col.dtype), pa.string())) for c, col in model.to_schema().columns.items()])


def _slug(batch: str) -> str:
    """A batch id as a file name: `b-<id>`, with a hash suffix when the id holds other characters."""
    safe = re.sub(r"[^0-9A-Za-z._-]", "_", batch)[:80]
    if safe != batch:
        safe += "~" + hashlib.sha256(batch.encode()).hexdigest()[:10]
    return f"b-{safe}"


def _write_parts(folder: Path, unit: int, df: pd.DataFrame, name: str) -> dict[str, int]:
    """A unit's rows of one table, one file per batch (with `_file`, `_row` for the ordered write)."""
    schema = asset_schema(ASSETS[name]).append(pa.field("_file", pa.int32())).append(pa.field("_row", pa.int64()))
    counts = {}
    for batch, part in df.groupby("batch", sort=True):
        (folder / _slug(batch)).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(part[schema.names], schema=schema, preserve_index=False),
                       folder / _slug(batch) / f"u{unit:05d}.parquet", **spill.SPILL_WRITE)
        counts[str(batch)] = len(part)
    return counts


def _chunk_asset(df: pd.DataFrame) -> pd.DataFrame:
    """The chunk asset rows of a unit: content-addressed (= io.content_hash(doc, page, text), inlined)."""
    chunks = df[["chunk_id", "doc_id", "page", "text", "lang", "batch", "_file", "_row"]].reset_index(drop=True)
    chunks["content_hash"] = [hashlib.sha256(f"{d}\x1f{p}\x1f{t}".encode()).hexdigest()
                              for d, p, t in zip(pylist(chunks["doc_id"]), chunks["page"].tolist(), pylist(chunks["text"]))]
    return chunks


def _coerce(df: pd.DataFrame, name: str, file: str) -> tuple[pd.DataFrame, list[dict]]:
    """Cast columns to their contract types; a value that cannot be cast quarantines its row."""
    bad, drop = [], pd.Series(False, index=df.index)
    for col in (c for c, kind in RAW_TYPES[name].items() if kind == "str"):
        if col in df and pd.api.types.infer_dtype(df[col], skipna=True) not in ("string", "empty"):
            df[col] = df[col].map(_as_str).astype(object)
    ints = [c for c, kind in RAW_TYPES[name].items() if kind == "int" and c in df]
    for col in ints:
        is_bool = df[col].map(lambda v: isinstance(v, (bool, np.bool_))).astype(bool)
        num = pd.to_numeric(df[col].where(~is_bool), errors="coerce")
        wrong = (df[col].notna() & (num.isna() | (num % 1 != 0))) | df[col].isna() | is_bool
        for i in df.index[wrong & ~drop]:
            rule = "not_null" if pd.isna(df.at[i, col]) else "type:int"
            original = {k: v for k, v in df.loc[i].items() if k != "_row"}
            bad.append(quarantine_record(STAGE, file, int(df.at[i, "_row"]), rule, col, original))
        drop |= wrong
        df[col] = num.where(~wrong)
    if name == "decisions" and "causes" in df:
        causes = df["causes"].map(_as_mapping)
        for i in df.index[causes.isna() & ~drop]:
            original = {k: v for k, v in df.loc[i].items() if k != "_row"}
            bad.append(quarantine_record(STAGE, file, int(df.at[i, "_row"]), "type:mapping", "causes", original))
        drop |= causes.isna()
        df["causes"] = causes
    if "batch" in df:  # ` b1 ` and `b1` are one batch; other look-alikes are reported (report["batches"])
        df["batch"] = df["batch"].map(lambda v: v.strip() if isinstance(v, str) else v)
    df = df[~drop].copy()
    for col in ints:
        df[col] = df[col].astype("int64")
    return df, bad


def _as_mapping(v):
    """A decision's `causes`: a mapping, or JSON text of one (a spreadsheet export); else None."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    return v if isinstance(v, dict) and v else None


def _as_str(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return v if isinstance(v, str) else (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v))


def _batch_ids(rows: dict[str, dict[str, int]]) -> dict:
    """Rows per batch id over all assets, and ids that look like another (`B1`, `b1`, `1`): a word, not a merge."""
    counts: dict[str, int] = {}
    for per_batch in rows.values():
        for b, n in per_batch.items():
            counts[b] = counts.get(b, 0) + n
    folded: dict[str, list[str]] = {}
    for b in counts:  # `B1`, `b1`, `1`, `batch-01`: the same letters/digits up to case, separators, leading zeros
        digits = re.sub(r"\D", "", b).lstrip("0")
        folded.setdefault(f"#{digits}" if digits else re.sub(r"[^0-9a-z]", "", b.casefold()), []).append(b)
    warnings = [f"batch ids {', '.join(sorted(v))} look alike: they are separate batches" for v in folded.values()
                if len(v) > 1]
    return {"rows": dict(sorted(counts.items())), "warnings": warnings}


def _decisions(df: pd.DataFrame, files: list[str], bad: list[dict]) -> pd.DataFrame:
    """Decision asset rows: the main cause is the largest numeric one; a case without one is quarantined."""
    rows = []
    for i, r in enumerate(df.to_dict("records")):
        causes = r["causes"]
        numeric = {k: v for k, v in causes.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not numeric:
            bad.append(quarantine_record(STAGE, files[r["_file"]], int(r["_row"]), "no_numeric_cause", "causes",
                                         spill.originals("decisions", df.iloc[[i]])[0]))
            continue
        main = max(numeric, key=lambda k: numeric[k])
        causes_json = json.dumps(causes, ensure_ascii=False, sort_keys=True)
        rows.append({"record_id": r["record_id"], "batch": r["batch"], "case_type": r["case_type"],
                     "situation": nz.fold(r["situation"]), "causes_json": causes_json, "main_cause": main,
                     "action": r["action"].strip(), "risk_focus": r["risk_focus"], "lang": r["lang"],
                     "content_hash": content_hash(r["case_type"], nz.fold(r["situation"]), causes_json, r["action"]),
                     "_file": r["_file"], "_row": r["_row"]})
    return pd.DataFrame.from_records(rows, columns=[*DecisionAsset.to_schema().columns, "_file", "_row"])
