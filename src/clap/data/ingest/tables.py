"""Tables with the user's column names → raw contract rows, by a mapping declared once in `conf/ingest/`.

    for row_number, row in read_rows(Path("sources/tables/kpis.xlsx"), sheet=None): ...
    fields = map_row(row, source, row_number)        # MappingError(field, detail) when a value cannot be mapped

A source (config.TableSource) says which contract table it feeds (`facts`, `decisions`, `chunks`), which of the
file's columns holds each contract field (`columns: {value: Amount, period: FY}`), constants (`lang: en`) and a
few declarative transforms per field (`strip`, `lower`, `upper`, `prefix`, `suffix`, `replace`, `map`,
`multiply`, `from_json`, `date`) — no code in config. CSV, XLSX (openpyxl, read-only, streamed), Parquet (pyarrow,
by row group) and JSONL are read a row at a time, so memory does not follow the file's size.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
from collections.abc import Iterator
from pathlib import Path

from clap.errors import UserError
from clap.io import loads_strict

TABLE_FORMATS = (".csv", ".xlsx", ".parquet", ".jsonl")


class MappingError(Exception):
    """One row's value that the mapping cannot turn into its field (the row is quarantined, the rest go on)."""

    def __init__(self, field: str, rule: str, detail: str):
        super().__init__(detail)
        self.field, self.rule = field, rule


class UncomputedFormula(str):
    """An XLSX cell that holds a formula but no saved value (a file written by a program that never computed it):
    never read as an empty cell; a row that maps it is quarantined (`formula_without_value`)."""


class TableFileError(UserError, ValueError):
    """A whole table is unusable as mapped (a mapped column it lacks, a format it is not): one line naming it."""


def header(path: Path, sheet: str | None) -> list[str]:
    """The file's column names (the first row of a CSV or sheet, the schema of Parquet, the first JSONL object)."""
    for _, row in read_rows(path, sheet, limit=1):
        return list(row)
    return []


def read_rows(path: Path, sheet: str | None = None, limit: int | None = None) -> Iterator[tuple[int, dict]]:
    """(row number as a user counts it — the header is row 1 of a CSV or sheet, a JSONL's first line is 1 —, the
    row as {column: value}), streamed."""
    suffix = path.suffix.lower()
    if suffix not in TABLE_FORMATS:
        raise TableFileError(f"{path}: a table must be one of {', '.join(TABLE_FORMATS)}")
    if not path.is_file():
        raise TableFileError(f"{path}: no such file (ingest.tables)")
    reader = {".csv": _csv, ".xlsx": _xlsx, ".parquet": _parquet, ".jsonl": _jsonl}[suffix]
    for n, (row_number, row) in enumerate(reader(path, sheet)):
        if limit is not None and n >= limit:
            return
        yield row_number, row


def _csv(path: Path, sheet) -> Iterator[tuple[int, dict]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            yield from enumerate(csv.DictReader(fh), start=2)
    except UnicodeDecodeError as exc:
        raise TableFileError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); save it as UTF-8") from None


def _xlsx(path: Path, sheet: str | None) -> Iterator[tuple[int, dict]]:
    import zipfile

    from openpyxl import load_workbook

    try:
        book = load_workbook(path, read_only=True, data_only=True)
        formulas = load_workbook(path, read_only=True, data_only=False)  # what a cell without a value holds
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise TableFileError(f"{path}: not a readable XLSX ({exc})") from None
    try:
        if sheet is not None and sheet not in book.sheetnames:
            raise TableFileError(f"{path}: no sheet {sheet!r} (sheets: {', '.join(book.sheetnames)})")
        name = sheet or book.sheetnames[0]
        rows = zip(book[name].iter_rows(values_only=True), formulas[name].iter_rows(values_only=True))
        names = None
        for i, (values, written) in enumerate(rows, start=1):
            if names is None:
                names = [str(v).strip() if v is not None else f"column {j + 1}" for j, v in enumerate(values)]
                continue
            values = [UncomputedFormula(f) if v is None and isinstance(f, str) and f.startswith("=") else v
                      for v, f in zip(values, written)]
            if all(v is None for v in values):
                continue
            yield i, dict(zip(names, values))
    finally:
        book.close()
        formulas.close()


