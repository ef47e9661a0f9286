"""Spill files: what `clap assetize` has read, on disk, cut into units of work that fit the memory budget.

    spill = Spill(work, units)                      # phase A: blocks of valid rows, ids, quarantine
    spill.rows("facts", file_no, block); spill.ids(...); spill.quarantine(...); spill.close()
    rows = read_rows(work, "facts", unit)           # phase B: one unit's rows back, JSON columns decoded

A row's unit is a stable hash of its bucket key (a chunk's or fact's document, a decision's id) modulo
the number of units, so a document's chunks and facts meet in one unit and the fact → evidence-chunk
join needs only that unit's chunks (plus the few chunks a fact borrows from another document, which
`clap.data.duck.borrowed_chunks` copies in). Columns of any JSON type (a fact's `value`, a decision's
`causes`) and columns outside the contract travel as JSON text; `_file` and `_row` say where each row
came from, so the final write can restore input order and quarantine records can name the row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from clap.domain.contracts import ID_COLUMN, RAW_TYPES
from clap.io import jsonable

TABLES = ("chunks", "facts", "decisions")
BUCKET_KEY = {"chunks": "doc_id", "facts": "doc_id", "decisions": "record_id"}
QUARANTINE_SCHEMA = pa.schema([("table", pa.int8()), ("_file", pa.int32()), ("_row", pa.int64()), ("seq", pa.int64()),
                               ("maybe_duplicate", pa.bool_()), ("rule", pa.string()), ("line", pa.string())])
SPILL_WRITE = {"compression": "none", "use_dictionary": False}  # read back once, soon: encoding costs more than bytes
IDS_SCHEMA = pa.schema([("id", pa.string()), ("_file", pa.int32()), ("_row", pa.int64()), ("valid", pa.bool_())])


def row_schema(name: str) -> pa.Schema:
    """A table's spill schema: contract columns (JSON-typed ones as text), `_extra` (JSON), `_file`, `_row`."""
    kind = {"str": pa.string(), "int": pa.int64(), "object": pa.string()}
    return pa.schema([(c, kind[k]) for c, k in RAW_TYPES[name].items()]
                     + [("_extra", pa.string()), ("_file", pa.int32()), ("_row", pa.int64())])


def unit_of(keys: pd.Series, units: int) -> np.ndarray:
    """Each key's unit: pandas' fixed-key SipHash, so a key lands in the same unit on every run and worker."""
    if units == 1:
        return np.zeros(len(keys), dtype=np.int64)
    return (pd.util.hash_array(keys.astype(object).to_numpy()) % np.uint64(units)).astype(np.int64)


class Spill:
    """Phase A's writer: one Parquet file per table and unit, one for ids, one for quarantine records."""

    def __init__(self, work: Path, units: int):
        self.work, self.units = Path(work), units
        self._writers: dict[tuple, pq.ParquetWriter] = {}  # one per table and kind: tables may be read in parallel
        self._seq = dict.fromkeys(TABLES, 0)

    def _writer(self, key: tuple, path: Path, schema: pa.Schema) -> pq.ParquetWriter:
        if key not in self._writers:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._writers[key] = pq.ParquetWriter(path, schema, **SPILL_WRITE)
        return self._writers[key]

    def rows(self, name: str, file_no: int, df: pd.DataFrame) -> None:
        """Contract-valid rows, each to its unit."""
        if not len(df):
            return
        table = to_spill(name, file_no, df)
        unit = unit_of(df[BUCKET_KEY[name]], self.units)
        for u in np.unique(unit).tolist():
            part = table if self.units == 1 else table.filter(pa.array(unit == u))
            self._writer(("rows", name, u), self.work / "rows" / name / f"unit={u}" / "part.parquet",
                         row_schema(name)).write_table(part)

    def ids(self, name: str, file_no: int, df: pd.DataFrame, valid: np.ndarray) -> None:
        """The id of every row that reached validation: duplicates are found over all of them, as in one pass."""
        if not len(df):
            return
        ids = pa.array(df[ID_COLUMN[name]].astype(object).where(df[ID_COLUMN[name]].notna(), None).tolist(), pa.string())
        table = pa.table([ids, pa.array(np.full(len(df), file_no, dtype=np.int32)), pa.array(df["_row"].to_numpy(np.int64)),
                          pa.array(valid, pa.bool_())], schema=IDS_SCHEMA)
        self._writer(("ids", name), self.work / "ids" / f"{name}.parquet", IDS_SCHEMA).write_table(table)

    def quarantine(self, name: str, file_no: int, records: list[dict], maybe_duplicate: bool = False) -> None:
        """Quarantine records of phase A (reader, types, contract); `maybe_duplicate`: the rule becomes
        `duplicate_id` when the row's id turns out to repeat an earlier row's (as a one-pass check says)."""
        if records:
            write_quarantine(self._writer(("quarantine", name), self.work / "quarantine" / f"read-{name}.parquet",
                                          QUARANTINE_SCHEMA), TABLES.index(name), file_no, records, self._seq[name],
                             maybe_duplicate)
            self._seq[name] += len(records)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()


