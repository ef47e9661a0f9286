"""Column-at-a-time helpers for assets: per-distinct-value work, chunk numbers, quotes, row hashes.

Millions of facts repeat a few thousand labels, units and periods and point at far fewer chunks;
these helpers do the per-value work once per distinct value or chunk, in arrow/numpy where they can,
and leave Python loops for the rows that need them. Used by `clap.data.facts` (the fact steps of
`clap assetize`); nothing here knows about files or stages.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from clap.data import normalize_many as nm
from clap.domain import quantities as nz


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"\s*\n\s*|(?<=[。！？])|(?<=[.!?])\s+", text) if s and s.strip()]


def per_distinct(column: pd.Series, fn) -> list:
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


def round6(x):
    """Values as written carry ≤ 6 decimals: rounding both sides makes "is it written there" an equality."""
    return np.round(np.abs(x), 6)


class Chunks:
    """Chunk texts, folded, with the numbers each one holds (read for all chunks at once)."""

    def __init__(self, chunks: pd.DataFrame):
        self.ids = pylist(chunks["chunk_id"])
        text = pa.array(chunks["text"], from_pandas=True)
        self.text = text.to_pylist()
        folded = nm.fold_many(text)
        self.folded = folded.to_pylist()
        self.rows, numbers = nm.numbers_many(folded)  # sorted by chunk row
        self.rounded = round6(numbers)
        self.docs, self.pages = pylist(chunks["doc_id"]), chunks["page"].tolist()
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
        hit[which[self.rounded[k] == round6(values)[which]]] = True
        return hit

    def has_value(self, i: int, rounded: float) -> bool:
        """`hold` for one chunk and a value already `round6`ed (the repair path: other chunks of the page)."""
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


def quotes(evidence: pd.Series, values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Each row's quote folded, and whether the row's value is written in it (each distinct quote read once)."""
    codes, uniques = pd.factorize(evidence)
    folded = nm.fold_many(pd.Series(uniques, dtype=object).tolist() + [None])  # code -1 (no quote) → the last, ""
    owner = np.where(codes < 0, len(uniques), codes)
    held = nm.values_among(values, *nm.numbers_many(folded), owner=owner)
    return np.array(folded.to_pylist(), dtype=object)[owner].tolist(), held


def row_hashes(*columns: list) -> list[str]:
    """io.content_hash(chunk_id, entity, metric key, period, value, unit, evidence) per row, inlined."""
    return [hashlib.sha256("\x1f".join((c or "", e, k, p, str(v), u, ev or "")).encode()).hexdigest()
            for c, e, k, p, v, u, ev in zip(*columns)]


def find_quotes(texts: list[str], values: np.ndarray, metrics: list[str], terms: dict) -> list[str | None]:
    """Per row: the single sentence of its chunk text holding the value and the metric's terms, else None."""
    rows, sentences = [], []
    for r, text in enumerate(texts):
        split = split_sentences(text)
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


def pylist(column: pd.Series) -> list:
    """Python values of a text column, nulls as None (through arrow: 2× the pandas route)."""
    try:
        return pa.array(column, from_pandas=True).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types
        return column.astype(object).where(column.notna(), None).tolist()


def value_noise(values: list, parsed: np.ndarray, folded: pa.Array) -> dict[str, int]:
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
