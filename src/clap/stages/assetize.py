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

import json
import re
from functools import lru_cache
from pathlib import Path

import pandas as pd

from clap import normalize as nz
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
from clap.schemas import ID_COLUMN, INT_COLUMNS, RAW_SCHEMAS, ChunkAsset, DecisionAsset, FactAsset, split_valid

STAGE = "assetize"
STR_COLUMNS = {
    "chunks": ["chunk_id", "doc_id", "text", "lang", "batch"],
    "facts": ["record_id", "batch", "doc_id", "chunk_id", "entity", "metric", "period", "unit", "evidence",
              "lang", "question"],
    "decisions": ["record_id", "batch", "case_type", "situation", "action", "risk_focus", "lang"],
}


def run(raw: Path, out: Path, repaired: Path | None = None) -> dict:
    """Assetize `raw` into `out`. Returns the report (also written to `out/report.json`)."""
    raw, out = Path(raw), Path(out)
    tables, quarantine, report = {}, [], {"inputs": {}, "noise": {}}
    for name in ("chunks", "facts", "decisions"):
        path = find_input(raw, name)
        df, bad = _load(path, name)
        if name == "facts" and repaired is not None:
            df, bad, report["repaired_rows_in"] = _merge_repaired(df, bad, Path(repaired))
        tables[name] = df
        quarantine += bad
        report["inputs"][name] = {"file": str(path), "rows_in": len(df) + len(bad), "quarantined": len(bad),
                                  "extra_columns": sorted(set(df.columns) - set(RAW_SCHEMAS[name].to_schema().columns) - {"_row"})}
    chunks = _chunks(tables["chunks"])
    facts, fact_bad, noise = _facts(tables["facts"], chunks, report["inputs"]["facts"]["file"])
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
    report["quarantine_by_rule"] = _count(q["rule"] for q in quarantine)
    report["verifiable_facts"] = int(facts["verifiable"].sum())
    report["unverifiable_facts"] = int((~facts["verifiable"]).sum())
    ChunkAsset.validate(chunks, lazy=True)
    FactAsset.validate(facts, lazy=True)
    DecisionAsset.validate(decisions, lazy=True)
    with atomic_dir(out) as tmp:
        chunks.to_parquet(tmp / "chunks.parquet", index=False)
        facts.to_parquet(tmp / "facts.parquet", index=False)
        decisions.to_parquet(tmp / "decisions.parquet", index=False)
        write_jsonl(tmp / "quarantine.jsonl", quarantine)
        write_json(tmp / "report.json", report)
    return report


def _merge_repaired(df: pd.DataFrame, bad: list[dict], repaired: Path) -> tuple[pd.DataFrame, list[dict], int]:
    """Repaired fact rows (`repaired/*.jsonl`, or one file) replace raw rows with the same record_id.

    The replaced raw rows are accounted as quarantined with rule `superseded_by_repair`, so rows in =
    kept + quarantined still holds over raw and repaired inputs together.
    """
    files = sorted(repaired.glob("*.jsonl")) if repaired.is_dir() else ([repaired] if repaired.exists() else [])
    taken = 0
    for f in files:
        extra, extra_bad = _load(f, "facts")
        taken += len(extra) + len(extra_bad)
        bad = bad + extra_bad
        replaced = df["record_id"].isin(set(extra["record_id"]))
        bad += [quarantine_record(STAGE, str(f), int(r["_row"]), "superseded_by_repair", "record_id",
                                  {k: v for k, v in r.items() if k != "_row"}) for r in df[replaced].to_dict("records")]
        df = pd.concat([df[~replaced], extra], ignore_index=True)
    return df, bad, taken


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for it in items:
        out[it] = out.get(it, 0) + 1
    return dict(sorted(out.items()))


def _load(path: Path, name: str) -> tuple[pd.DataFrame, list[dict]]:
    df, bad = read_table(path, STAGE)
    df, type_bad = _coerce(df, name, str(path))
    try:
        kept, invalid = split_valid(df, RAW_SCHEMAS[name], STAGE, str(path), ID_COLUMN[name])
    except ValueError as exc:
        raise InputFileError(str(exc)) from exc
    return kept, bad + type_bad + invalid