def to_spill(name: str, file_no: int, df: pd.DataFrame) -> pa.Table:
    columns = []
    for c, kind in RAW_TYPES[name].items():
        values = df[c] if c in df else pd.Series([None] * len(df), index=df.index, dtype=object)
        if kind == "object":
            columns.append(pa.array([None if v is None else orjson.dumps(jsonable(v)).decode() for v in values.tolist()],
                                    pa.string()))
        else:
            columns.append(pa.array(values, pa.string() if kind == "str" else pa.int64(), from_pandas=True))
    extra = [c for c in df.columns if c not in RAW_TYPES[name] and c != "_row"]
    if extra:
        originals = df[extra].astype(object).where(df[extra].notna(), None).to_dict("records")
        columns.append(pa.array([orjson.dumps({k: jsonable(v) for k, v in r.items()}, default=str).decode()
                                 for r in originals], pa.string()))
    else:
        columns.append(pa.nulls(len(df), pa.string()))
    columns += [pa.array(np.full(len(df), file_no, dtype=np.int32)), pa.array(df["_row"].to_numpy(np.int64))]
    return pa.table(columns, schema=row_schema(name))


def write_quarantine(writer: pq.ParquetWriter, table_no: int, file_no: int | list[int], records: list[dict], seq: int,
                     maybe_duplicate: bool = False) -> None:
    n = len(records)
    files = np.full(n, file_no, dtype=np.int32) if isinstance(file_no, int) else np.asarray(file_no, dtype=np.int32)
    writer.write_table(pa.table([
        pa.array(np.full(n, table_no, dtype=np.int8)), pa.array(files),
        pa.array([r["row"] if r["row"] is not None else 0 for r in records], pa.int64()),
        pa.array(np.arange(seq, seq + n, dtype=np.int64)), pa.array(np.full(n, maybe_duplicate)),
        pa.array([r["rule"] for r in records], pa.string()),
        pa.array([json.dumps(jsonable(r), ensure_ascii=False, default=str) for r in records], pa.string())],
        schema=QUARANTINE_SCHEMA))


def read_rows(work: Path, name: str, unit: int) -> pd.DataFrame:
    """One unit's spilled rows of a table, JSON-typed columns decoded (empty, with the columns, when none)."""
    path = Path(work) / "rows" / name / f"unit={unit}" / "part.parquet"
    table = pq.read_table(path) if path.exists() else row_schema(name).empty_table()
    return decode(name, table)


def decode(name: str, table: pa.Table) -> pd.DataFrame:
    df = table.to_pandas()
    for c, kind in RAW_TYPES[name].items():
        if kind == "object":
            df[c] = pd.Series([None if v is None else orjson.loads(v) for v in table.column(c).to_pylist()],
                              index=df.index, dtype=object)
    return df


def originals(name: str, df: pd.DataFrame) -> list[dict]:
    """Rows as the user wrote them (contract columns and any others), for quarantine records."""
    contract = df[list(RAW_TYPES[name])].astype(object)
    out = contract.where(contract.notna(), None).to_dict("records")
    for row, extra in zip(out, df["_extra"].tolist()):
        if isinstance(extra, str):
            row.update(orjson.loads(extra))
    return [{k: jsonable(v) for k, v in r.items()} for r in out]
