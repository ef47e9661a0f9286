import json
import re

import pandas as pd

from clap.data.rows import project_units
from clap.domain import prompts
from clap.domain.quantities import UNITS
from clap.io import read_json, read_jsonl


def test_split_has_zero_overlap_and_app_rows_are_what_the_retriever_returns(small_loop, params):
    """Train rows in the application's prompt hold the retrieved chunks with the gold among them, none
    from a holdout document; the holdout stays single-source extraction; nothing overlaps."""
    chunks = pd.read_parquet(small_loop / "assets" / "chunks.parquet")
    doc_of = dict(zip(chunks["chunk_id"], chunks["doc_id"]))
    for b in ("b1", "b2"):
        folder = small_loop / "materialized" / b
        quality = read_json(folder / "data_quality.json")
        assert all(quality["after"][k] == 0 for k in ("id_overlap", "exact_input_overlap", "near_duplicate_overlap"))
        train, holdout = read_jsonl(folder / "sft_train.jsonl"), read_jsonl(folder / "sft_eval.jsonl")
        holdout_docs = {doc_of[r["chunk_id"]] for r in holdout}
        app = [r for r in train if r["system"] == prompts.SYSTEM_APP]
        assert app and len(app) < len(train)  # app_share 0.5 mixes both tasks
        for r in app:
            shown = re.findall(r"\[chunk_id=(\S+) doc_id=(\S+) page=\d+\]", r["prompt"])
            assert len(shown) == params.retrieval.k and r["chunk_id"] in {c for c, _ in shown}
            assert not {d for _, d in shown} & holdout_docs
            assert set(prompts.LOCATION_KEYS) <= set(json.loads(r["target"]))
        # the extraction prompt names the registry's units in the dimensions the project's facts use (every batch's)
        units = project_units(small_loop / "assets")
        assert units and set(units) <= set(UNITS) and list(units) == [u for u in UNITS if u in units]
        dims = {UNITS[u][0] for u in units}
        assert units == [u for u, (d, _) in UNITS.items() if d in dims] and "" not in units  # every fact has a unit
        assert all(r["system"] == prompts.system_extract(units) for r in holdout)
        assert all(f"unit is one of {' '.join(units)}." in r["system"] for r in holdout)


def test_decision_cases_split_by_case_into_holdout_and_the_chain_s_training_rows(small_loop):
    """Held-out decision cases share no case with the DPO pairs, the GRPO prompts or the SFT cold start;
    every case the batch has lands on exactly one side."""
    decisions = pd.read_parquet(small_loop / "assets" / "decisions.parquet")
    for b in ("b1", "b2"):
        folder = small_loop / "materialized" / b
        held = {r["record_id"] for r in read_jsonl(folder / "decision_eval.jsonl")}
        groups = {r["record_id"] for r in read_jsonl(folder / "grpo_groups.jsonl")}
        pairs = {r["record_id"] for r in read_jsonl(folder / "dpo_pairs.jsonl")}
        sft = {r["record_id"] for r in read_jsonl(folder / "sft_train.jsonl") if r["system"] == prompts.SYSTEM_DECIDE}
        assert not held & (groups | pairs | sft)
        assert pairs == groups == sft and held | groups == set(decisions.loc[decisions["batch"] == b, "record_id"])
        quality = read_json(folder / "data_quality.json")
        assert quality["decision_eval_cases"] == len(held) and quality["decision_sft_rows"] == len(sft)
        for case in read_jsonl(folder / "decision_eval.jsonl"):
            roles = [c["role"] for c in json.loads(case["candidates_json"])]
            assert roles == ["chosen", "near_miss", "rejected"]
            assert json.loads(case["candidates_json"])[0]["text"] == case["reference_json"]
    assert sum(len(read_jsonl(small_loop / "materialized" / b / "decision_eval.jsonl")) for b in ("b1", "b2")) > 0


def test_the_extraction_prompt_names_the_projects_units_or_none():
    assert prompts.system_extract(["thousand USD", "%"]).endswith("unit is one of thousand USD %.")
    assert prompts.system_extract([]).endswith("unit is the one written beside it.")
    assert "元" not in prompts.system_extract(["million USD"])
