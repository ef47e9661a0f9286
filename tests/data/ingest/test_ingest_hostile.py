"""Hostile and careless documents: one document never costs the others, nothing leaves the documents folder
unless configured, and every document seen is counted as ingested, bad (with its reason) or skipped."""

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from tests.helpers.documents import write_docx

from clap.config import Ingest
from clap.data.ingest.blocks import BadDocument, Limits, read_document
from clap.data.ingest.pipeline import ingest
from clap.io import read_json, read_jsonl


def section(**over) -> Ingest:
    return Ingest.model_validate({"docs": "docs", "batch_by": "single", "batch": "b1", "date_format": "year",
                                  "lang": "auto", "max_chunk_chars": 600, "workers": 1, "max_document_mb": 256,
                                  "max_html_depth": 512, "follow_symlinks": False,
                                  "table_layout": "row"} | over)


def docx_with(path: Path, document_xml: bytes) -> Path:
    """A copy of a real DOCX whose word/document.xml is replaced."""
    good = write_docx(path.parent / f".{path.stem}-source.docx")
    buf = io.BytesIO()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item, document_xml if item.filename == "word/document.xml" else src.read(item.filename))
    good.unlink()
    path.write_bytes(buf.getvalue())
    return path


def test_a_zip_bomb_and_malformed_xml_are_that_documents_reasons_and_the_others_go_in(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    write_docx(docs / "good.docx")
    docx_with(docs / "bomb.docx", b"<w:document>" + b" " * (3 << 20) + b"</w:document>")  # unpacks to 3 MB
    docx_with(docs / "broken.docx", b"<w:document><w:body><w:p>unclosed")
    (docs / "fine.txt").write_text("Revenue was 12 USD.\n")
    assert (docs / "bomb.docx").stat().st_size < 100_000
    report = ingest(section(max_document_mb=1, workers=2), docs, tmp_path / "raw", ["b1"])
    bad = {b["file"]: b["reason"] for b in report["documents"]["bad"]}
    assert bad == {"bomb.docx": "too_large", "broken.docx": "corrupt"}
    assert report["documents"]["ingested"] == 2 and report["documents"]["seen"] == 4
    saved = read_json(tmp_path / "raw" / "ingest_report.json")["documents"]["bad"]
    assert any("unpacks to 3 MB" in b["detail"] for b in saved)


def test_deep_html_is_read_whole_with_its_bound_reported(tmp_path):
    depth = 1500  # past libxml2's default 256 (where text was lost without a word), under its hard bound 2048
    (tmp_path / "deep.html").write_text("<html><body>" + "<div>" * depth + "<p>Revenue was 12 USD at the bottom.</p>"
                                        + "</div>" * depth + "<p>After.</p></body></html>", encoding="utf-8")
    doc = read_document(tmp_path / "deep.html", Limits(max_html_depth=512))
    texts = [b.text for b in doc.blocks]
    assert "Revenue was 12 USD at the bottom." in texts and "After." in texts
    assert doc.notes and "max_html_depth 512" in doc.notes[0]
    (tmp_path / "deeper.html").write_text("<html><body>" + "<div>" * 3000 + "<p>Lost.</p>" + "</div>" * 3000
                                          + "</body></html>", encoding="utf-8")
    with pytest.raises(BadDocument, match="too_deep: the HTML parser's bound was hit"):
        read_document(tmp_path / "deeper.html")


def test_xhtml_that_is_not_well_formed_falls_back_to_the_lenient_parser(tmp_path):
    (tmp_path / "r.xhtml").write_text('<?xml version="1.0" encoding="utf-8"?>\n<html><body><p>Revenue&nbsp;was 12 USD.'
                                      "<br></p></body></html>", encoding="utf-8")
    assert [b.text for b in read_document(tmp_path / "r.xhtml").blocks] == ["Revenue was 12 USD."]


def test_symlinks_hidden_files_and_an_unknown_document_are_counted_with_the_command(tmp_path):
    """`clap ingest` as a user runs it: a symlink to a file outside the project is listed, not read; a symlinked
    folder and hidden files are counted as skipped; a fact naming no document is quarantined with its row."""
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    root = tmp_path / "p"
    assert subprocess.run(["clap", "init", str(root)], capture_output=True, env=env).returncode == 0
    docs = root / "sources" / "docs"
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("The API key is 12345 and must never be trained on.\n")
    (docs / "r.txt").write_text("Revenue was 12 USD in FY2024.\n")
    (docs / "leak.txt").symlink_to(secret)
    (docs / "linked").symlink_to(secret.parent, target_is_directory=True)
    (docs / ".DS_Store").write_bytes(b"\0\1")
    pd.DataFrame([["Acme", "Revenue", "2024", 12, "r.txt"], ["Acme", "Revenue", "2024", 12, "nope.txt"]],
                 columns=["Company", "KPI", "FY", "Amount", "Source"]).to_csv(root / "sources/tables/k.csv", index=False)
    conf = root / "conf" / "ingest" / "default.yaml"
    conf.write_text(conf.read_text().replace("tables: []", "tables:\n  - {path: sources/tables/k.csv, kind: facts, "
                    "columns: {entity: Company, metric: KPI, period: FY, value: Amount, doc_id: Source}}"))
    subprocess.run(["clap", "params"], cwd=root, env=env, check=True, capture_output=True)
    r = subprocess.run(["clap", "ingest"], cwd=root, env=env, capture_output=True, text=True)
    out = " ".join(r.stdout.split())
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    # .gitkeep (made by clap init) and .DS_Store are the hidden ones
    assert "documents 5: ingested 1" in out and "not readable 1, skipped 3 (hidden=2, symlinked_folder=1)" in out
    assert "leak.txt: outside_folder" in out
    chunks = " ".join(c["text"] for c in read_jsonl(root / "data/raw/chunks.jsonl"))
    assert "API key" not in chunks
    quarantined = read_jsonl(root / "data/raw/ingest_quarantine.jsonl")
    assert [(q["rule"], q["row"]) for q in quarantined] == [("no_such_document", 3)]


def test_an_xlsx_formula_without_a_saved_value_is_quarantined_not_read_as_empty(tmp_path, monkeypatch):
    from openpyxl import Workbook

    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "r.txt").write_text("Revenue was 12 USD in FY2024.\n")
    book = Workbook()
    ws = book.active
    ws.append(["Company", "KPI", "FY", "Amount", "Source"])
    ws.append(["Acme", "Revenue", "2024", 12, "r.txt"])
    ws.append(["Acme", "Revenue", "2024", "=D2*2", "r.txt"])  # openpyxl saves the formula, no computed value
    book.save(tmp_path / "k.xlsx")
    tables = [{"path": "k.xlsx", "kind": "facts", "columns": {"entity": "Company", "metric": "KPI", "period": "FY",
                                                               "value": "Amount", "doc_id": "Source"}}]
    report = ingest(section(tables=tables), docs, tmp_path / "raw", ["b1"])
    assert report["tables"][0] == {"table": 0, "path": "k.xlsx", "kind": "facts", "rows": 2, "mapped": 1,
                                        "quarantined": 1}
    bad = read_jsonl(tmp_path / "raw" / "ingest_quarantine.jsonl")
    assert [(q["rule"], q["row"], q["column"]) for q in bad] == [("formula_without_value", 3, "value")]
    assert "=D2*2" in bad[0]["original"]["why"]
