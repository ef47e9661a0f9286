"""A folder of documents and the mapped tables → the raw contract (`chunks`, `facts`, `decisions` as JSONL).

    report = ingest(section, docs=Path("sources/docs"), out=Path("data/raw"), batches=["b1"])

Checked before any work: the documents folder, each table's file, sheet and mapped columns, and that every
mapped field is one of its contract's fields and every required one is mapped (one line naming the file, the
column and the field). Then:
  1. tables, streamed: each row mapped (clap.data.ingest.tables) and spilled to a temporary JSONL;
  2. documents, `workers` at once in processes, in a bounded window (memory follows the largest document,
     not the folder): read (blocks), chunked, inline XBRL facts extracted; chunks of the documents the
     tables' facts cite are kept (text only) to find their evidence;
  3. table facts: the cited document resolved (its path, file name or doc id), the value found in a line of
     that document (on the mapped page when there is one) — that line is the fact's evidence and its chunk; a
     fact without a mapped period takes the one its value's column header names (`2019: $624`), else it is
     quarantined (`no_period`).
Nothing is lost: documents in = ingested + listed as bad with a reason; rows in = written + quarantined with
a rule (`ingest_quarantine.jsonl`); both checked before the output replaces the previous one.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from clap.data.ingest import ixbrl
from clap.data.ingest import tables as tb
from clap.data.ingest.blocks import BadDocument, Limits, read_document
from clap.data.ingest.chunking import chunk_blocks
from clap.data.ingest.grid import period_of_value
from clap.data.ingest.tables import period_of
from clap.domain.contracts import RAW_SCHEMAS
from clap.domain.quantities import parse_quantity, terms_in_text, value_in_text
from clap.errors import UserError
from clap.io import atomic_dir, jsonable, quarantine_record

REPORT = "ingest_report.json"
QUARANTINE = "ingest_quarantine.jsonl"
TABLES = ("chunks", "facts", "decisions")
# contract fields ingest fills itself when a table does not map them
AUTO_FIELDS = {"facts": {"record_id", "batch", "lang", "page", "chunk_id", "evidence", "question", "period"},
               "decisions": {"record_id", "batch", "lang"},
               "chunks": {"chunk_id", "batch", "lang", "page"}}
DATE_FIELD = "date"  # a mapped column that dates each row, for `batch_by: date`


class IngestError(UserError, ValueError):
    """A mistake in the sources or their mapping; the message names the file, column, field or batch."""


def contract_fields(kind: str) -> tuple[set[str], set[str]]:
    """(every field, the required ones) of a raw contract table, read from its Pandera model."""
    columns = RAW_SCHEMAS[kind].to_schema().columns
    return set(columns), {n for n, c in columns.items() if c.required and not c.nullable}


def check_sources(section, docs: Path) -> None:
    """Every mistake in the sources' layout and mapping, before any work."""
    if not docs.is_dir():
        raise IngestError(f"{docs}: no such folder (ingest.docs, or --docs)")
    for i, source in enumerate(section.tables):
        where = f"ingest.tables[{i}]"
        path = Path(source.path)
        fields, required = contract_fields(source.kind)
        mapped = set(source.columns) | set(source.constants)
        for name in sorted((mapped | set(source.transforms)) - fields - {DATE_FIELD}):
            raise IngestError(f"{path}: {where} maps `{name}`, which is not a field of the raw {source.kind} contract "
                              f"({', '.join(sorted(fields))})")
        if source.kind == "facts" and "doc_id" not in mapped:
            raise IngestError(f"{path}: {where}: facts need the document they come from: map `doc_id` to the column "
                              "naming it (its file name under ingest.docs), so the value can be found there as evidence")
        for name in sorted(required - mapped - AUTO_FIELDS[source.kind]):
            raise IngestError(f"{path}: required field `{name}` of the raw {source.kind} contract is mapped to no column "
                              f"and has no constant ({where}.columns)")
        if section.batch_by == "date" and DATE_FIELD not in mapped and "batch" not in mapped:
            raise IngestError(f"{path}: ingest.batch_by is date: map `{DATE_FIELD}` (or `batch`) to a column ({where}.columns)")
        if section.batch_by == "folder" and "batch" not in mapped:
            raise IngestError(f"{path}: ingest.batch_by is folder, which sorts documents; give the table a `batch` column "
                              f"or constant ({where}.columns or .constants)")
        present = tb.header(path, source.sheet)
        for name, column in source.columns.items():
            if column not in present:
                raise IngestError(f"{path}: column {column!r} (mapped to `{name}`, {where}.columns) is not in the file; "
                                  f"its columns: {', '.join(map(str, present)) or 'none'}")


