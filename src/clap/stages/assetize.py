"""assetize: raw chunks, facts and decisions → validated, normalised, content-addressed assets.

    clap assetize --raw data/raw --out data/assets        (DVC stage `assetize`)

Reads `chunks`, `facts`, `decisions` as .jsonl, .csv or .parquet; every row ends up either in an
asset file or in `quarantine.jsonl` with stage, file, row, rule and column (rows in = kept +
quarantined, per input, checked before anything is written). Facts are normalised (DESIGN §3) and
their evidence repaired where the source allows it: a missing quote is re-found in the evidence
chunk, a wrong chunk id is re-pointed to the chunk of the same document page that holds the value.
Facts that stay unverifiable are kept with `verifiable = False` and a reason; materialize sends them
to the repair queue instead of training.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from clap import normalize as nz
from clap import normalize_many as nm
from clap.io import (
    InputFileError,
    atomic_dir,
    content_hash,
    find_input,
    quarantine_record,
    read_table,
    write_json,
    write_jsonl,
)
from clap.normalize import normalize_period
from clap.schemas import (
    ID_COLUMN,
    INT_COLUMNS,
    RAW_SCHEMAS,
    ChunkAsset,
    DecisionAsset,
    FactAsset,
    split_valid,
    typed_empty,
)

STAGE = "assetize"
RAW_OF = {"metric_raw": "metric", "period_raw": "period", "unit_raw": "unit"}  # fact asset column -> raw column
STR_COLUMNS = {
    "chunks": ["chunk_id", "doc_id", "text", "lang", "batch"],
    "facts": ["record_id", "batch", "doc_id", "chunk_id", "entity", "metric", "period", "unit", "evidence",
              "lang", "question"],
    "decisions": ["record_id", "batch", "case_type", "situation", "action", "risk_focus", "lang"],
}


@contextlib.contextmanager
def _gc_paused():
    """Millions of short-lived tuples make the cyclic GC rescan a large heap again and again (~15 % of
    the stage at 1M facts); nothing here builds reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run(raw: Path, out: Path, repaired: Path | None = None) -> dict:
    """Assetize `raw` into `out`. Returns the report (also written to `out/report.json`)."""
    with _gc_paused():
        return _run(Path(raw), Path(out), repaired)


