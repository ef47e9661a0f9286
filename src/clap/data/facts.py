"""The fact steps of `clap assetize`: normalise, locate, re-quote, check terms, assemble.

    facts, quarantined, noise = verify_facts(rows, Chunks(chunk_rows), files)

`rows` are contract-valid raw fact rows of one unit of work (with `_file`, `_row`: where each came
from) and `Chunks` every chunk they can point at. Each step is column-at-a-time (clap.data.columnar)
and returns what the next needs; the noise counters say what was found and fixed, so a user sees
what the corpus looked like, not only what came out.
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from clap.data import normalize_many as nm
from clap.data.columnar import Chunks, find_quotes, per_distinct, pylist, quotes, round6, row_hashes, value_noise
from clap.domain import quantities as nz
from clap.domain.contracts import FactAsset
from clap.domain.quantities import normalize_period
from clap.io import quarantine_record

STAGE = "assetize"
RAW_OF = {"metric_raw": "metric", "period_raw": "period", "unit_raw": "unit"}  # fact asset column -> raw column
NOISE_KEYS = ("value_bearing_label", "unit_respelled", "fullwidth_or_format", "numeric_value", "negative_in_parentheses",
              "multiplier_in_value", "missing_evidence_found", "missing_evidence_fixed", "wrong_evidence_chunk_found",
              "wrong_evidence_chunk_fixed", "evidence_not_in_chunk", "duplicate_content", "duplicate_across_batches",
              "question_missing")


@dataclass
class _Normalised:
    """Step 1's result: the rows kept, with their label, value and unit normalised."""

    rows: pd.DataFrame
    metrics: list[str]
    values: list  # as written (str or JSON number)
    parsed: np.ndarray
    unit: np.ndarray
    terms: dict


def verify_facts(rows: pd.DataFrame, chunks: Chunks, files: list[str],
                 repaired_files: Collection[int] = ()) -> tuple[pd.DataFrame, list[dict], dict]:
    """Normalise, verify and repair one unit's facts. Returns (fact asset rows, quarantine, noise counts).
    `repaired_files`: indexes into `files` of the repair files (`repair/fixed/`); their rows are marked `repaired`."""
    noise = dict.fromkeys(NOISE_KEYS, 0)
    facts, bad = normalise(rows.reset_index(drop=True), files, noise)
    cids, at, reasons = locate(facts, chunks, noise)
    evidences = requote(facts, chunks, at, reasons, noise)
    cids = [chunks.ids[i] if i >= 0 else c for c, i in zip(cids, at.tolist())]
    return assemble(facts, chunks, cids, at, evidences, reasons, noise, repaired_files), bad, noise


def normalise(df: pd.DataFrame, files: list[str], noise: dict) -> tuple[_Normalised, list[dict]]:
    """1. Labels cleaned, values parsed with their unit; a value or label that cannot be read quarantines the row."""
    labels = per_distinct(df["metric"], nz.clean_metric_label)
    values, units = df["value"].tolist(), pylist(df["unit"])
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
        at = list(bad_at)
        originals = df.iloc[at].drop(columns=["_row", "_file"]).astype(object)
        originals = originals.where(originals.notna(), None).to_dict("records")
        for (rule, column), file_no, row_no, original in zip(bad_at.values(), df["_file"].iloc[at].tolist(),
                                                             df["_row"].iloc[at].tolist(), originals):
            bad.append(quarantine_record(STAGE, files[file_no], int(row_no), rule, column, original))
        df = df.iloc[keep].reset_index(drop=True)
        labels, values = [labels[i] for i in keep], [values[i] for i in keep]
        parsed, unit, folded_values = parsed[keep], unit[keep], folded_values.take(pa.array(keep))
    noise |= value_noise(values, parsed, folded_values)
    noise["value_bearing_label"] = sum(stripped for _, stripped in labels)
    noise["unit_respelled"] = sum(per_distinct(df["unit"], lambda u: bool(u) and nz.canonical_unit(u) not in (None, u)))
    metrics = [m for m, _ in labels]
    return _Normalised(df, metrics, values, parsed, unit, {m: nz.metric_terms(m) for m in set(metrics)}), bad