def lang_of(text: str) -> str:
    letters = [c for c in text[:20_000] if c.isalpha()]
    cjk = sum("\u4e00" <= c <= "\u9fff" for c in letters)
    return "zh" if letters and cjk / len(letters) > 0.2 else "en"


def doc_id_of(rel: str, data: bytes) -> str:
    """Stable: the file's path under the documents folder (as a slug) and its content hash."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", rel.rsplit(".", 1)[0]).strip("-").lower()[:60] or "doc"
    return f"{slug}-{hashlib.sha256(data).hexdigest()[:10]}"


def process_document(path: str, rel: str, settings: dict) -> dict:
    """One document, in a worker process: its chunks and inline XBRL facts, or why it could not be read."""
    file = Path(path)
    limits = Limits(settings["max_document_mb"] << 20, settings["max_html_depth"], settings["table_layout"])
    try:
        doc = read_document(file, limits)
        data = file.read_bytes()
        batch = _batch_of(rel, doc.date, settings)
    except BadDocument as exc:
        return {"file": rel, "bad": {"reason": exc.reason, "detail": exc.detail}}
    except MemoryError:
        return {"file": rel, "bad": {"reason": "too_large", "detail": "reading it ran out of memory"}}
    except Exception as exc:  # noqa: BLE001 — one document never costs the others; only plain strings cross the pool
        return {"file": rel, "bad": {"reason": "corrupt", "detail": f"{type(exc).__name__}: {str(exc)[:300]}"}}
    doc_id = doc_id_of(rel, data)
    lang = settings["lang"] if settings["lang"] != "auto" else lang_of(" ".join(b.text for b in doc.blocks))
    chunks, where = chunk_blocks(doc.blocks, settings["max_chunk_chars"])
    ids = [f"{doc_id}-c{n:04d}" for n in range(len(chunks))]
    rows = [{"chunk_id": cid, "doc_id": doc_id, "page": c.page, "text": c.text, "lang": lang, "batch": batch,
             "section": c.section, "source": rel} for cid, c in zip(ids, chunks)]
    facts, bad = [], []
    if doc.xbrl is not None:
        facts, bad = ixbrl.extract_facts(doc, [ids[w] for w in where], doc_id=doc_id, batch=batch, lang=lang, file=rel)
    return {"file": rel, "doc_id": doc_id, "format": doc.format, "pages": max(b.page for b in doc.blocks),
            "chunks": rows, "facts": facts, "quarantine": bad, "ixbrl": doc.xbrl is not None, "notes": doc.notes}


def _batch_of(rel: str, date: str | None, settings: dict) -> str:
    if settings["batch_by"] == "single":
        return settings["batch"]
    if settings["batch_by"] == "folder":
        parts = Path(rel).parts
        if len(parts) < 2:
            raise BadDocument("no_batch_folder", "ingest.batch_by is folder: put the document in a sub-folder named "
                                                 "after its batch")
        return parts[0]
    if not date:
        raise BadDocument("no_date", "ingest.batch_by is date and the document carries no date (PDF CreationDate, "
                                     "DOCX created, HTML <meta name=date>)")
    return period_of(date, settings["date_format"])


def document_files(docs: Path, follow_symlinks: bool = False) -> tuple[list[Path], list[dict], Counter]:
    """Every file under `docs`, sorted: the unit of the conservation count — (files to read, files refused with a
    reason, files skipped by reason). Hidden files and folders (".git", ".DS_Store") are skipped and counted; a
    symlink that leads outside `docs` is refused (`outside_folder`) unless `follow_symlinks`; a symlinked folder is
    not walked (`symlinked_folder`, counted)."""
    root = docs.resolve()
    files, refused, skipped = [], [], Counter()
    for p in sorted(docs.rglob("*")):
        rel = p.relative_to(docs)
        if any(x.startswith(".") for x in rel.parts):
            if not p.is_dir() or p.is_symlink():
                skipped["hidden"] += 1
            continue
        if p.is_symlink() and p.is_dir():
            skipped["symlinked_folder"] += 1
            continue
        if not p.is_file():
            if p.is_symlink():
                refused.append({"file": rel.as_posix(), "reason": "broken_symlink", "detail": "the link leads nowhere"})
            continue
        if p.is_symlink() and not follow_symlinks and not p.resolve().is_relative_to(root):
            refused.append({"file": rel.as_posix(), "reason": "outside_folder",
                            "detail": f"a symlink to {p.resolve()}, outside {docs} (ingest.follow_symlinks: true reads it)"})
            continue
        files.append(p)
    return files, refused, skipped


def _in_order(files: list[Path], docs: Path, settings: dict, workers: int) -> Iterator[dict]:
    """Each document's result, in file order, at most 2 × workers in flight."""
    jobs = [(str(p), p.relative_to(docs).as_posix()) for p in files]
    if workers == 1 or len(jobs) < 2:
        for path, rel in jobs:
            yield process_document(path, rel, settings)
        return
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        window: list[Future] = []
        for path, rel in jobs:
            window.append(pool.submit(process_document, path, rel, settings))
            if len(window) >= 2 * workers:
                yield window.pop(0).result()
        for future in window:
            yield future.result()


