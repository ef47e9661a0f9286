"""Raw tables read in blocks of rows: JSONL, CSV and Parquet, each row numbered as in its file.

    reader = TableReader(path, "assetize", RAW_TYPES["facts"], block_rows=100_000)
    for rows, quarantined in reader: ...        # rows carry `_row`; reader.columns: every column seen

Memory follows the block, not the file. A row that cannot be decoded or parsed is never dropped: it
comes back as a quarantine record (stage, file, row, rule, column, original). A file that cannot be
read at all raises `InputFileError` naming the file and the reason — before any block is yielded
where the reason is visible up front (encoding, header), else when the reader meets it (the caller
writes nothing until the whole input has been read).
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from clap.io import DuplicateKey, InputFileError, loads_strict, quarantine_record

BOMS = [(codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")]
SCAN_BYTES = 16 << 20


class TableReader:
    """Iterate (rows, quarantined) blocks of one raw table; `columns` and `rows_in` fill as it goes."""

    def __init__(self, path: Path, stage: str, types: dict[str, str] | None, block_rows: int):
        self.path, self.stage, self.types, self.block_rows = Path(path), stage, types, block_rows
        self.columns: set[str] = set()
        self.rows_in = 0
        if not self.path.exists():
            raise InputFileError(f"{self.path}: no such file")

    def __iter__(self) -> Iterator[tuple[pd.DataFrame, list[dict]]]:
        suffix = self.path.suffix.lower()
        blocks = {".jsonl": self._jsonl, ".csv": self._csv, ".parquet": self._parquet}.get(suffix)
        if blocks is None:
            raise InputFileError(f"{self.path}: unsupported format {suffix!r} (use .jsonl, .csv or .parquet)")
        for rows, bad in blocks():
            self.columns |= set(rows.columns) - {"_row"}
            self.rows_in += len(rows) + len(bad)
            yield rows, bad

    # ------------------------------------------------------------------ JSONL
    def _jsonl(self) -> Iterator[tuple[pd.DataFrame, list[dict]]]:
        codec = _bom_codec(self.path)
        seen_text, lines_read, non_utf8 = False, 0, []
        with open(self.path, "rb") as raw:
            if codec == "utf-8-sig":
                raw.read(len(codecs.BOM_UTF8))
            lines = raw if codec in (None, "utf-8-sig") else _reencoded(raw, codec, self.path)
            while block := list(itertools.islice(lines, self.block_rows)):
                data = b"".join(block)
                seen_text = seen_text or bool(data.strip())
                fast = _read_jsonl_columnar(data, self.types) if self.types else None  # valid UTF-8 when it succeeds
                if fast is not None:
                    fast["_row"] += lines_read
                    yield fast, []
                else:
                    rows, bad = self._jsonl_lines(block, lines_read + 1)
                    non_utf8 += [(r["row"], block[r["row"] - lines_read - 1]) for r in bad if r["rule"] == "non_utf8"]
                    yield rows, bad
                lines_read += len(block)
        _refuse_other_encoding(self.path, non_utf8, lines_read)
        if seen_text and not self.rows_in:
            raise InputFileError(f"{self.path}: no JSON lines found")

    def _jsonl_lines(self, block: list[bytes], first: int) -> tuple[pd.DataFrame, list[dict]]:
        rows: list[dict] = []
        bad: list[dict] = []
        for n, line in enumerate(block, start=first):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
                if isinstance(obj, dict) and line.count(b'":') > len(obj):  # nested, quoted — or a repeated key
                    loads_strict(line)
            except DuplicateKey:
                text = line.rstrip(b"\n").decode("utf-8", errors="replace")
                bad.append(quarantine_record(self.stage, str(self.path), n, "duplicate_key", None, text))
                continue
            except (orjson.JSONDecodeError, ValueError):
                text = line.rstrip(b"\n").decode("utf-8", errors="replace")
                rule = "malformed_json" if _is_utf8(line) else "non_utf8"
                bad.append(quarantine_record(self.stage, str(self.path), n, rule, None, text))
                continue
            if not isinstance(obj, dict):
                bad.append(quarantine_record(self.stage, str(self.path), n, "not_an_object", None, obj))
                continue
            obj["_row"] = n
            rows.append(obj)
        df = pd.DataFrame.from_records(rows)
        if "_row" not in df:
            df["_row"] = pd.Series(dtype="int64")
        return df, bad

    # ------------------------------------------------------------------ CSV
    def _csv(self) -> Iterator[tuple[pd.DataFrame, list[dict]]]:
        codec = _bom_codec(self.path)
        clean = codec is not None or _scan_utf8(self.path)
        encoding = "utf-8" if codec is None else codec
        with open(self.path, encoding=encoding, errors="replace", newline="") as f:
            header = next(csv.reader([f.readline().rstrip("\r\n")]), [])
        self.columns |= {name.strip() for name in header if name.strip()}
        seen: dict[str, int] = {}
        for i, name in enumerate(header, start=1):
            if name.strip() in seen:
                raise InputFileError(f"{self.path}: column {name.strip()!r} appears twice in the header "
                                     f"(columns {seen[name.strip()]} and {i})")
            seen[name.strip()] = i
        try:  # a file with stray bytes is read as Python strings, so the bad rows can be found and quarantined
            chunks = pd.read_csv(self.path, dtype=str if clean else object, keep_default_na=False, na_values=[""],
                                 encoding=encoding, encoding_errors="strict" if clean else "surrogateescape",
                                 chunksize=self.block_rows)
            first = 2  # header is line 1
            for df in chunks:
                df.columns = [str(c).strip() for c in df.columns]
                df.insert(0, "_row", range(first, first + len(df)))
                first += len(df)
                yield (df, []) if clean else self._csv_surrogates(df)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
            raise InputFileError(f"{self.path}: not a readable CSV file ({str(exc).strip()})") from None

    def _csv_surrogates(self, df: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
        columns = [c for c in df.columns if c != "_row"]
        bad, keep = [], []
        for i, row in zip(df.index, df[columns].itertuples(index=False, name=None)):
            col = next((c for c, v in zip(columns, row) if isinstance(v, str) and _has_surrogate(v)), None)
            if col is None:
                keep.append(i)
                continue
            original = {c: v.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if isinstance(v, str) else v
                        for c, v in zip(columns, row)}
            bad.append(quarantine_record(self.stage, str(self.path), int(df.at[i, "_row"]), "non_utf8", col, original))
        kept = df.loc[keep].reset_index(drop=True)
        for c in columns:
            kept[c] = kept[c].astype("str").where(kept[c].notna(), None)
        return kept, bad

    # ------------------------------------------------------------------ Parquet
    def _parquet(self) -> Iterator[tuple[pd.DataFrame, list[dict]]]:
        try:
            file = pq.ParquetFile(self.path)
            first = 1
            for batch in file.iter_batches(batch_size=self.block_rows):
                df = pa.Table.from_batches([batch]).to_pandas()
                df.insert(0, "_row", range(first, first + len(df)))
                first += len(df)
                yield df, []
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputFileError(f"{self.path}: not a readable Parquet file ({exc})") from None


def _bom_codec(path: Path) -> str | None:
    with open(path, "rb") as f:
        head = f.read(4)
    return next((codec for bom, codec in BOMS if head.startswith(bom)), None)


def _reencoded(raw, codec: str, path: Path) -> Iterator[bytes]:
    """Lines of a UTF-16/32 file (a byte-order mark, as spreadsheet tools write) as UTF-8 bytes."""
    text = io.TextIOWrapper(raw, encoding=codec, newline="")
    try:
        for line in text:
            yield line.encode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: starts with a {codec} byte-order mark but is not {codec} "
                             f"(byte {exc.start})") from None


def _scan_utf8(path: Path) -> bool:
    """Whether every byte of a (CSV) file is UTF-8; refuses a file in another encoding (`_refuse_other_encoding`)."""
    bad, lines = [], 0
    with open(path, "rb") as f:
        rest = b""
        while data := f.read(SCAN_BYTES):
            data, rest = _split_last_line(rest + data)
            if not _is_utf8(data):
                bad += [(n, line) for n, line in enumerate(data.split(b"\n"), start=lines + 1) if not _is_utf8(line)]
            lines += data.count(b"\n")
        if rest:
            lines += 1
            if not _is_utf8(rest):
                bad.append((lines, rest))
    _refuse_other_encoding(path, bad, lines)
    return not bad


def _refuse_other_encoding(path: Path, bad: list[tuple[int, bytes]], lines: int) -> None:
    """A line or two of stray bytes stays (those rows are quarantined as `non_utf8`); a file in another
    encoding (GBK, Latin-1 …) is refused naming the first bad line and the encoding it reads as."""
    if len(bad) >= 2 and len(bad) > 0.01 * max(lines, 1):
        blob = b"\n".join(line for _, line in bad[:200])
        guess = next((c for c in ("gb18030", "big5", "shift_jis", "cp1252") if _decodes(blob, c)), None)
        raise InputFileError(f"{path}: not UTF-8 ({len(bad)} lines, first at line {bad[0][0]})"
                             + (f"; it reads as {guess}: re-save it as UTF-8" if guess else "; re-save it as UTF-8"))


def _split_last_line(data: bytes) -> tuple[bytes, bytes]:
    """(whole lines, the unfinished last line)."""
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


def _is_utf8(b: bytes) -> bool:
    return _decodes(b, "utf-8")


def _decodes(b: bytes, codec: str) -> bool:
    try:
        b.decode(codec)
        return True
    except UnicodeDecodeError:
        return False


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
    keys = [b'"%s"' % c.encode() for c in loose]  # arrow refuses a typed key twice; msgspec would keep a loose one's last
    if any(line.count(k) > 1 for line in lines for k in keys):
        return None  # maybe repeated (or quoted in a value): the line-by-line path decides, and quarantines a repeat
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


def _has_surrogate(v: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in v)