def _run(raw: Path, out: Path, repaired: Path | None) -> dict:
    tables, quarantine, report = {}, [], {"inputs": {}, "noise": {}}
    if not raw.is_dir():
        raise InputFileError(f"{raw}: no such folder (--raw)")
    if repaired is not None and not Path(repaired).exists():
        raise InputFileError(f"{repaired}: no such file or folder (--repaired)")
    paths = {name: find_input(raw, name) for name in ("chunks", "facts", "decisions")}
    with atomic_dir(out, (raw, repaired)) as tmp, ThreadPoolExecutor(2) as pool:
        # the chunk side runs while the facts are read and parsed: first what fact verification waits
        # for (read, fold, find numbers), then the chunk asset (hash, validate, write)
        chunk_side = pool.submit(_chunk_side, paths["chunks"])
        chunk_asset = pool.submit(lambda: _chunk_asset(chunk_side.result()[0], tmp / "chunks.parquet"))
        loaded = {name: _load(paths[name], name) for name in ("facts", "decisions")}
        df, bad = loaded["facts"]
        repaired_ids: set[str] = set()
        if repaired is not None:
            df, bad, report["repaired_rows_in"], repaired_ids = _merge_repaired(df, bad, Path(repaired))
        loaded["facts"] = df, bad
        facts, fact_bad, noise = _facts(df, lambda: chunk_side.result()[2], str(paths["facts"]))
        loaded["chunks"] = chunk_side.result()[:2]
        chunks = chunk_asset.result()
        for name in ("chunks", "facts", "decisions"):
            df, bad = loaded[name]
            tables[name] = df
            quarantine += bad
            report["inputs"][name] = {"file": str(paths[name]), "rows_in": len(df) + len(bad), "quarantined": len(bad),
                                      "extra_columns": sorted(set(df.columns) - set(RAW_SCHEMAS[name].to_schema().columns) - {"_row"})}
        decisions, dec_bad = _decisions(tables["decisions"], report["inputs"]["decisions"]["file"])
        quarantine += fact_bad + dec_bad
        report["inputs"]["facts"]["quarantined"] += len(fact_bad)
        report["inputs"]["decisions"]["quarantined"] += len(dec_bad)
        for name, df in (("chunks", chunks), ("facts", facts), ("decisions", decisions)):
            entry = report["inputs"][name]
            entry["kept"] = len(df)
            if entry["kept"] + entry["quarantined"] != entry["rows_in"]:
                raise AssertionError(f"{name}: rows in {entry['rows_in']} != kept {entry['kept']} + quarantined {entry['quarantined']}")
        report["noise"] = noise
        report["batches"] = _batch_ids(chunks, facts, decisions)
        report["quarantine_by_rule"] = _count(q["rule"] for q in quarantine)
        report["verifiable_facts"] = int(facts["verifiable"].sum())
        if repaired is not None:  # the flywheel's effect: how many repaired rows are now usable for training
            fixed = facts["record_id"].isin(repaired_ids)
            report["repaired_rows_verifiable"] = int((fixed & facts["verifiable"]).sum())
        report["unverifiable_facts"] = int((~facts["verifiable"]).sum())
        facts, decisions = typed_empty(facts, FactAsset), typed_empty(decisions, DecisionAsset)
        FactAsset.validate(facts, lazy=True)
        DecisionAsset.validate(decisions, lazy=True)
        facts_written = pool.submit(facts.to_parquet, tmp / "facts.parquet", index=False)  # encoding releases the GIL
        decisions.to_parquet(tmp / "decisions.parquet", index=False)
        write_jsonl(tmp / "quarantine.jsonl", quarantine)
        write_json(tmp / "report.json", report)
        facts_written.result()  # a failed write raises here, inside atomic_dir: nothing is left behind
    return report


def _chunk_side(path: Path) -> tuple[pd.DataFrame, list[dict], _Chunks]:
    """Raw chunks, their quarantine and what fact verification needs of each chunk."""
    df, bad = _load(path, "chunks")
    return df, bad, _Chunks(df)


def _chunk_asset(df: pd.DataFrame, parquet: Path) -> pd.DataFrame:
    """The chunk asset table: content-addressed, validated, written."""
    chunks = df[["chunk_id", "doc_id", "page", "text", "lang", "batch"]].reset_index(drop=True)
    chunks["content_hash"] = [hashlib.sha256(f"{d}\x1f{p}\x1f{t}".encode()).hexdigest()  # = io.content_hash(d, p, t)
                              for d, p, t in zip(_pylist(chunks["doc_id"]), chunks["page"].tolist(), _pylist(chunks["text"]))]
    chunks = typed_empty(chunks, ChunkAsset)
    ChunkAsset.validate(chunks, lazy=True)
    chunks.to_parquet(parquet, index=False)
    return chunks


def _merge_repaired(df: pd.DataFrame, bad: list[dict], repaired: Path) -> tuple[pd.DataFrame, list[dict], int, set[str]]:
    """Repaired fact rows (`repaired/*.jsonl`, or one file) replace raw rows with the same record_id.

    The replaced raw rows are accounted as quarantined with rule `superseded_by_repair`, so rows in =
    kept + quarantined still holds over raw and repaired inputs together.
    """
    files = sorted(repaired.glob("*.jsonl")) if repaired.is_dir() else ([repaired] if repaired.exists() else [])
    taken, ids = 0, set()
    for f in files:
        extra, extra_bad = _load(f, "facts")
        taken += len(extra) + len(extra_bad)
        bad = bad + extra_bad
        replaced = df["record_id"].isin(set(extra["record_id"]))
        bad += [quarantine_record(STAGE, str(f), int(r["_row"]), "superseded_by_repair", "record_id",
                                  {k: v for k, v in r.items() if k != "_row"}) for r in df[replaced].to_dict("records")]
        df = pd.concat([df[~replaced], extra], ignore_index=True)
        ids |= set(extra["record_id"])
    return df, bad, taken, ids


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in items:
        out[it] = out.get(it, 0) + 1
    return dict(sorted(out.items()))


