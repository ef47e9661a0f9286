"""ingest: a project's own documents and mapped tables → the raw contract (`data/raw`).

    clap ingest [--docs sources/docs] [--out data/raw]      (DVC stage `ingest` of a project made by `clap init`)

Documents (PDF, HTML/XHTML with inline XBRL, DOCX, Markdown, text) become chunks with their page and section,
and inline XBRL's tagged numbers become facts; tables with the user's column names become facts, decisions or
chunks through the mapping in `conf/ingest/` (clap.data.ingest). The report (`data/raw/ingest_report.json`) lists
every document that could not be read and why; rows that could not be mapped are in `ingest_quarantine.jsonl`.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.config import ConfigError, Ingest, Params
from clap.data.ingest.pipeline import ingest
from clap.stages.spec import StageSpec


def run(section: Ingest, docs: Path, out: Path, batches: list[str]) -> dict:
    """Ingest `docs` and the section's tables into `out`; every batch found must be one of `batches`."""
    return ingest(section, docs, out, batches)


def main(params: Params, docs: Path | None = None, out: Path = paths.RAW) -> list[str]:
    """Your documents and mapped tables into the raw contract: chunks, facts (inline XBRL, tables), decisions."""
    if params.ingest is None:
        raise ConfigError("params.yaml: no ingest section; a project made by `clap init` has conf/ingest/default.yaml")
    report = run(params.ingest, Path(docs or params.ingest.docs), out, list(params.data.batches))
    return said(report, out)


def said(report: dict, out: Path) -> list[str]:
    """What `clap ingest` prints of its report: documents by format and what was not read, each table's rows,
    what was written and quarantined, and a batch of `data.batches` with no rows."""
    d, w = report["documents"], report["written"]
    skipped = ", ".join(f"{k}={v}" for k, v in d["skipped"].items())
    lines = [f"documents {d['seen']}: ingested {d['ingested']} ({', '.join(f'{v} {k}' for k, v in d['by_format'].items())}"
             f"; {d['pages']} pages, {d['ixbrl']} inline XBRL), not readable {len(d['bad'])}, skipped "
             f"{sum(d['skipped'].values())}{f' ({skipped})' if skipped else ''}"]
    lines += [f"  {bad['file']}: {bad['reason']} ({bad['detail']})" for bad in d["bad"]]
    lines += [f"  {note['file']}: {note['note']}" for note in d["notes"]]
    lines += [f"table {t['path']} → {t['kind']}: rows {t.get('rows', 0)}, mapped {t.get('mapped', 0)}, "
              f"quarantined {t.get('quarantined', 0)}" for t in report["tables"]]
    lines.append(f"→ {out}: {w['chunks']} chunks, {w['facts']} facts ({report['ixbrl_facts']} inline XBRL), "
                 f"{w['decisions']} decisions; {report['quarantined']} quarantined "
                 f"({', '.join(f'{k}={v}' for k, v in report['quarantine_rules'].items()) or 'none'})")
    lines += [f"warning: batch {batch} of data.batches has no rows" for batch in report["empty_batches"]]
    return lines


STAGE = StageSpec(name="ingest", group="data", main=main, helps={"docs": "folder of documents (default: ingest.docs in params.yaml)"})