def locate(f: _Normalised, chunks: Chunks, noise: dict) -> tuple[list, np.ndarray, np.ndarray]:
    """2. A value not written in its chunk is re-pointed to the chunk of the same page that holds it.

    Returns (chunk ids as given, the chunk row of each fact — -1: none, reasons — None: verifiable so far).
    """
    cids, docs, pages = pylist(f.rows["chunk_id"]), pylist(f.rows["doc_id"]), f.rows["page"].tolist()
    rounded = round6(f.parsed).tolist()
    at = chunks.positions(cids)
    reasons = np.full(len(at), None, dtype=object)
    misplaced = np.flatnonzero(~chunks.hold(at, f.parsed)).tolist()
    on_page = chunks.pages_of({(docs[j], int(pages[j])) for j in misplaced})
    for j in misplaced:
        i = int(at[j])
        candidates = [c for c in on_page.get((docs[j], int(pages[j])), []) if chunks.has_value(c, rounded[j])]
        if cids[j] is not None and (not candidates or i != candidates[0]):
            noise["wrong_evidence_chunk_found"] += 1
        if candidates:
            noise["wrong_evidence_chunk_fixed"] += i != candidates[0]
            at[j] = candidates[0]
        else:
            reasons[j] = "value_not_in_evidence_chunk"
    return cids, at, reasons


def requote(f: _Normalised, chunks: Chunks, at: np.ndarray, reasons: np.ndarray, noise: dict) -> list:
    """3. A quote that is missing, not in the chunk or without the value: the one chunk sentence that has both."""
    evidences = pylist(f.rows["evidence"])
    ev_folded, in_quote = quotes(f.rows["evidence"], f.parsed)
    located = np.array([r is None for r in reasons], dtype=bool)
    quoted = np.fromiter((ok and bool(e) and q in chunks.folded[i]
                          for ok, e, q, i in zip(located, evidences, ev_folded, at.tolist())), dtype=bool, count=len(at))
    again = np.flatnonzero(located & ~(quoted & in_quote))
    missing = sum(not evidences[j] for j in again.tolist())
    noise["missing_evidence_found"], noise["evidence_not_in_chunk"] = missing, len(again) - missing
    found = find_quotes([chunks.text[at[j]] for j in again], f.parsed[again], [f.metrics[j] for j in again], f.terms)
    for j, quote in zip(again.tolist(), found):
        if quote is None:
            reasons[j] = "evidence_not_found_in_chunk"
        else:
            evidences[j] = quote
            noise["missing_evidence_fixed"] += 1
    return evidences


def assemble(f: _Normalised, chunks: Chunks, cids: list, at: np.ndarray, evidences: list, reasons: np.ndarray,
             noise: dict, repaired_files: Collection[int] = ()) -> pd.DataFrame:
    """4. The metric's key terms must be findable in the chunk; 5. questions filled, rows hashed, the asset table."""
    df, metrics, unit = f.rows, f.metrics, f.unit
    entity = per_distinct(df["entity"], nz.fold)
    period = per_distinct(df["period"], normalize_period)
    metric_keys = {m: nz.metric_key(m) for m in f.terms}
    with ThreadPoolExecutor(1) as pool:  # rows are hashed while step 4 runs in arrow (which releases the GIL)
        hashing = pool.submit(row_hashes, cids, entity, [metric_keys[m] for m in metrics], period, f.parsed.tolist(),
                              unit.tolist(), evidences)
        ok = np.array([r is None for r in reasons], dtype=bool)
        reasons[ok & ~chunks.terms_found_many(f.terms, metrics, np.where(ok, at, -1))] = "metric_terms_not_in_chunk"
        reasons = reasons.tolist()
        question = pylist(df["question"]) if "question" in df else [None] * len(df)
        for j, text in enumerate(question):
            if not text:
                noise["question_missing"] += 1
                question[j] = f"What was {df['entity'].iat[j]}'s {metrics[j]} for {period[j]}?"
        question = nm.fold_many(question)
        hashes = hashing.result()
    text = {"chunk_id": cids, "entity": entity, "metric": metrics, "period": period, "unit": unit.tolist(),
            "value_raw": [v if isinstance(v, str) else repr(v) for v in f.values], "evidence": evidences,
            "question": question, "unverifiable_reason": reasons, "content_hash": hashes}
    arrays = {c: pa.array(v, pa.string()) if isinstance(v, list) else v for c, v in text.items()}
    arrays |= {c: pa.array(df[RAW_OF.get(c, c)]) for c in ("record_id", "batch", "doc_id", "page", "metric_raw",
                                                          "period_raw", "unit_raw", "lang")}
    arrays["value"] = pa.array(f.parsed, pa.float64())
    arrays["verifiable"] = pa.array(np.array([r is None for r in reasons], dtype=bool))
    arrays["repaired"] = pa.array(np.isin(df["_file"].to_numpy(), list(repaired_files)))
    out = pa.table({c: arrays[c] for c in FactAsset.to_schema().columns}).to_pandas()
    out["page"] = out["page"].astype("int64")
    for c in ("_file", "_row"):  # where each row came from: the final write orders the unit's rows back into input order
        out[c] = df[c].to_numpy()
    return out