def _load(path: Path, name: str) -> tuple[pd.DataFrame, list[dict]]:
    df, bad = read_table(path, STAGE, _contract_types(name))
    df, type_bad = _coerce(df, name, str(path))
    try:
        kept, invalid = split_valid(df, RAW_SCHEMAS[name], STAGE, str(path), ID_COLUMN[name])
    except ValueError as exc:
        raise InputFileError(str(exc)) from exc
    return kept, bad + type_bad + invalid


def _contract_types(name: str) -> dict[str, str]:
    """Column -> "str" | "int" | "object" for the columnar reader (object: any JSON type, e.g. `value`)."""
    return {c: "str" if c in STR_COLUMNS[name] else "int" if c in INT_COLUMNS[name] else "object"
            for c in RAW_SCHEMAS[name].to_schema().columns}


def _coerce(df: pd.DataFrame, name: str, file: str) -> tuple[pd.DataFrame, list[dict]]:
    """Cast columns to their contract types; a value that cannot be cast quarantines its row."""
    bad, drop = [], pd.Series(False, index=df.index)
    for col in STR_COLUMNS[name]:
        if col in df and pd.api.types.infer_dtype(df[col], skipna=True) not in ("string", "empty"):
            df[col] = df[col].map(_as_str).astype(object)
    for col in INT_COLUMNS[name]:
        if col not in df:
            continue
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
    for col in INT_COLUMNS[name]:
        if col in df:
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


def _batch_ids(*tables: pd.DataFrame) -> dict:
    """Rows per batch id over all assets, and ids that look like another (`B1`, `b1`, `1`): a word, not a merge."""
    counts: dict[str, int] = {}
    for t in tables:
        for b, n in t["batch"].value_counts().items():
            counts[str(b)] = counts.get(str(b), 0) + int(n)
    folded: dict[str, list[str]] = {}
    for b in counts:  # `B1`, `b1`, `1`, `batch-01`: the same letters/digits up to case, separators, leading zeros
        digits = re.sub(r"\D", "", b).lstrip("0")
        folded.setdefault(f"#{digits}" if digits else re.sub(r"[^0-9a-z]", "", b.casefold()), []).append(b)
    warnings = [f"batch ids {', '.join(sorted(v))} look alike: they are separate batches" for v in folded.values()
                if len(v) > 1]
    return {"rows": dict(sorted(counts.items())), "warnings": warnings}


