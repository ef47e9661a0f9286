"""ingest: a project's own documents and mapped tables → the raw contract (`data/raw`).

    clap ingest [--docs sources/docs] [--out data/raw]      (DVC stage `ingest` of a project made by `clap init`)

Documents (PDF, HTML/XHTML with inline XBRL, DOCX, Markdown, text) become chunks with their page and section,
and inline XBRL's tagged numbers become facts; tables with the user's column names become facts, decisions or
chunks through the mapping in `conf/ingest/` (clap.data.ingest). The report (`data/raw/ingest_report.json`) lists
every document that could not be read and why; rows that could not be mapped are in `ingest_quarantine.jsonl`.
"""

from __future__ import annotations

from pathlib import Path

from clap.config import Ingest
from clap.data.ingest.pipeline import ingest


def run(section: Ingest, docs: Path, out: Path, batches: list[str]) -> dict:
    """Ingest `docs` and the section's tables into `out`; every batch found must be one of `batches`."""
    return ingest(section, docs, out, batches)
