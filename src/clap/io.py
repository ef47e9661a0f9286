"""Reading user tables row by row with quarantine, and writing outputs atomically.

A row that cannot be decoded or parsed is never dropped: it comes back as a quarantine record
(stage, file, row, rule, column, original). A file that cannot be read at all raises
`InputFileError` naming the file and the reason. Writers go through a temporary path in the same
folder and an atomic rename, so a crash never leaves an output that DVC would accept.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import errno
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from clap.errors import UserError

SUFFIXES = (".jsonl", ".csv", ".parquet")


class InputFileError(UserError, RuntimeError):
    """A whole input file is unusable; the message names the file and the reason."""


def quarantine_record(stage: str, file: str, row: int | None, rule: str, column: str | None, original) -> dict:
    return {"stage": stage, "file": file, "row": row, "rule": rule, "column": column, "original": original}


def find_input(folder: Path, name: str) -> Path:
    """`folder/name.{jsonl,csv,parquet}` — exactly one must exist."""
    found = [folder / f"{name}{s}" for s in SUFFIXES if (folder / f"{name}{s}").exists()]
    if not found:
        raise InputFileError(f"{folder}/{name}.(jsonl|csv|parquet): no such file")
    if len(found) > 1:
        raise InputFileError(f"{folder}/{name}: several formats present ({', '.join(p.name for p in found)})")
    return found[0]


def read_table(path: Path, stage: str, types: dict[str, str] | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """Read a JSONL/CSV/Parquet table. Returns (rows with a `_row` column, quarantined rows).

    `_row` is the 1-based line (JSONL), record (CSV) or row (Parquet) number in the file.
    `types` (column -> "str" | "int" | "object", from the contract) enables the columnar JSONL
    fast path; without it, or when the file is not clean, lines are read one by one.
    """
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path, stage, types)
    if suffix == ".csv":
        return _read_csv(path, stage)
    if suffix == ".parquet":
        try:
            df = pq.read_table(path).to_pandas()
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputFileError(f"{path}: not a readable Parquet file ({exc})") from exc
        df.insert(0, "_row", range(1, len(df) + 1))
        return df, []
    raise InputFileError(f"{path}: unsupported format {suffix!r} (use .jsonl, .csv or .parquet)")


BOMS = [(codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")]


def read_text_bytes(path: Path) -> tuple[bytes, bool]:
    """A text file's bytes as UTF-8: a byte-order mark (UTF-8/16/32, as spreadsheet tools write) is
    honoured; a file in another encoding (GBK, Latin-1 …) is refused naming the file and the first bad
    line. A line or two of stray bytes in a UTF-8 file stays: its rows are quarantined as `non_utf8`.
    Returns (bytes, whether every byte is valid UTF-8)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    for bom, codec in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec).encode("utf-8"), True
            except UnicodeDecodeError as exc:
                raise InputFileError(f"{path}: starts with a {codec} byte-order mark but is not {codec} "
                                     f"(byte {exc.start})") from None
    if _is_utf8(data):
        return data, True
    lines = data.split(b"\n")
    bad = [n for n, line in enumerate(lines, start=1) if not _is_utf8(line)]
    if len(bad) >= 2 and len(bad) > 0.01 * len(lines):
        guess = next((c for c in ("gb18030", "big5", "shift_jis", "cp1252") if _decodes(data, c)), None)
        raise InputFileError(f"{path}: not UTF-8 ({len(bad)} lines, first at line {bad[0]})"
                             + (f"; it reads as {guess}: re-save it as UTF-8" if guess else "; re-save it as UTF-8"))
    return data, False


def _is_utf8(b: bytes) -> bool:
    return _decodes(b, "utf-8")


def _decodes(b: bytes, codec: str) -> bool:
    try:
        b.decode(codec)
        return True
    except UnicodeDecodeError:
        return False