def _parquet(path: Path, sheet) -> Iterator[tuple[int, dict]]:
    import pyarrow.parquet as pq

    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
        for row in batch.to_pylist():
            n += 1
            yield n, row


def _jsonl(path: Path, sheet) -> Iterator[tuple[int, dict]]:
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = loads_strict(line)
            except ValueError as exc:
                raise TableFileError(f"{path}:{i}: not a JSON object ({exc})") from None
            if not isinstance(row, dict):
                raise TableFileError(f"{path}:{i}: not a JSON object")
            yield i, row


# ---------------------------------------------------------------- transforms (pure)
def _text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def period_of(value, precision: str) -> str:
    """A date (a datetime, `2024-03-31`, `2024/03/31`, `20240331`) as a batch or period id: `2024`, `2024Q1`,
    `2024-03` or `2024-03-31`."""
    if isinstance(value, dt.datetime | dt.date):
        d = value if isinstance(value, dt.date) and not isinstance(value, dt.datetime) else value.date()
    else:
        text = _text(value).strip().replace("/", "-").replace(".", "-")
        if len(text) == 8 and text.isdigit():
            text = f"{text[:4]}-{text[4:6]}-{text[6:]}"
        try:
            d = dt.date.fromisoformat(text[:10])
        except ValueError:
            raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None
    return {"year": f"{d.year}", "quarter": f"{d.year}Q{(d.month - 1) // 3 + 1}", "month": f"{d.year}-{d.month:02d}",
            "day": d.isoformat()}[precision]


def apply_transform(value, op: str, arg):
    """One declarative transform; raises ValueError with what was wrong (pure)."""
    if op == "strip":
        return _text(value).strip()
    if op == "lower":
        return _text(value).lower()
    if op == "upper":
        return _text(value).upper()
    if op == "prefix":
        return f"{arg}{_text(value)}"
    if op == "suffix":
        return f"{_text(value)}{arg}"
    if op == "replace":
        text = _text(value)
        for old, new in arg.items():
            text = text.replace(old, new)
        return text
    if op == "map":
        return arg.get(_text(value), value)
    if op == "multiply":
        number = float(_text(value).replace(",", ""))
        if not math.isfinite(number):
            raise ValueError(f"{value!r} is not a finite number")
        return number * arg
    if op == "from_json":
        if isinstance(value, dict | list):
            return value
        return json.loads(_text(value))
    if op == "date":
        return period_of(value, arg)
    raise ValueError(f"unknown transform {op}")


def map_row(row: dict, columns: dict[str, str], constants: dict, transforms: dict[str, list[tuple[str, object]]],
            ) -> dict:
    """The contract fields of one row: mapped columns, then constants, each through its transforms (pure)."""
    out = {}
    for field, column in columns.items():
        value = row.get(column)
        if isinstance(value, UncomputedFormula):
            raise MappingError(field, "formula_without_value", f"column {column!r} holds the formula {value} with no "
                               "saved value: open and save the file in a spreadsheet program so the value is stored")
        empty = isinstance(value, float) and math.isnan(value) or isinstance(value, str) and not value.strip()
        out[field] = None if empty else value  # an empty cell is a missing value, whatever the format
    out |= constants
    for field, ops in transforms.items():
        if out.get(field) is None:
            continue
        for op, arg in ops:
            try:
                out[field] = apply_transform(out[field], op, arg)
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                raise MappingError(field, "transform_failed", f"{op}: {exc}") from None
    for field, value in out.items():
        if isinstance(value, dt.datetime | dt.date):
            out[field] = value.isoformat()
    return out