def _as_str(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return v if isinstance(v, str) else (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[。！？])|(?<=[.!?])\s+", text) if s and s.strip()]


def _per_distinct(column: pd.Series, fn) -> list:
    """fn applied once per distinct value of a column, nulls passed as None.

    Labels, units, periods and entities repeat across millions of facts; this is what keeps
    their normalisation off the per-row path.
    """
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    results = np.empty(len(uniques) + 1, dtype=object)
    for i, u in enumerate(pd.Series(uniques).tolist()):
        results[i] = fn(u)
    results[-1] = fn(None)  # code -1: null
    return results[codes].tolist()


def _round6(x):
    """Values as written carry ≤ 6 decimals: rounding both sides makes "is it written there" an equality."""
    return np.round(np.abs(x), 6)


class _Chunks:
    """Chunk texts, folded, with the numbers each one holds (read for all chunks at once)."""

    def __init__(self, chunks: pd.DataFrame):
        self.ids = _pylist(chunks["chunk_id"])
        text = pa.array(chunks["text"], from_pandas=True)
        self.text = text.to_pylist()
        folded = nm.fold_many(text)
        self.folded = folded.to_pylist()
        self.rows, numbers = nm.numbers_many(folded)  # sorted by chunk row
        self.rounded = _round6(numbers)
        self.docs, self.pages = _pylist(chunks["doc_id"]), chunks["page"].tolist()
        self._sets: dict[int, set[float]] = {}
        self._starts: list[int] | None = None
        self.lowered = pa.array([s.lower() for s in self.folded], pa.string())  # for the terms check

    def positions(self, chunk_ids: list) -> np.ndarray:
        """Row of each chunk id in the chunk table, -1 where unknown or missing."""
        found = pc.index_in(pa.array(chunk_ids, pa.string()), value_set=pa.array(self.ids, pa.string()))
        return np.asarray(pc.fill_null(found, -1), dtype=np.int64)

    def hold(self, positions: np.ndarray, values: np.ndarray) -> np.ndarray:
        """For each fact: is its value written in the chunk at its position? (-1: no chunk.)"""
        which, k = nm.pairs(self.rows, positions)
        hit = np.zeros(len(positions), dtype=bool)
        hit[which[self.rounded[k] == _round6(values)[which]]] = True
        return hit

    def has_value(self, i: int, rounded: float) -> bool:
        """`hold` for one chunk and a value already `_round6`ed (the repair path: other chunks of the page)."""
        numbers = self._sets.get(i)
        if numbers is None:
            if self._starts is None:
                self._starts = np.searchsorted(self.rows, np.arange(len(self.ids) + 1)).tolist()
            numbers = self._sets[i] = set(self.rounded[self._starts[i]:self._starts[i + 1]].tolist())
        return rounded in numbers

    def pages_of(self, keys: set[tuple[str, int]]) -> dict[tuple[str, int], list[int]]:
        """Chunk rows of each (doc, page) asked for, in table order."""
        out: dict[tuple[str, int], list[int]] = {}
        if not keys:
            return out
        near = pc.is_in(pa.array(self.docs, pa.string()), value_set=pa.array(sorted({d for d, _ in keys}), pa.string()))
        for i in np.flatnonzero(np.asarray(near, dtype=bool)).tolist():
            key = (self.docs[i], int(self.pages[i]))
            if key in keys:
                out.setdefault(key, []).append(i)
        return out

    def terms_found_many(self, terms: dict[str, nz.MetricTerms | None], metrics: list[str], positions: np.ndarray) -> np.ndarray:
        """`terms_found` per row: one substring search per distinct label and term over its rows' chunks.

        A Chinese label found verbatim in the lower-cased chunk is found in its punctuation-free key
        too (the key only drops characters the label has none of), so `metric_key` of a chunk is
        computed only for the rows where the verbatim search fails.
        """
        found = np.zeros(len(metrics), dtype=bool)
        codes, labels = pd.factorize(pd.Series(metrics, dtype=object))
        codes = np.where(positions >= 0, codes, -1)  # rows without a chunk are never found
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(labels) + 1))
        for code, label in enumerate(labels):
            t = terms[label]
            rows = order[bounds[code]:bounds[code + 1]]
            if t is None or not len(rows) or (not t.cjk and not t.words):
                continue
            texts = self.lowered.take(pa.array(positions[rows]))
            ok = np.ones(len(rows), dtype=bool)
            for term in [t.key] if t.cjk else t.words:
                ok &= np.asarray(pc.match_substring(texts, term), dtype=bool)
            if t.cjk:
                for k in np.flatnonzero(~ok).tolist():
                    ok[k] = t.key in nz.metric_key(self.lowered[int(positions[rows[k]])].as_py())
            found[rows] = ok
        return found


