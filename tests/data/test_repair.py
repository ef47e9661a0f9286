"""The data flywheel: queued items carry reasons; repaired rows re-enter assetize and are counted."""

import json

from clap.data import repair
from clap.demo import corpus as demo_data
from clap.domain.quantities import numbers_in
from clap.stages import assetize


def test_repaired_rows_reenter_assetize(params, tmp_path):
    raw = tmp_path / "raw"
    demo_data.write(raw, seed=11, scale=0.3)
    first = assetize.run(params.assetize, raw, tmp_path / "data/assets")
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
    value = numbers_in(raw_row["evidence"])[-1]
    fixed = tmp_path / "repair/fixed"
    fixed.mkdir(parents=True)
    (fixed / "batch.jsonl").write_text(json.dumps(raw_row | {"value": str(value), "unit": raw_row["unit"]},
                                                  ensure_ascii=False) + "\n")
    second = assetize.run(params.assetize, raw, tmp_path / "assets2", fixed)
    assert second["repaired_rows_in"] == 1
    e = second["inputs"]["facts"]
    assert e["rows_in"] == first["inputs"]["facts"]["rows_in"] + 1 and e["kept"] + e["quarantined"] == e["rows_in"]
    again = pd.read_parquet(tmp_path / "assets2/facts.parquet").set_index("record_id").loc[bad["record_id"]]
    assert bool(again["verifiable"]) and second["unverifiable_facts"] == first["unverifiable_facts"] - 1


def test_simulated_annotator_turns_the_flywheel(params, tmp_path):
    """Queue → the demo's simulated annotator (ground truth) → the next assetize: repaired rows are usable."""
    import pandas as pd

    from clap.demo import annotator as demo_annotator
    from clap.io import read_jsonl
    from clap.stages import materialize

    raw = tmp_path / "raw"
    demo_data.write(raw, seed=11, scale=0.3)
    first = assetize.run(params.assetize, raw, tmp_path / "data/assets")
    for b in ("b1", "b2"):
        materialize.run(params.materialize, tmp_path / "data/assets", b, tmp_path / "data/materialized" / b, rewards=params.rewards, retrieval_k=params.retrieval.k)
    repair.run(tmp_path, tmp_path / "repair/queue.jsonl")
    queue = [json.loads(line) for line in (tmp_path / "repair/queue.jsonl").read_text().splitlines()]
    truth = demo_data.generate(seed=11, scale=0.3)["truth"]
    half = demo_annotator.annotate(queue, truth, share=0.5, seed=11)
    everything = demo_annotator.annotate(queue, truth, share=1.0, seed=11)
    assert 0 < len(half) < len(everything) and {r["record_id"] for r in half} <= {r["record_id"] for r in everything}
    assert demo_annotator.annotate(queue, truth, share=0.5, seed=11) == half  # deterministic
    fixed = tmp_path / "repair/fixed"
    fixed.mkdir(parents=True)
    (fixed / "simulated_annotator.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in everything))
    second = assetize.run(params.assetize, raw, tmp_path / "assets2", fixed)
    assert second["repaired_rows_in"] == len(everything)
    assert second["repaired_rows_verifiable"] == len(everything)  # before: none of them was usable
    assert second["unverifiable_facts"] < first["unverifiable_facts"]
    facts = pd.read_parquet(tmp_path / "assets2/facts.parquet")
    assert set(facts.loc[facts["repaired"], "record_id"]) == {r["record_id"] for r in everything}
    assert not pd.read_parquet(tmp_path / "data/assets/facts.parquet")["repaired"].any()
    # the caps take repaired rows first: every repaired row of b1 lands in its training set or its holdout
    out = materialize.run(params.materialize, tmp_path / "assets2", "b1", tmp_path / "materialized2/b1", rewards=params.rewards, retrieval_k=params.retrieval.k)
    landed = {r["record_id"] for name in ("sft_train", "sft_eval")
              for r in read_jsonl(tmp_path / "materialized2/b1" / f"{name}.jsonl")}
    repaired_b1 = set(facts.loc[facts["repaired"] & (facts["batch"] == "b1"), "record_id"])
    assert repaired_b1 and repaired_b1 <= landed and out["train_size"] > 0


def test_the_inbox_replaces_the_rows_of_one_origin_and_keeps_the_others(tmp_path):
    from clap.data.repair import replace_in_inbox
    from clap.io import read_jsonl

    inbox = tmp_path / "production.jsonl"
    replace_in_inbox(inbox, [{"source": "human_flagged", "record_id": "f1"}], "human:a")
    replace_in_inbox(inbox, [{"source": "canary_failed", "record_id": "f2"}], "canary:v1")
    replace_in_inbox(inbox, [{"source": "human_flagged", "record_id": "f3"}], "human:a")  # the same export again
    assert [(r["origin"], r["record_id"]) for r in read_jsonl(inbox)] == [("canary:v1", "f2"), ("human:a", "f3")]


def test_failed_agent_episodes_reach_the_queue_with_their_reason(tmp_path):
    from clap import paths
    from clap.io import write_jsonl

    failed = [{"task_id": "t1", "kind": "lookup", "reason": "wrong_answer_unsupported", "answer": "7 万元"},
              {"task_id": "t2", "kind": "change", "reason": "no_finish:max_steps", "answer": None}]
    write_jsonl(tmp_path / paths.AGENT_EVAL / "failed_episodes.jsonl", failed)
    counts = repair.run(tmp_path, tmp_path / "queue.jsonl")
    queue = [json.loads(line) for line in (tmp_path / "queue.jsonl").read_text().splitlines()]
    assert counts == {"failed_agent_episode": 2}
    assert [(q["reason"], q["item"]["task_id"]) for q in queue] == [("wrong_answer_unsupported", "t1"),
                                                                     ("no_finish:max_steps", "t2")]
