"""The data flywheel: queued items carry reasons; repaired rows re-enter assetize and are counted."""

import json

from clap import demo_data, repair
from clap.stages import assetize


def test_repaired_rows_reenter_assetize(tmp_path):
    raw = tmp_path / "raw"
    demo_data.write(raw, seed=11, scale=0.3)
    first = assetize.run(raw, tmp_path / "data/assets")
    assert first["unverifiable_facts"] > 0
    import pandas as pd

    facts = pd.read_parquet(tmp_path / "data/assets/facts.parquet")
    chunk = pd.read_parquet(tmp_path / "data/assets/chunks.parquet").set_index("chunk_id")
    raw_rows = {r["record_id"]: r for r in map(json.loads, (raw / "facts.jsonl").read_text().splitlines())}
    bad = next(f for _, f in facts[~facts["verifiable"]].iterrows()
               if raw_rows[f["record_id"]]["evidence"]
               and raw_rows[f["record_id"]]["evidence"] in chunk.loc[f"{f['doc_id']}-p{f['page']}", "text"])
    counts = repair.run(tmp_path, tmp_path / "repair/queue.jsonl")
    queue = [json.loads(line) for line in (tmp_path / "repair/queue.jsonl").read_text().splitlines()]
    assert counts["assetize_quarantine"] == first["inputs"]["facts"]["quarantined"] + first["inputs"]["chunks"]["quarantined"] \
        + first["inputs"]["decisions"]["quarantined"]
    assert all(q["reason"] for q in queue)
    # a person fixes the mistyped value: the right one is in the quoted sentence on the page
    raw_row = raw_rows[bad["record_id"]]
    value = assetize.nz.numbers_in(raw_row["evidence"])[-1]
    fixed = tmp_path / "repair/fixed"
    fixed.mkdir(parents=True)
    (fixed / "batch.jsonl").write_text(json.dumps(raw_row | {"value": str(value), "unit": raw_row["unit"]},
                                                  ensure_ascii=False) + "\n")
    second = assetize.run(raw, tmp_path / "assets2", fixed)
    assert second["repaired_rows_in"] == 1
    e = second["inputs"]["facts"]
    assert e["rows_in"] == first["inputs"]["facts"]["rows_in"] + 1 and e["kept"] + e["quarantined"] == e["rows_in"]
    again = pd.read_parquet(tmp_path / "assets2/facts.parquet").set_index("record_id").loc[bad["record_id"]]
    assert bool(again["verifiable"]) and second["unverifiable_facts"] == first["unverifiable_facts"] - 1