def _coerce(df: pd.DataFrame, name: str, file: str) -> tuple[pd.DataFrame, list[dict]]:
    """Cast columns to their contract types; a value that cannot be cast quarantines its row."""
    bad, drop = [], pd.Series(False, index=df.index)
    for col in STR_COLUMNS[name]:
        if col in df and pd.api.types.infer_dtype(df[col], skipna=True) not in ("string", "empty"):
            df[col] = df[col].map(_as_str).astype(object)
    for col in INT_COLUMNS[name]:
        if col not in df:
            continue
        num = pd.to_numeric(df[col], errors="coerce")
        wrong = (df[col].notna() & (num.isna() | (num % 1 != 0))) | df[col].isna()
        for i in df.index[wrong & ~drop]:
            rule = "not_null" if pd.isna(df.at[i, col]) else "type:int"
            original = {k: v for k, v in df.loc[i].items() if k != "_row"}
            bad.append(quarantine_record(STAGE, file, int(df.at[i, "_row"]), rule, col, original))
        drop |= wrong
        df[col] = num.where(~wrong)
    df = df[~drop].copy()
    for col in INT_COLUMNS[name]:
        if col in df:
            df[col] = df[col].astype("int64")
    return df, bad


def _as_str(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return v if isinstance(v, str) else (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else str(v))


def _chunks(df: pd.DataFrame) -> pd.DataFrame:
    out = df[["chunk_id", "doc_id", "page", "text", "lang", "batch"]].copy()
    out["content_hash"] = [content_hash(d, p, t) for d, p, t in zip(out["doc_id"], out["page"], out["text"])]
    return out.reset_index(drop=True)


@lru_cache(maxsize=65536)
def _label(metric_raw: str) -> tuple[str, bool]:
    return nz.clean_metric_label(metric_raw)


@lru_cache(maxsize=65536)
def _unit(unit_raw: str) -> str | None:
    return nz.canonical_unit(unit_raw)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[。！？])|(?<=[.!?])\s+", text) if s and s.strip()]