def _read_jsonl(path: Path, stage: str, types: dict[str, str] | None = None) -> tuple[pd.DataFrame, list[dict]]:
    data, _ = read_text_bytes(path)
    if types:
        fast = _read_jsonl_columnar(data, types)
        if fast is not None:
            return fast, []
    rows: list[dict] = []
    bad: list[dict] = []
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            text = line.decode("utf-8", errors="replace")
            try:
                line.decode("utf-8")
                rule = "malformed_json"
            except UnicodeDecodeError:
                rule = "non_utf8"
            bad.append(quarantine_record(stage, str(path), n, rule, None, text))
            continue
        if not isinstance(obj, dict):
            bad.append(quarantine_record(stage, str(path), n, "not_an_object", None, obj))
            continue
        obj["_row"] = n
        rows.append(obj)
    if not rows and not bad and data.strip():
        raise InputFileError(f"{path}: no JSON lines found")
    df = pd.DataFrame.from_records(rows)
    if "_row" not in df:
        df["_row"] = pd.Series(dtype="int64")
    return df, bad


def _read_jsonl_columnar(data: bytes, types: dict[str, str]) -> pd.DataFrame | None:
    """Clean files only: one JSON object per line, the contract's types, no blank lines.

    pyarrow's multithreaded JSON reader parses the str/int columns; columns whose values may be of
    several JSON types ("object", e.g. a fact's `value`: "1,234.5" or 1234.5) are decoded per line by
    msgspec, which also refuses unknown keys. Anything unusual (a malformed or non-UTF-8 line, a
    blank line, a wrong type, an unknown key, a contract column missing from every row) returns None
    and the caller reads line by line, which quarantines each bad row with its reason. Measured
    2.3× faster than the line-by-line path on 1M demo facts (3.7 s vs 8.6 s).
    """
    if not data or data.startswith(b"\n") or b"\n\n" in data or b"\r" in data:
        return None
    typed = {c: t for c, t in types.items() if t in ("str", "int")}
    loose = [c for c, t in types.items() if t == "object"]
    schema = pa.schema([(c, pa.string() if t == "str" else pa.int64()) for c, t in typed.items()])
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore" if loose else "infer")
    with ThreadPoolExecutor(1) as pool:  # arrow parses (GIL released) while msgspec decodes the loose columns
        parsed = pool.submit(pa_json.read_json, pa.py_buffer(data), read_options=pa_json.ReadOptions(block_size=4 << 20),
                             parse_options=options)
        lines = data.split(b"\n")
        if not lines[-1]:
            lines.pop()
        loose_values = _loose_columns(lines, types, loose) if loose else {}
        try:
            table = parsed.result()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    if loose_values is None or table.num_rows != len(lines) or any(table.column(c).null_count == table.num_rows for c in typed):
        return None
    df = table.to_pandas()
    for c, values in loose_values.items():
        df[c] = pd.Series(values, dtype=object)
    df = df[[c for c in types if c in df] + [c for c in df if c not in types]]  # contract order, as rows are written
    df.insert(0, "_row", range(1, len(df) + 1))
    return df


def _loose_columns(lines: list[bytes], types: dict[str, str], loose: list[str]) -> dict[str, list] | None:
    """The columns of any JSON type, decoded per line; None when a line is not a clean contract row."""
    line_type = msgspec.defstruct("Line", [(c, object if c in loose else msgspec.Raw, msgspec.UNSET) for c in types],
                                  forbid_unknown_fields=True)
    decode = msgspec.json.Decoder(line_type).decode
    try:
        decoded = [decode(line) for line in lines]
    except msgspec.DecodeError:
        return None
    out = {}
    for c in loose:
        values = [getattr(r, c) for r in decoded]
        if all(v is msgspec.UNSET for v in values):
            return None
        out[c] = [None if v is msgspec.UNSET else v for v in values]
    return out


