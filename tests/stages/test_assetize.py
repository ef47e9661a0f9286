import json

import pandas as pd
import pytest

from clap.demo import corpus as demo_data
from clap.domain.quantities import normalize_period
from clap.io import InputFileError
from clap.stages import assetize


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    demo_data.write(raw, seed=3, scale=0.3)
    return raw


def _facts(raw):
    return [json.loads(line) for line in (raw / "facts.jsonl").read_text().splitlines()]


def _write(folder, name, rows_or_lines):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.jsonl", "wb") as fh:
        for r in rows_or_lines:
            fh.write(r if isinstance(r, bytes) else (json.dumps(r, ensure_ascii=False) + "\n").encode())


def _copy(corpus, dst):
    for name in ("chunks", "decisions"):
        (dst / f"{name}.jsonl").parent.mkdir(parents=True, exist_ok=True)
        (dst / f"{name}.jsonl").write_bytes((corpus / f"{name}.jsonl").read_bytes())


def test_demo_corpus_assetizes_and_conserves_rows(params, corpus, tmp_path):
    report = assetize.run(params.assetize, corpus, tmp_path / "assets")
    for name, e in report["inputs"].items():
        assert e["rows_in"] == e["kept"] + e["quarantined"], name
    manifest = json.loads((corpus / "manifest.json").read_text())["injected"]
    assert report["noise"]["value_bearing_label"] >= manifest["value_bearing_label"] * 0.9
    assert report["noise"]["wrong_evidence_chunk_fixed"] > 0 and report["noise"]["missing_evidence_fixed"] > 0
    facts = pd.read_parquet(tmp_path / "assets" / "facts.parquet")
    assert facts["value"].dtype == "float64" and facts["content_hash"].str.len().eq(64).all()
    assert not facts["metric"].str.contains(r"^\d", regex=True).any()
    assert set(facts["unit"]) <= {"万元", "%", "吨", "件", "天", "亿元", "百万元", "元", "千元"}
    q = [json.loads(line) for line in (tmp_path / "assets" / "quarantine.jsonl").read_text().splitlines()]
    assert len(q) == sum(e["quarantined"] for e in report["inputs"].values())
    assert all({"stage", "file", "row", "rule", "column", "original"} <= set(x) for x in q)


def test_every_kind_of_bad_row_is_kept_or_quarantined(params, corpus, tmp_path):
    raw = tmp_path / "raw"
    _copy(corpus, raw)
    good = _facts(corpus)[:5]
    missing_col = {k: v for k, v in good[1].items() if k != "entity"} | {"record_id": "m1"}
    wrong_type = good[2] | {"record_id": "t1", "page": "three"}
    empty_text = good[3] | {"record_id": "e1", "metric": "  "}
    extra = good[4] | {"record_id": "x1", "surprise": 1}
    lines = [good[0], good[0], missing_col, wrong_type, empty_text, extra,
             b'{"record_id": "broken", \n', b'{"record_id": "\xff\xfe"}\n']
    _write(raw, "facts", lines)
    report = assetize.run(params.assetize, raw, tmp_path / "out")
    e = report["inputs"]["facts"]
    assert e["rows_in"] == 8 and e["kept"] + e["quarantined"] == 8
    q = {(x["rule"], x["row"]) for x in map(json.loads, (tmp_path / "out/quarantine.jsonl").read_text().splitlines())
         if x["file"].endswith("facts.jsonl")}
    rules = {r for r, _ in q}
    assert {"duplicate_id", "malformed_json", "non_utf8", "type:int"} <= rules
    assert ("malformed_json", 7) in q and ("non_utf8", 8) in q and ("duplicate_id", 2) in q
    assert any(r.startswith(("not_nullable", "non_empty", "str_length")) for r in rules)
    assert e["kept"] == 2 and e["extra_columns"] == ["surprise"]


def test_unreadable_file_fails_with_name_and_writes_nothing(params, corpus, tmp_path):
    raw = tmp_path / "raw"
    _copy(corpus, raw)
    (raw / "facts.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputFileError, match="facts.parquet"):
        assetize.run(params.assetize, raw, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_column_missing_everywhere_names_file_and_column(params, corpus, tmp_path):
    raw = tmp_path / "raw"
    _copy(corpus, raw)
    _write(raw, "facts", [{k: v for k, v in f.items() if k != "period"} for f in _facts(corpus)[:3]])
    with pytest.raises(InputFileError, match=r"facts.jsonl.*period"):
        assetize.run(params.assetize, raw, tmp_path / "out")


def test_csv_and_parquet_inputs_give_the_same_assets(params, corpus, tmp_path):
    a = assetize.run(params.assetize, corpus, tmp_path / "a")
    raw = tmp_path / "raw"
    _copy(corpus, raw)
    facts = pd.DataFrame(_facts(corpus))
    facts["value"] = facts["value"].astype(str)
    facts.to_csv(raw / "facts.csv", index=False)
    (raw / "chunks.jsonl").unlink()
    pd.read_json(corpus / "chunks.jsonl", lines=True).to_parquet(raw / "chunks.parquet")
    b = assetize.run(params.assetize, raw, tmp_path / "b")
    assert a["inputs"]["facts"]["rows_in"] == b["inputs"]["facts"]["rows_in"]
    assert abs(a["verifiable_facts"] - b["verifiable_facts"]) <= a["noise"]["numeric_value"]


def test_period_normalisation():
    assert normalize_period("FY2023") == "2023"
    assert normalize_period("２０２３年") == "2023"
    assert normalize_period("2023年第一季度") == "2023Q1"
    assert normalize_period("Q3 2024") == "2024Q3"


def test_inlined_row_hashes_are_io_content_hash(params, corpus, tmp_path):
    from clap.domain import quantities as nz
    from clap.io import content_hash

    assetize.run(params.assetize, corpus, tmp_path / "assets")
    facts = pd.read_parquet(tmp_path / "assets" / "facts.parquet")
    chunks = pd.read_parquet(tmp_path / "assets" / "chunks.parquet")
    for r in facts.head(50).to_dict("records"):
        assert r["content_hash"] == content_hash(r["chunk_id"], r["entity"], nz.metric_key(r["metric"]), r["period"],
                                                 r["value"], r["unit"], r["evidence"])
    for r in chunks.head(50).to_dict("records"):
        assert r["content_hash"] == content_hash(r["doc_id"], r["page"], r["text"])