def _facts(df: pd.DataFrame, chunks: pd.DataFrame, file: str) -> tuple[pd.DataFrame, list[dict], dict]:
    text_of = dict(zip(chunks["chunk_id"], chunks["text"]))
    page_chunks: dict[tuple[str, int], list[str]] = {}
    for cid, doc, page in zip(chunks["chunk_id"], chunks["doc_id"], chunks["page"]):
        page_chunks.setdefault((doc, int(page)), []).append(cid)
    numbers_of: dict[str, set[float]] = {}
    folded: dict[str, str] = {}

    def has_value(cid: str, v: float) -> bool:
        if cid not in numbers_of:  # values as written carry ≤ 6 decimals; rounding makes this a set lookup
            numbers_of[cid] = {round(abs(x), 6) for x in nz.numbers_in(text_of[cid])}
        return round(abs(v), 6) in numbers_of[cid]

    noise = {k: 0 for k in ("value_bearing_label", "unit_respelled", "fullwidth_or_format", "numeric_value",
                            "negative_in_parentheses", "multiplier_in_value", "missing_evidence_found",
                            "missing_evidence_fixed", "wrong_evidence_chunk_found", "wrong_evidence_chunk_fixed",
                            "evidence_not_in_chunk", "duplicate_content", "duplicate_across_batches",
                            "question_missing")}
    rows, bad = [], []
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    for r in records:
        value_raw = r["value"]
        unit_raw = r.get("unit")
        metric, stripped = _label(r["metric"])
        q = nz.parse_quantity(value_raw, unit_raw or "")
        if q is None:
            rule = "unknown_unit" if nz.parse_quantity(value_raw, "") is not None else "unparseable_value"
            bad.append(quarantine_record(STAGE, file, int(r["_row"]), rule, "unit" if rule == "unknown_unit" else "value",
                                         {k: v for k, v in r.items() if k != "_row"}))
            continue
        if not metric:
            bad.append(quarantine_record(STAGE, file, int(r["_row"]), "empty_metric_after_cleaning", "metric",
                                         {k: v for k, v in r.items() if k != "_row"}))
            continue
        noise["value_bearing_label"] += stripped
        raw_s = value_raw if isinstance(value_raw, str) else None
        if isinstance(value_raw, (int, float)):
            noise["numeric_value"] += 1
        elif raw_s is not None:
            noise["fullwidth_or_format"] += nz.fold(raw_s) != raw_s or ("," not in raw_s and abs(q.value) >= 1000)
            noise["negative_in_parentheses"] += raw_s.strip().startswith(("(", "（"))
            noise["multiplier_in_value"] += bool(re.search(r"[亿万千]|million|billion", raw_s, re.I))
        unit_c = _unit(unit_raw or "") if unit_raw else None
        noise["unit_respelled"] += bool(unit_raw) and unit_c is not None and unit_c != unit_raw
        cid, evidence, reason = r.get("chunk_id"), r.get("evidence"), None
        page_key = (r["doc_id"], int(r["page"]))
        if cid not in text_of or not has_value(cid, q.value):
            candidates = [c for c in page_chunks.get(page_key, []) if has_value(c, q.value)]
            if cid is not None and cid != (candidates[0] if candidates else None):
                noise["wrong_evidence_chunk_found"] += 1
            if candidates:
                noise["wrong_evidence_chunk_fixed"] += cid != candidates[0]
                cid = candidates[0]
            else:
                reason = "value_not_in_evidence_chunk"
        text = text_of.get(cid, "") if cid else ""
        if cid and cid not in folded:
            folded[cid] = nz.fold(text)
        if reason is None and (not evidence or nz.fold(evidence) not in folded.get(cid, "")
                               or not nz.value_in_text(q.value, evidence)):
            if not evidence:
                noise["missing_evidence_found"] += 1
            else:
                noise["evidence_not_in_chunk"] += 1
            found = [s for s in _sentences(text) if nz.value_in_text(q.value, s) and nz.terms_in_text(metric, s)]
            if len(found) == 1:
                evidence = found[0]
                noise["missing_evidence_fixed"] += 1
            else:
                reason = "evidence_not_found_in_chunk"
        if reason is None and not nz.terms_in_text(metric, text):
            reason = "metric_terms_not_in_chunk"
        question = r.get("question")
        if not question:
            noise["question_missing"] += 1
            question = f"What was {r['entity']}'s {metric} for {normalize_period(r['period'])}?"
        period = normalize_period(r["period"])
        rows.append({
            "record_id": r["record_id"], "batch": r["batch"], "doc_id": r["doc_id"], "page": int(r["page"]),
            "chunk_id": cid, "entity": nz.fold(r["entity"]), "metric": metric, "metric_raw": r["metric"],
            "period": period, "period_raw": r["period"], "value": float(q.value),
            "value_raw": value_raw if isinstance(value_raw, str) else repr(value_raw), "unit": q.unit,
            "unit_raw": unit_raw, "evidence": evidence, "lang": r["lang"], "question": nz.fold(question),
            "verifiable": reason is None, "unverifiable_reason": reason,
            "content_hash": content_hash(cid, nz.fold(r["entity"]), nz.metric_key(metric), period, q.value, q.unit, evidence),
        })
    out = pd.DataFrame.from_records(rows, columns=list(FactAsset.to_schema().columns))
    if len(out):
        dup = out.duplicated(subset=["batch", "content_hash"], keep="first")
        noise["duplicate_content"] = int(dup.sum())
        first_batch = out.groupby("content_hash")["batch"].transform("min")
        noise["duplicate_across_batches"] = int((out["batch"] != first_batch).sum())
    out["page"] = out["page"].astype("int64")
    out["value"] = out["value"].astype("float64")
    out["verifiable"] = out["verifiable"].astype(bool)
    return out, bad, noise


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
