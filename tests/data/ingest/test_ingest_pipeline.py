"""`clap ingest` over a folder: nothing lost (documents in = ingested + reported; rows in = written + quarantined),
batches, the table facts' evidence found in their documents, the same output with one worker or two, and the
user's mistakes met the way the user meets them: the command, one line, exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from tests.helpers.documents import ixbrl_document, write_docx, write_encrypted_pdf, write_image_only_pdf, write_pdf

from clap.config import Ingest
from clap.data.ingest.pipeline import IngestError, ingest
from clap.domain.contracts import RAW_SCHEMAS, split_valid


def section(**over) -> Ingest:
    return Ingest.model_validate({"docs": "docs", "batch_by": "single", "batch": "b1", "date_format": "year",
                                  "lang": "auto", "max_chunk_chars": 600, "workers": 1,
                                  "max_document_mb": 256, "max_html_depth": 512, "follow_symlinks": False,
                                  "table_layout": "row"} | over)


def mixed_folder(root: Path) -> Path:
    docs = root / "docs"
    write_pdf(docs / "report.pdf", [["Quality report", "The defect rate was low this year.",
                                     "Defect rate (%) 1.8 2.4", "Reworked pieces (pcs) 3,120 870"], ["Outlook", "Steady."]])
    (docs / "filing.xhtml").write_text(ixbrl_document("1.1", True, broken=True), encoding="utf-8")
    write_docx(docs / "memo.docx")
    (docs / "notes.md").write_text("# Notes\n\n质量损失为 120 万元。这是中文的说明文字，用来检查语言。\n", encoding="utf-8")
    (docs / "readme.txt").write_text("Plain words.\n", encoding="utf-8")
    write_encrypted_pdf(docs / "locked.pdf")
    write_image_only_pdf(docs / "scan.pdf")
    (docs / "legacy.txt").write_bytes("Caf\xe9".encode("latin-1"))
    (docs / "slides.pptx").write_bytes(b"PK")
    (docs / ".hidden.txt").write_text("ignored: hidden files are not documents")
    return docs


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_nothing_is_lost_and_the_output_meets_the_raw_contract(tmp_path):
    docs = mixed_folder(tmp_path)
    report = ingest(section(), docs, tmp_path / "raw", ["b1"])
    d = report["documents"]
    assert d["seen"] == 10 and d["ingested"] == 5 and d["skipped"] == {"hidden": 1}  # .hidden.txt: counted, not read
    assert {b["file"]: b["reason"] for b in d["bad"]} == {"locked.pdf": "encrypted", "scan.pdf": "no_text_layer",
                                                          "legacy.txt": "unknown_encoding", "slides.pptx": "unsupported_format"}
    assert d["by_format"] == {"pdf": 1, "html": 1, "docx": 1, "markdown": 1, "text": 1} and d["ixbrl"] == 1
    raw = tmp_path / "raw"
    assert json.loads((raw / "ingest_report.json").read_text()) == report
    quarantined = read_jsonl(raw / "ingest_quarantine.jsonl")
    assert len(quarantined) == report["quarantined"] == 4 and report["ixbrl_facts"] == 7
    for name in ("chunks", "facts", "decisions"):
        frame = pd.DataFrame(read_jsonl(raw / f"{name}.jsonl")) if name != "decisions" else pd.DataFrame()
        if len(frame):
            _, bad = split_valid(frame, RAW_SCHEMAS[name], "test", name, {"chunks": "chunk_id"}.get(name, "record_id"))
            assert bad == [], bad[:2]
    chunks = read_jsonl(raw / "chunks.jsonl")
    assert {c["lang"] for c in chunks if c["source"] == "notes.md"} == {"zh"}
    assert {c["lang"] for c in chunks if c["source"] != "notes.md"} == {"en"}
    assert any(c["text"].endswith("Defect rate (%) | 1.8 | 2.4\nReworked pieces (pcs) | 3,120 | 870") for c in chunks)


def test_one_worker_or_two_write_the_same_files(tmp_path):
    docs = mixed_folder(tmp_path)
    ingest(section(workers=1), docs, tmp_path / "one", ["b1"])
    ingest(section(workers=2), docs, tmp_path / "two", ["b1"])
    for name in ("chunks.jsonl", "facts.jsonl", "ingest_quarantine.jsonl", "ingest_report.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_doc_ids_are_stable_and_change_with_the_content(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Version one.")
    first = read_jsonl(Path(ingest(section(), docs, tmp_path / "r1", ["b1"]) and tmp_path / "r1" / "chunks.jsonl"))
    again = read_jsonl(Path(ingest(section(), docs, tmp_path / "r2", ["b1"]) and tmp_path / "r2" / "chunks.jsonl"))
    (docs / "a.txt").write_text("Version two.")
    changed = read_jsonl(Path(ingest(section(), docs, tmp_path / "r3", ["b1"]) and tmp_path / "r3" / "chunks.jsonl"))
    assert first[0]["doc_id"] == again[0]["doc_id"] != changed[0]["doc_id"]
    assert first[0]["doc_id"].startswith("a-")


def test_batches_from_folders_and_an_unlisted_batch(tmp_path):
    docs = tmp_path / "docs"
    for batch in ("2023", "2024"):
        (docs / batch).mkdir(parents=True)
        (docs / batch / "r.txt").write_text(f"Report {batch}.")
    (docs / "loose.txt").write_text("Not in a batch folder.")
    report = ingest(section(batch_by="folder"), docs, tmp_path / "raw", ["2023", "2024", "2025"])
    assert report["batches"] == {"2023": 1, "2024": 1} and report["empty_batches"] == ["2025"]
    assert [b["reason"] for b in report["documents"]["bad"]] == ["no_batch_folder"]
    before = (tmp_path / "raw" / "chunks.jsonl").read_bytes()
    with pytest.raises(IngestError, match=r"batch\(es\) 2024 found in the sources are not in data.batches \(2023\)"):
        ingest(section(batch_by="folder"), docs, tmp_path / "raw", ["2023"])
    assert (tmp_path / "raw" / "chunks.jsonl").read_bytes() == before  # a failed run leaves the last output


def test_batches_from_the_documents_date(tmp_path):
    docs = tmp_path / "docs"
    write_docx(docs / "memo.docx")  # created 2024-11-05
    (docs / "undated.txt").write_text("No date here.")
    report = ingest(section(batch_by="date", date_format="quarter"), docs, tmp_path / "raw", ["2024Q4"])
    assert report["batches"] == {"2024Q4": 2} and [b["reason"] for b in report["documents"]["bad"]] == ["no_date"]


def test_table_facts_find_their_evidence_in_the_cited_document(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = mixed_folder(tmp_path)
    table = tmp_path / "kpis.csv"
    pd.DataFrame([["Acme", "Defect rate", "FY2024", 1.8, "%", "report.pdf", None],
                  ["Acme", "Reworked pieces", "FY2024", "3,120", "pcs", "report", 1],
                  ["Acme", "Reworked pieces", "FY2024", "3,120", "pcs", "report.pdf", 2],   # not on page 2
                  ["Acme", "Defect rate", "FY2024", 9.9, "%", "report.pdf", None],         # written nowhere
                  ["Acme", "Defect rate", "FY2024", 1.8, "%", "missing.pdf", None],        # no such document
                  ["Acme", "Defect rate", "FY2024", 1.8, "%", "report.pdf", "two"]],       # not a page number
                 columns=["Co", "KPI", "Year", "Val", "Unit", "Doc", "Pg"]).to_csv(table, index=False)
    tables = [{"path": "kpis.csv", "kind": "facts", "columns": {"entity": "Co", "metric": "KPI", "period": "Year",
                                                                 "value": "Val", "unit": "Unit", "doc_id": "Doc", "page": "Pg"}}]
    report = ingest(section(tables=tables), docs, tmp_path / "raw", ["b1"])
    assert report["tables"] == [{"table": 0, "path": "kpis.csv", "kind": "facts", "rows": 6, "mapped": 5, "quarantined": 1}]
    assert report["table_facts_located"] == {"facts": 4, "found": 2, "period_from_header": 0, "no_period": 0,
                                             "no_such_document": 1}
    facts = [f for f in read_jsonl(tmp_path / "raw" / "facts.jsonl") if f["record_id"].startswith("kpis-")]
    found = {f["record_id"]: (f["evidence"], f["page"]) for f in facts}
    assert found["kpis-r2"] == ("Defect rate (%) | 1.8 | 2.4", 1)
    assert found["kpis-r3"] == ("Reworked pieces (pcs) | 3,120 | 870", 1)
    assert found["kpis-r4"] == (None, 2) and found["kpis-r5"] == (None, 1)
    assert "kpis-r6" not in found  # missing.pdf names no document: quarantined at ingest, with its row
    bad = [q for q in read_jsonl(tmp_path / "raw" / "ingest_quarantine.jsonl") if q["file"] == "kpis.csv"]
    assert sorted((q["row"], q["rule"], q["column"]) for q in bad) == [(6, "no_such_document", "doc_id"),
                                                                       (7, "bad_page", "page")]


def test_decisions_need_a_mapping_of_causes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    pd.DataFrame([["quality_loss", "Line 2 drifted.", '{"process_drift_sigma": 1}', "Recalibrate", "customer"],
                  ["quality_loss", "Line 3 drifted.", "drift", "Recalibrate", "customer"]],
                 columns=["k", "s", "c", "a", "r"]).to_csv(tmp_path / "log.csv", index=False)
    cols = {"case_type": "k", "situation": "s", "causes": "c", "action": "a", "risk_focus": "r"}
    report = ingest(section(tables=[{"path": "log.csv", "kind": "decisions", "columns": cols}]), docs, tmp_path / "raw", ["b1"])
    assert report["written"]["decisions"] == 0 and report["quarantine_rules"] == {"causes_not_mapping": 2}
    report = ingest(section(tables=[{"path": "log.csv", "kind": "decisions", "columns": cols,
                                     "transforms": {"causes": [{"from_json": True}]}}]), docs, tmp_path / "raw2", ["b1"])
    assert report["written"]["decisions"] == 1 and report["quarantine_rules"] == {"transform_failed": 1}
    row = read_jsonl(tmp_path / "raw2" / "decisions.jsonl")[0]
    assert row["causes"] == {"process_drift_sigma": 1} and row["record_id"] == "log-r2" and row["lang"] == "en"


def test_assetize_takes_what_ingest_writes(tmp_path, params):
    from clap.stages import assetize

    ingest(section(), mixed_folder(tmp_path), tmp_path / "raw", ["b1"])
    report = assetize.run(params.assetize, tmp_path / "raw", tmp_path / "assets")
    assert report["inputs"]["chunks"]["quarantined"] == 0 and report["inputs"]["facts"]["quarantined"] == 0
    assert report["verifiable_facts"] == 4  # the balance sheet's rows; the paragraph facts' labels are not in them


# ---------------------------------------------------------------- the user's mistakes, as the user meets them
@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("proj") / "p"
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(["clap", "init", str(root)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    (root / "sources" / "docs" / "r.txt").write_text("Revenue was 12 USD.")
    pd.DataFrame([["Acme", "Revenue", "2024", 12, "r.txt"]],
                 columns=["Company", "KPI", "FY", "Amount", "Source"]).to_csv(root / "sources/tables/k.csv", index=False)
    return root, env


def clap_ingest_with(project, tables_yaml: str):
    root, env = project
    conf = root / "conf" / "ingest" / "default.yaml"
    text = conf.read_text()
    conf.write_text(text[: text.rindex("tables:")] + tables_yaml)
    subprocess.run(["clap", "params"], cwd=root, env=env, check=True, capture_output=True)
    return subprocess.run(["clap", "ingest"], cwd=root, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("tables, message", [
    ("tables:\n  - {path: sources/tables/k.csv, kind: facts, columns: {entity: Company, metric: KPI, period: FY, "
     "value: Amont, doc_id: Source}}\n",
     "sources/tables/k.csv: column 'Amont' (mapped to `value`, ingest.tables[0].columns) is not in the file; its "
     "columns: Company, KPI, FY, Amount, Source"),
    ("tables:\n  - {path: sources/tables/k.csv, kind: facts, columns: {entity: Company, period: FY, value: Amount, "
     "doc_id: Source}}\n",
     "sources/tables/k.csv: required field `metric` of the raw facts contract is mapped to no column and has no "
     "constant (ingest.tables[0].columns)"),
    ("tables:\n  - {path: sources/tables/k.csv, kind: facts, columns: {entity: Company, metric: KPI, period: FY, "
     "value: Amount, doc_id: Source, vaule: Amount}}\n",
     "sources/tables/k.csv: ingest.tables[0] maps `vaule`, which is not a field of the raw facts contract"),
    ("tables:\n  - {path: sources/tables/k.csv, kind: facts, columns: {entity: Company, metric: KPI, period: FY, "
     "value: Amount}}\n",
     "sources/tables/k.csv: ingest.tables[0]: facts need the document they come from: map `doc_id`"),
    ("tables:\n  - {path: sources/tables/nope.csv, kind: facts, columns: {entity: Company, metric: KPI, period: FY, "
     "value: Amount, doc_id: Source}}\n",
     "sources/tables/nope.csv: no such file (ingest.tables)"),
])
def test_a_mapping_mistake_is_one_line_naming_the_file_column_and_field(project, tables, message):
    r = clap_ingest_with(project, tables)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert message in " ".join((r.stdout + r.stderr).split()), r.stdout + r.stderr


def test_a_config_mistake_is_refused_before_any_work(project):
    root, env = project
    conf = root / "conf" / "ingest" / "default.yaml"
    conf.write_text(conf.read_text().replace("batch_by: single", "batch_by: weekly"))
    r = subprocess.run(["clap", "params"], cwd=root, env=env, capture_output=True, text=True)
    conf.write_text(conf.read_text().replace("batch_by: weekly", "batch_by: single"))
    assert r.returncode == 2 and "ingest.batch_by" in r.stdout + r.stderr and "Traceback" not in r.stderr


def test_a_good_mapping_ingests(project):
    r = clap_ingest_with(project, "tables:\n  - {path: sources/tables/k.csv, kind: facts, columns: {entity: Company, "
                                  "metric: KPI, period: FY, value: Amount, doc_id: Source}, constants: {unit: USD}}\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "→ data/raw: 1 chunks, 1 facts (0 inline XBRL), 0 decisions; 0 quarantined" in r.stdout
    fact = read_jsonl(project[0] / "data/raw/facts.jsonl")[0]
    assert fact["evidence"] == "Revenue was 12 USD." and fact["unit"] == "USD"


def test_folder_batches_need_a_tables_batch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    pd.DataFrame([["x", "1"]], columns=["t", "d"]).to_csv(tmp_path / "c.csv", index=False)
    tables = [{"path": "c.csv", "kind": "chunks", "columns": {"text": "t", "doc_id": "d"}}]
    with pytest.raises(IngestError, match="batch_by is folder, which sorts documents; give the table a `batch`"):
        ingest(section(batch_by="folder", tables=tables), tmp_path / "docs", tmp_path / "raw", ["b1"])
    report = ingest(section(batch_by="folder", tables=[tables[0] | {"constants": {"batch": "b1"}}]), tmp_path / "docs",
                    tmp_path / "raw", ["b1"])
    assert report["written"]["chunks"] == 1 and report["batches"] == {"b1": 1}


def test_a_fact_without_a_mapped_period_takes_its_columns_header_or_is_quarantined(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "p.html").write_text("<html><body><table><tr><td></td><td>FY19</td><td>FY18</td></tr>"
                                 "<tr><td>Cost of sales</td><td>$624</td><td>$640</td></tr></table>"
                                 "<p>Staff numbers rose to 1,250 people.</p></body></html>", encoding="utf-8")
    pd.DataFrame([["Acme", "Cost of sales", "640", "thousand USD", "p.html"],
                  ["Acme", "Staff", "1,250", "", "p.html"]],  # in prose: no column header gives a period
                 columns=["Co", "Line item", "Amount", "Unit", "Page"]).to_csv(tmp_path / "f.csv", index=False)
    tables = [{"path": "f.csv", "kind": "facts", "columns": {"entity": "Co", "metric": "Line item", "value": "Amount",
                                                              "unit": "Unit", "doc_id": "Page"}}]
    report = ingest(section(tables=tables), docs, tmp_path / "raw", ["b1"])
    facts = read_jsonl(tmp_path / "raw" / "facts.jsonl")
    assert [(f["period"], f["evidence"]) for f in facts] == [("2018", "Cost of sales | FY19: $624 | FY18: $640")]
    bad = read_jsonl(tmp_path / "raw" / "ingest_quarantine.jsonl")
    assert [(q["rule"], q["file"], q["row"]) for q in bad] == [("no_period", "f.csv", 3)]
    assert report["table_facts_located"] == {"facts": 2, "found": 2, "period_from_header": 1, "no_period": 1,
                                             "no_such_document": 0}