def _quotes(evidence: pd.Series, values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Each row's quote folded, and whether the row's value is written in it (each distinct quote read once)."""
    codes, uniques = pd.factorize(evidence)
    folded = nm.fold_many(pd.Series(uniques, dtype=object).tolist() + [None])  # code -1 (no quote) → the last, ""
    owner = np.where(codes < 0, len(uniques), codes)
    held = nm.values_among(values, *nm.numbers_many(folded), owner=owner)
    return np.array(folded.to_pylist(), dtype=object)[owner].tolist(), held


def _row_hashes(*columns: list) -> list[str]:
    """io.content_hash(chunk_id, entity, metric key, period, value, unit, evidence) per row, inlined."""
    return [hashlib.sha256("\x1f".join((c or "", e, k, p, str(v), u, ev or "")).encode()).hexdigest()
            for c, e, k, p, v, u, ev in zip(*columns)]


def _find_quotes(texts: list[str], values: np.ndarray, metrics: list[str], terms: dict) -> list[str | None]:
    """Per row: the single sentence of its chunk text holding the value and the metric's terms, else None."""
    rows, sentences = [], []
    for r, text in enumerate(texts):
        split = _sentences(text)
        rows += [r] * len(split)
        sentences += split
    rows_arr = np.array(rows, dtype=np.int64)
    folded = nm.fold_many(sentences)
    holds = nm.values_among(values[rows_arr], *nm.numbers_many(folded)) if sentences else np.zeros(0, dtype=bool)
    for k, lowered in enumerate(s.lower() for s in folded.to_pylist()):
        if holds[k]:
            t = terms[metrics[rows[k]]]
            holds[k] = nz.terms_found(t, lowered, nz.metric_key(lowered) if t is not None and t.cjk else "")
    found = np.bincount(rows_arr[holds], minlength=len(texts))
    first = {}
    for k in np.flatnonzero(holds).tolist():
        first.setdefault(rows[k], sentences[k])
    return [first[r] if found[r] == 1 else None for r in range(len(texts))]


def _pylist(column: pd.Series) -> list:
    """Python values of a text column, nulls as None (through arrow: 2× the pandas route)."""
    try:
        return pa.array(column, from_pandas=True).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types
        return column.astype(object).where(column.notna(), None).tolist()


def _value_noise(values: list, parsed: np.ndarray, folded: pa.Array) -> dict[str, int]:
    """How values were written: JSON numbers, full-width or unseparated text, (negatives), multipliers."""
    raw = nm.strings(values)  # JSON numbers become null here
    text = np.asarray(raw.is_valid(), dtype=bool)

    def count(mask) -> int:
        return int((np.asarray(pc.fill_null(mask, False), dtype=bool) & text).sum())

    unseparated = np.asarray(pc.fill_null(pc.invert(pc.match_substring(raw, ",")), False), dtype=bool) & (np.abs(parsed) >= 1000)
    return {
        "numeric_value": int((~text).sum()),
        "fullwidth_or_format": count(pc.or_(pc.not_equal(folded, raw), pa.array(unseparated))),
        "negative_in_parentheses": count(pc.match_substring_regex(raw, rf"^[ {nm._WS}]*[(（]")),  # = str.strip() first
        "multiplier_in_value": count(pc.match_substring_regex(raw, "[亿万千]|million|billion", ignore_case=True)),
    }


def _facts(df: pd.DataFrame, chunks: Callable[[], _Chunks], file: str) -> tuple[pd.DataFrame, list[dict], dict]:
    """Normalise, verify and repair facts (`chunks()` waits for the chunk side where it is first needed).

    Column-at-a-time (normalize_many) for folding, number parsing and "is the value written in its
    chunk and its quote"; per distinct value for labels, units and periods; per row in Python only
    for the rows that need repair and for the cheap substring checks.
    """
    noise = dict.fromkeys(("value_bearing_label", "unit_respelled", "fullwidth_or_format", "numeric_value",
                           "negative_in_parentheses", "multiplier_in_value", "missing_evidence_found",
                           "missing_evidence_fixed", "wrong_evidence_chunk_found", "wrong_evidence_chunk_fixed",
                           "evidence_not_in_chunk", "duplicate_content", "duplicate_across_batches",
                           "question_missing"), 0)
    df = df.reset_index(drop=True)
    labels = _per_distinct(df["metric"], nz.clean_metric_label)
    values, units = df["value"].tolist(), _pylist(df["unit"])
    parsed, unit, folded_values = nm.parse_quantities(values, units)
    keep, bad_at = [], {}
    for i, (u, (metric, _)) in enumerate(zip(unit, labels)):
        if u is None:
            rule = "unknown_unit" if nz.parse_quantity(values[i], "") is not None else "unparseable_value"
            bad_at[i] = (rule, "unit" if rule == "unknown_unit" else "value")
        elif not metric:
            bad_at[i] = ("empty_metric_after_cleaning", "metric")
        else:
            keep.append(i)
    bad = []
    if bad_at:
        originals = df.iloc[list(bad_at)].drop(columns="_row").astype(object)
        originals = originals.where(originals.notna(), None).to_dict("records")
        for (rule, column), row_no, original in zip(bad_at.values(), df["_row"].iloc[list(bad_at)].tolist(), originals):
            bad.append(quarantine_record(STAGE, file, int(row_no), rule, column, original))
        df = df.iloc[keep].reset_index(drop=True)
        labels, values = [labels[i] for i in keep], [values[i] for i in keep]
        parsed, unit, folded_values = parsed[keep], unit[keep], folded_values.take(pa.array(keep))
    noise |= _value_noise(values, parsed, folded_values)
    noise["value_bearing_label"] = sum(stripped for _, stripped in labels)
    noise["unit_respelled"] = sum(_per_distinct(df["unit"], lambda u: bool(u) and nz.canonical_unit(u) not in (None, u)))
    metrics = [m for m, _ in labels]
    terms = {m: nz.metric_terms(m) for m in set(metrics)}

    cids, evidences = _pylist(df["chunk_id"]), _pylist(df["evidence"])
    docs, pages, rounded = _pylist(df["doc_id"]), df["page"].tolist(), _round6(parsed).tolist()
    ev_folded, in_quote = _quotes(df["evidence"], parsed)
    ch = chunks()
    at = ch.positions(cids)
    reasons = np.full(len(at), None, dtype=object)
    # 1. a value that is not written in its chunk: re-point to the chunk of the same page that holds it
    misplaced = np.flatnonzero(~ch.hold(at, parsed)).tolist()
    on_page = ch.pages_of({(docs[j], int(pages[j])) for j in misplaced})
    for j in misplaced:
        i = int(at[j])
        candidates = [c for c in on_page.get((docs[j], int(pages[j])), []) if ch.has_value(c, rounded[j])]
        if cids[j] is not None and (not candidates or i != candidates[0]):
            noise["wrong_evidence_chunk_found"] += 1
        if candidates:
            noise["wrong_evidence_chunk_fixed"] += i != candidates[0]
            at[j] = candidates[0]
        else:
            reasons[j] = "value_not_in_evidence_chunk"
    located = np.array([r is None for r in reasons], dtype=bool)
    # 2. a quote that is missing, not in the chunk or without the value: the one chunk sentence that has both
    quoted = np.fromiter((ok and bool(e) and f in ch.folded[i] for ok, e, f, i in zip(located, evidences, ev_folded, at.tolist())),
                         dtype=bool, count=len(at))
    requote = np.flatnonzero(located & ~(quoted & in_quote))
    missing = sum(not evidences[j] for j in requote.tolist())
    noise["missing_evidence_found"], noise["evidence_not_in_chunk"] = missing, len(requote) - missing
    quotes = _find_quotes([ch.text[at[j]] for j in requote], parsed[requote], [metrics[j] for j in requote], terms)
    for j, quote in zip(requote.tolist(), quotes):
        if quote is None:
            reasons[j] = "evidence_not_found_in_chunk"
        else:
            evidences[j] = quote
            noise["missing_evidence_fixed"] += 1
    cids = [ch.ids[i] if i >= 0 else c for c, i in zip(cids, at.tolist())]
    values_py = parsed.tolist()
    entity = _per_distinct(df["entity"], nz.fold)
    period = _per_distinct(df["period"], normalize_period)
    metric_keys = {m: nz.metric_key(m) for m in terms}
    with ThreadPoolExecutor(1) as pool:  # rows are hashed while step 3 runs in arrow (which releases the GIL)
        hashing = pool.submit(_row_hashes, cids, entity, [metric_keys[m] for m in metrics], period, values_py,
                              unit.tolist(), evidences)
        # 3. the metric's key terms must be findable in the chunk
        ok = np.array([r is None for r in reasons], dtype=bool)
        reasons[ok & ~ch.terms_found_many(terms, metrics, np.where(ok, at, -1))] = "metric_terms_not_in_chunk"
        reasons = reasons.tolist()
        question = _pylist(df["question"]) if "question" in df else [None] * len(df)
        for j, text in enumerate(question):
            if not text:
                noise["question_missing"] += 1
                question[j] = f"What was {df['entity'].iat[j]}'s {metrics[j]} for {period[j]}?"
        question = nm.fold_many(question)
        hashes = hashing.result()
    text = {"chunk_id": cids, "entity": entity, "metric": metrics, "period": period, "unit": unit.tolist(),
            "value_raw": [v if isinstance(v, str) else repr(v) for v in values], "evidence": evidences,
            "question": question, "unverifiable_reason": reasons, "content_hash": hashes}
    arrays = {c: pa.array(values, pa.string()) if isinstance(values, list) else values for c, values in text.items()}
    arrays |= {c: pa.array(df[RAW_OF.get(c, c)]) for c in ("record_id", "batch", "doc_id", "page", "metric_raw", "period_raw",
                                                          "unit_raw", "lang")}
    arrays["value"] = pa.array(parsed, pa.float64())
    arrays["verifiable"] = pa.array(np.array([r is None for r in reasons], dtype=bool))
    out = pa.table({c: arrays[c] for c in FactAsset.to_schema().columns}).to_pandas()
    out["page"] = out["page"].astype("int64")
    noise["duplicate_content"], noise["duplicate_across_batches"] = _duplicates(out["batch"], out["content_hash"])
    return out, bad, noise


def _duplicates(batch: pd.Series, content: pd.Series) -> tuple[int, int]:
    """(rows repeating content already seen in their batch, rows whose content first appeared in an earlier batch)."""
    if not len(content):
        return 0, 0
    content_code, _ = pd.factorize(content)
    batch_code, batches = pd.factorize(batch, sort=True)  # sorted: a lower code is an earlier batch
    seen_in_batch = pd.Series(content_code * len(batches) + batch_code).duplicated(keep="first")
    first_batch = np.full(content_code.max() + 1, len(batches))
    np.minimum.at(first_batch, content_code, batch_code)
    return int(seen_in_batch.sum()), int((batch_code != first_batch[content_code]).sum())


def _decisions(df: pd.DataFrame, file: str) -> tuple[pd.DataFrame, list[dict]]:
    rows, bad = [], []
    for r in df.to_dict("records"):
        causes = r["causes"]
        numeric = {k: v for k, v in causes.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not numeric:
            bad.append(quarantine_record(STAGE, file, int(r["_row"]), "no_numeric_cause", "causes",
                                         {k: v for k, v in r.items() if k != "_row"}))
            continue
        main = max(numeric, key=lambda k: numeric[k])
        causes_json = json.dumps(causes, ensure_ascii=False, sort_keys=True)
        rows.append({"record_id": r["record_id"], "batch": r["batch"], "case_type": r["case_type"],
                     "situation": nz.fold(r["situation"]), "causes_json": causes_json, "main_cause": main,
                     "action": r["action"].strip(), "risk_focus": r["risk_focus"], "lang": r["lang"],
                     "content_hash": content_hash(r["case_type"], nz.fold(r["situation"]), causes_json, r["action"])})
    return pd.DataFrame.from_records(rows, columns=list(DecisionAsset.to_schema().columns)), bad