def _read_csv(path: Path, stage: str) -> tuple[pd.DataFrame, list[dict]]:
    data, clean = read_text_bytes(path)
    header = next(csv.reader([data.split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")]), [])
    seen: dict[str, int] = {}
    for i, name in enumerate(header, start=1):
        if name.strip() in seen:
            raise InputFileError(f"{path}: column {name.strip()!r} appears twice in the header "
                                 f"(columns {seen[name.strip()]} and {i})")
        seen[name.strip()] = i
    try:  # a file with stray bytes is read as Python strings, so the bad rows can be found and quarantined
        df = pd.read_csv(io.BytesIO(data), dtype=str if clean else object, keep_default_na=False, na_values=[""],
                         encoding="utf-8", encoding_errors="strict" if clean else "surrogateescape")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise InputFileError(f"{path}: not a readable CSV file ({str(exc).strip()})") from None
    df.columns = [str(c).strip() for c in df.columns]
    df.insert(0, "_row", range(2, len(df) + 2))  # header is line 1
    if clean:
        return df, []
    columns = [c for c in df.columns if c != "_row"]
    bad, keep = [], []
    for i, row in zip(df.index, df[columns].itertuples(index=False, name=None)):
        col = next((c for c, v in zip(columns, row) if isinstance(v, str) and _has_surrogate(v)), None)
        if col is None:
            keep.append(i)
            continue
        original = {c: v.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if isinstance(v, str) else v
                    for c, v in zip(columns, row)}
        bad.append(quarantine_record(stage, str(path), int(df.at[i, "_row"]), "non_utf8", col, original))
    kept = df.loc[keep].reset_index(drop=True)
    for c in columns:
        kept[c] = kept[c].astype("str").where(kept[c].notna(), None)
    return kept, bad


def _has_surrogate(v: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in v)


def jsonable(value):
    """Turn numpy/pandas scalars and NaN into plain JSON values."""
    if isinstance(value, float) and value != value:
        return None
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            return value.item()
        except (ValueError, AttributeError):
            return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is pd.NA or value is pd.NaT:
        return None
    return value


OUTPUT_MARKER = ".clap-output"  # inside every folder a stage writes: the proof that CLAP created it


class OutputRefused(UserError, RuntimeError):
    """An output path that would destroy something CLAP did not create, or that cannot be written."""


def check_output_dir(out: Path, inputs: tuple[Path, ...] = ()) -> None:
    """Refuse an output folder that overlaps an input, or exists without CLAP's marker.

    A stage replaces only a folder it created itself: `--out data/raw` (an input), `--out .` (a
    parent of everything) or any unrelated existing folder is refused before any work starts.
    """
    out = Path(out)
    target = out.resolve()
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp).resolve()
        if target == src or target in src.parents or src in target.parents:
            raise OutputRefused(f"{out}: output overlaps the input {inp}; a stage never writes where it reads")
    blocking = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise OutputRefused(f"{out}: cannot write ({blocking} is a file, not a folder)")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputRefused(f"{out}: exists and is not a folder; refusing to replace it")
    if out.is_dir() and any(out.iterdir()) and not (out / OUTPUT_MARKER).is_file():
        raise OutputRefused(f"{out}: existing folder not created by clap (no {OUTPUT_MARKER}); "
                            "choose another output path or remove it yourself")


def _disk_error(exc: BaseException) -> bool:
    """A full, read-only or forbidden output (pyarrow's writers may leave errno unset and say it in words)."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT) or any(
        words in str(exc) for words in ("No space left", "Read-only file system", "Disk quota exceeded"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clear_stale(out: Path) -> None:
    """Remove temporary siblings (`.name.tmp-PID-*`, `.name.old-PID`) left by killed runs."""
    for p in out.parent.glob(f".{out.name}.*-*"):
        m = re.fullmatch(rf"\.{re.escape(out.name)}\.(?:tmp|old)-(\d+)(?:-.*)?", p.name)
        if m and p.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(out: Path, inputs: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `out`, on error it is removed.

    `out` is checked first (`check_output_dir`): never an input, never a folder CLAP did not create.
    The new folder carries the marker; an unwritable or full disk becomes `OutputRefused` naming `out`.
    """
    out = Path(out)
    check_output_dir(out, inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _clear_stale(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise OutputRefused(f"{out}: cannot write ({exc.strerror or exc})") from None
    try:
        (tmp / OUTPUT_MARKER).write_text("created by clap; this folder is replaced whole by the stage that wrote it\n")
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if _disk_error(exc):
            raise OutputRefused(f"{out}: cannot write ({exc.strerror or exc}); nothing was changed") from None
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(jsonable(obj), indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def write_jsonl(path: Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(jsonable(r), ensure_ascii=False) + "\n" for r in rows))


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_json_if_exists(path: Path):
    """The JSON document at `path`, or None when the stage that writes it has not run."""
    return read_json(path) if Path(path).exists() else None


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def content_hash(*parts) -> str:
    """sha256 of the parts joined by a unit separator (None counts as empty): the content address of a row."""
    return hashlib.sha256("\x1f".join("" if p is None else str(p) for p in parts).encode()).hexdigest()


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(jsonable(obj), sort_keys=True, ensure_ascii=False).encode()).hexdigest()