class _Writers:
    def __init__(self, folder: Path):
        self.handles = {name: (folder / f"{name}.jsonl").open("w", encoding="utf-8") for name in TABLES}
        self.handles["quarantine"] = (folder / QUARANTINE).open("w", encoding="utf-8")
        self.counts = Counter()
        self.rules = Counter()  # quarantine rule -> rows

    def write(self, name: str, row: dict) -> None:
        self.handles[name].write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        self.counts[name] += 1
        if name == "quarantine":
            self.rules[row["rule"]] += 1

    def close(self) -> None:
        for fh in self.handles.values():
            fh.close()


def ingest(section, docs: Path, out: Path, batches: list[str]) -> dict:
    """Ingest `docs` and `section.tables` into `out` (atomically: a crash leaves the previous output)."""
    docs, out = Path(docs), Path(out)
    check_sources(section, docs)
    settings = {"batch_by": section.batch_by, "batch": section.batch, "date_format": section.date_format,
                "lang": section.lang, "max_chunk_chars": section.max_chunk_chars,
                "max_document_mb": section.max_document_mb, "max_html_depth": section.max_html_depth,
                "table_layout": section.table_layout}
    with atomic_dir(out, (docs,)) as tmp, tempfile.TemporaryDirectory(dir=tmp.parent, prefix=".ingest-") as work:
        writers = _Writers(tmp)
        try:
            report = _ingest(section, docs, settings, Path(work), writers)
        finally:
            writers.close()
        report["written"] = {name: writers.counts[name] for name in TABLES}
        report["quarantined"] = writers.counts["quarantine"]
        _check_batches(report, batches)
        _check_conservation(report)
        (tmp / REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return report


def _ingest(section, docs: Path, settings: dict, work: Path, writers: _Writers) -> dict:
    spilled, cited, table_report = _read_tables(section, settings, work, writers)
    files, refused, skipped = document_files(docs, section.follow_symlinks)
    kept: dict[str, list[tuple[str, int, str]]] = {}  # doc key -> (chunk id, page, text) of cited documents
    aliases: dict[str, str] = {}
    documents = {"seen": len(files) + len(refused) + sum(skipped.values()), "ingested": 0, "bad": list(refused),
                 "skipped": dict(skipped), "notes": [], "by_format": Counter(), "pages": 0, "ixbrl": 0}
    batches_seen: Counter = Counter()
    for result in _in_order(files, docs, settings, section.workers):
        if "bad" in result:
            documents["bad"].append({"file": result["file"], **result["bad"]})
            continue
        documents["ingested"] += 1
        documents["notes"] += [{"file": result["file"], "note": n} for n in result["notes"]]
        documents["by_format"][result["format"]] += 1
        documents["pages"] += result["pages"]
        documents["ixbrl"] += result["ixbrl"]
        for row in result["chunks"]:
            writers.write("chunks", row)
            batches_seen[row["batch"]] += 1
        for row in result["facts"]:
            writers.write("facts", row)
        for row in result["quarantine"]:
            writers.write("quarantine", row)
        keys = _doc_keys(result["file"], result["doc_id"])
        if keys & cited:
            kept[result["doc_id"]] = [(r["chunk_id"], r["page"], r["text"]) for r in result["chunks"]]
            for key in keys:
                aliases[key] = result["doc_id"]
    located = _write_table_rows(spilled, kept, aliases, writers, batches_seen)
    documents["by_format"] = dict(documents["by_format"])
    table_facts_written = located["facts"] - located["no_period"]
    return {"documents": documents, "tables": table_report, "ixbrl_facts": writers.counts["facts"] - table_facts_written,
            "table_facts_located": located, "batches": dict(batches_seen),  # rows (chunks, facts, decisions) per batch
             "quarantine_rules": dict(writers.rules)}


def _doc_keys(rel: str, doc_id: str) -> set[str]:
    path = Path(rel)
    return {rel, path.name, path.stem, doc_id}


def _read_tables(section, settings: dict, work: Path, writers: _Writers) -> tuple[dict, set, list]:
    spilled = {kind: (work / f"{kind}.jsonl").open("w+", encoding="utf-8") for kind in TABLES}
    cited: set[str] = set()
    report = []
    for i, source in enumerate(section.tables):
        path = Path(source.path)
        transforms = {f: [t.op() for t in ops] for f, ops in source.transforms.items()}
        counts = Counter()
        for row_number, row in tb.read_rows(path, source.sheet):
            counts["rows"] += 1
            try:
                fields = _contract_row(tb.map_row(row, source.columns, source.constants, transforms), source, path,
                                       row_number, settings)
            except tb.MappingError as exc:
                writers.write("quarantine", quarantine_record("ingest", str(path), row_number, exc.rule, exc.field,
                                                              {str(k): jsonable(v) for k, v in row.items()} | {"why": str(exc)}))
                counts["quarantined"] += 1
                continue
            if source.kind == "facts":
                cited.add(str(fields["doc_id"]))
            spilled[source.kind].write(json.dumps(fields, ensure_ascii=False, default=str) + "\n")
            counts["mapped"] += 1
        report.append({"table": i, "path": str(path), "kind": source.kind, **counts})
    for fh in spilled.values():
        fh.seek(0)
    return spilled, cited, report


def _contract_row(fields: dict, source, path: Path, row_number: int, settings: dict) -> dict:
    """Fill what ingest derives (ids, batch, language, page), check the types the contract needs."""
    kind = source.kind
    date = fields.pop(DATE_FIELD, None)
    for name in ("text", "situation", "action", "metric", "entity", "period", "case_type", "risk_focus", "doc_id"):
        if name in fields and fields[name] is not None and not isinstance(fields[name], str):
            fields[name] = tb._text(fields[name])
    if not fields.get("batch"):
        if settings["batch_by"] == "date":
            if date in (None, ""):
                raise tb.MappingError(DATE_FIELD, "missing_date", "batch_by is date and the row's date is empty")
            try:
                fields["batch"] = tb.period_of(date, settings["date_format"])
            except ValueError as exc:
                raise tb.MappingError(DATE_FIELD, "bad_date", str(exc)) from None
        else:
            fields["batch"] = settings["batch"]
    fields["batch"] = tb._text(fields["batch"])
    id_field = "chunk_id" if kind == "chunks" else "record_id"
    fields[id_field] = tb._text(fields.get(id_field)) or f"{re.sub(r'[^A-Za-z0-9]+', '-', path.stem).lower()}-r{row_number}"
    if fields.get("page") is None:
        fields.pop("page", None)
    else:
        try:
            page = float(fields["page"])
        except (TypeError, ValueError):
            raise tb.MappingError("page", "bad_page", f"{fields['page']!r} is not a page number") from None
        if not page.is_integer() or page < 1:
            raise tb.MappingError("page", "bad_page", f"{fields['page']!r} is not a page number (1, 2, …)")
        fields["page"] = int(page)
    if kind == "decisions" and not isinstance(fields.get("causes"), dict):
        raise tb.MappingError("causes", "causes_not_mapping", "a decision's causes must be a mapping {cause: weight} "
                              "(a JSON object; add the transform `from_json: true`)")
    if not fields.get("lang"):
        text = " ".join(str(fields.get(k) or "") for k in ("text", "situation", "metric", "entity"))
        fields["lang"] = settings["lang"] if settings["lang"] != "auto" else lang_of(text)
    fields["_source"] = f"{path}:{row_number}"
    return fields


def _write_table_rows(spilled: dict, kept: dict, aliases: dict, writers: _Writers, batches_seen: Counter) -> dict:
    located = {"facts": 0, "found": 0, "period_from_header": 0, "no_period": 0, "no_such_document": 0}
    for kind in TABLES:
        with spilled[kind] as fh:
            for line in fh:
                row = json.loads(line)
                source = row.pop("_source", None) or ":"
                batches_seen[row["batch"]] += 1
                if kind == "facts" and str(row["doc_id"]) not in aliases:
                    _quarantine_fact(writers, source, "no_such_document", "doc_id", row,
                                     f"its doc_id {row['doc_id']!r} names no document read from the documents folder "
                                     "(its file name, path or stem); see ingest_report.json for the documents that "
                                     "could not be read")
                    located["no_such_document"] += 1
                    continue
                if kind == "facts":
                    row = _locate(row, kept, aliases)
                    located["facts"] += 1
                    located["found"] += row["chunk_id"] is not None
                    located["period_from_header"] += row.pop("_period_from_header", False)
                    if not row.get("period"):
                        _quarantine_fact(writers, source, "no_period", "period", row,
                                         "no period: none is mapped (ingest.tables[].columns.period) and the column "
                                         "header of its value in the evidence row names no year")
                        located["no_period"] += 1
                        continue
                row.setdefault("page", 1)
                writers.write(kind, row)
    return located


def _quarantine_fact(writers: _Writers, source: str, rule: str, field: str, row: dict, why: str) -> None:
    """A mapped fact ingest cannot write, quarantined with its table's file and row (`source` is `file:row`)."""
    file, _, number = source.rpartition(":")
    writers.write("quarantine", quarantine_record("ingest", file, int(number) if number.isdigit() else None, rule, field,
                                                  row | {"why": why}))


def _locate(row: dict, kept: dict, aliases: dict) -> dict:
    """A table fact's evidence: the first line of its cited document (on its page, when mapped) that writes the value
    — preferring a line that also names the metric. Not found: the fact goes on without evidence and assetize
    marks it unverifiable (to the repair queue), never guessed."""
    doc_id = aliases.get(str(row["doc_id"]))
    row.setdefault("chunk_id", None)
    row.setdefault("evidence", None)
    if doc_id is None:
        return row
    row["doc_id"] = doc_id
    quantity = parse_quantity(row.get("value"), row.get("unit") or "")
    if quantity is None:
        return row
    best = None
    for chunk_id, page, text in kept.get(doc_id, []):
        if row.get("page") not in (None, page):
            continue
        for line in text.split("\n"):
            if value_in_text(quantity.value, line):
                named = terms_in_text(row.get("metric"), line)
                if best is None or named and not best[3]:
                    best = (chunk_id, page, line, named)
        if best is not None and best[3]:
            break
    if best is not None:
        row["chunk_id"], row["page"], row["evidence"] = best[0], best[1], best[2]
        if not row.get("period"):
            row["period"] = period_of_value(best[2], quantity.value)
            row["_period_from_header"] = row["period"] is not None
    return row


def _check_batches(report: dict, batches: list[str]) -> None:
    unknown = sorted(set(report["batches"]) - set(batches))
    if unknown:
        raise IngestError(f"batch(es) {', '.join(unknown)} found in the sources are not in data.batches "
                          f"({', '.join(batches)}): add them to conf/config.yaml's data.batches")
    report["empty_batches"] = sorted(set(batches) - set(report["batches"]))


def _check_conservation(report: dict) -> None:
    docs = report["documents"]
    if docs["seen"] != docs["ingested"] + len(docs["bad"]) + sum(docs["skipped"].values()):
        raise RuntimeError(f"ingest lost documents: {docs['seen']} seen, {docs['ingested']} ingested, "
                           f"{len(docs['bad'])} reported, {sum(docs['skipped'].values())} skipped")
    for t in report["tables"]:
        if t.get("rows", 0) != t.get("mapped", 0) + t.get("quarantined", 0):
            raise RuntimeError(f"ingest lost rows of {t['path']}: {t}")

