"""Human evaluation round trip: export → (simulated) Label Studio export → import, checked the way a user meets it."""

import json
import subprocess
from pathlib import Path

import pytest
from tests.feedback.conftest import N_ITEMS, annotation

from clap.feedback import human
from clap.feedback.labelstudio import labeling_config, parse_export
from clap.io import read_jsonl, write_jsonl


def _export(root, cfg):
    out = human.export(cfg, root, root / "feedback/human/export", root / "feedback/human/keys")
    tasks = json.loads((root / "feedback/human/export/tasks.json").read_text())
    key = json.loads((root / "feedback/human/keys" / f"{out['export_id']}.json").read_text())
    return tasks, key


def _ls_export(tasks, key, disagree_on=()):
    """Two raters: usefulness 4 for the candidate and 2 for the base, identical between raters (α = 1);
    correctness: rater 1 says correct for the candidate; rater 2 agrees except on the uids in `disagree_on`."""
    out = []
    for n, t in enumerate(tasks, start=1):
        cand = key["tasks"][t["data"]["uid"]]["model"] == "candidate"
        use = 4 if cand else 2
        flip = t["data"]["uid"] in disagree_on
        out.append({"id": n, "data": t["data"], "annotations": [annotation(n * 10 + 1, 1, use, cand),
                                                                 annotation(n * 10 + 2, 2, use, cand != flip)]})
    return out


def _import(root, cfg, export):
    path = root / "ls_export.json"
    path.write_text(json.dumps(export))
    return human.import_(cfg, root, path, root / "feedback/human/keys", root / "metrics/human.json",
                         root / "feedback/production.jsonl")


def test_export_is_blind_and_keyed(project):
    root, cfg = project
    tasks, key = _export(root, cfg)
    assert len(tasks) == 2 * N_ITEMS and len(key["tasks"]) == 2 * N_ITEMS
    assert all(set(t["data"]) == {"uid", "export_id", "source", "question", "answer"} for t in tasks)
    text = (root / "feedback/human/export/tasks.json").read_text()
    assert "candidate" not in text and "baseline" not in text  # the model never shows
    assert key["candidate_manifest_sha256"] is not None and key["tasks_sha256"]
    assert "<Rating name=\"usefulness\"" in labeling_config() and "<Choices name=\"correctness\"" in labeling_config()


def test_import_recovers_known_means_deltas_and_agreement(project):
    root, cfg = project
    tasks, key = _export(root, cfg)
    # 50 tasks; rater 2 flips correctness on 15 of them → the Cohen table [[20, 5], [10, 15]]: κ = 0.4
    base_uids = [u for u, m in key["tasks"].items() if m["model"] == "base"]
    cand_uids = [u for u, m in key["tasks"].items() if m["model"] == "candidate"]
    flips = set(cand_uids[:5]) | set(base_uids[:10])
    r = _import(root, cfg, _ls_export(tasks, key, flips))
    assert r["models"]["candidate"]["usefulness"]["mean"] == 4.0 and r["models"]["base"]["usefulness"]["mean"] == 2.0
    d = r["deltas"]["candidate-base"]["usefulness"]
    assert (d["delta"], d["ci_low"], d["ci_high"], d["n"]) == (2.0, 2.0, 2.0, N_ITEMS)
    assert r["agreement"]["usefulness"]["krippendorff_alpha"] == 1.0
    assert r["agreement"]["correctness"]["cohen_kappa"] == pytest.approx(0.4)
    assert r["calibration"]["extraction"]["pass_rate~usefulness"]["agreement_rate"] == 1.0
    assert json.loads((root / "metrics/human.json").read_text())["imported"] is True
    inbox = [json.loads(x) for x in (root / "feedback/production.jsonl").read_text().splitlines()]
    assert inbox and {row["source"] for row in inbox} == {"human_flagged"} and all(row["record_id"] for row in inbox)
    assert len(inbox) == 5  # the candidate answers half the raters called incorrect


def test_cancelled_duplicate_and_unknown_labels_are_reported_not_dropped_silently(project):
    root, cfg = project
    tasks, key = _export(root, cfg)
    export = _ls_export(tasks, key)
    export[0]["annotations"].append(annotation(9001, 3, 5, True, cancelled=True))
    export[1]["annotations"].append(annotation(9002, 1, 1, False))  # rater 1 again: the later one counts
    export.append({"id": 999, "data": {"uid": "never-exported", "export_id": key["export_id"], "answer": "{}"},
                   "annotations": [annotation(9003, 1, 3, True)]})
    r = _import(root, cfg, export)
    assert r["cancelled"] == 1
    assert any("task 2: annotator r1@x annotated it twice; annotation 9002 counts, 21 left out" == p for p in r["problems"])
    assert any(p.startswith("task 999: never exported") for p in r["problems"])
    assert r["labels"] == 2 * 2 * N_ITEMS


def test_parse_export_keeps_missing_labels_as_missing():
    ann = {"id": 1, "completed_by": 7, "result": [{"from_name": "usefulness", "value": {"rating": 3}},
                                                   {"from_name": "fluency", "value": {"rating": 9}}]}
    parsed = parse_export([{"id": 1, "data": {"uid": "u"}, "annotations": [ann]}], "x.json")
    (label,) = parsed.labels
    assert label.ratings == {"usefulness": 3, "safety": None, "fluency": None} and label.correct is None
    assert parsed.problems == ["task 1, annotator 7: fluency rating 9 outside 1..5; that label left out"]


def _clap(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["clap", *args], cwd=cwd, capture_output=True, text=True)


def test_import_mistakes_are_one_line_errors(project, params):
    root, cfg = project
    tasks, key = _export(root, cfg)
    (root / "params.yaml").write_text(json.dumps(cfg.as_yaml_dict()))  # YAML reads JSON
    tampered = _ls_export(tasks, key)
    tampered[3]["data"]["answer"] = '{"value": 12345}'
    (root / "tampered.json").write_text(json.dumps(tampered))
    (root / "broken.json").write_text("[{")
    text = json.dumps(_ls_export(tasks, key))  # a key written twice in one object: which one counts is undefined
    (root / "twice.json").write_text(text.replace('"data": {', '"data": {"answer": "x", ', 1))
    for args, message in ((["tampered.json"], "task 4 shows an answer that differs from the one exported"),
                          (["broken.json"], "broken.json: not a valid JSON document"),
                          (["twice.json"], "twice.json: not a valid JSON document (key 'answer' appears twice in one object)"),
                          (["missing.json"], "missing.json: no such file")):
        r = _clap(root, "human", "import", *args)
        assert r.returncode == 2 and message in r.stdout and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (root / "metrics/human.json").exists()  # nothing written on a refused import
    (root / "feedback/human/keys" / f"{key['export_id']}.json").unlink()
    r = _clap(root, "human", "import", "tampered.json")
    assert r.returncode == 2 and "its export key" in r.stdout


def test_export_leaves_out_answers_of_an_older_candidate(project):
    root, cfg = project
    lock = {"stages": {"train_sft": {"outs": [{"path": "models/sft", "md5": "new.dir"}]},
                       "evaluate@b1": {"deps": [{"path": "models/sft", "md5": "old.dir"}]},
                       "replay": {"deps": [{"path": "models/sft", "md5": "new.dir"}]}}}
    (root / "dvc.lock").write_text(json.dumps(lock))
    with pytest.raises(human.HumanEvalError, match=r"no current evaluation or replay answers.*evaluate@b1 did not run"):
        _export(root, cfg)
    lock["stages"]["evaluate@b1"]["deps"][0]["md5"] = "new.dir"
    (root / "dvc.lock").write_text(json.dumps(lock))
    assert len(_export(root, cfg)[0]) == 2 * N_ITEMS


def _with_agent_episodes(root, n_tasks=3):
    """Held-out agent tasks, each with a greedy episode of the base model, the agent adapter in prod and the
    agent SFT adapter."""
    import pandas as pd

    from clap.io import write_jsonl

    (root / "data/assets/chunks.parquet").parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"chunk_id": ["c1-p1"], "text": ["Acme 2021 report, page 1. Sales were 7."]}).to_parquet(
        root / "data/assets/chunks.parquet")
    write_jsonl(root / "data/agent/tasks.jsonl", [
        {"task_id": f"t{i}", "batch": "b1", "question": f"Acme sales in 2021 (task {i})?", "record_ids": [f"f{i}"],
         "needed_chunks": ["c1-p1"]} for i in range(n_tasks)])
    episodes = []
    for i in range(n_tasks):
        for model, answer in (("base", None), ("prod", None), ("agent_sft", "7")):
            steps = [{"text": "", "valid": True, "tool": "read_chunk", "arguments": {"chunk_id": "c1-p1"},
                      "observation": "Sales were 7."}] if answer else [{"text": "Sales?", "valid": False}]
            messages = [{"role": "user", "content": f"Acme sales in 2021 (task {i})?"},
                        *({"role": "assistant", "content": s["text"]} for s in steps)]
            for run in ("greedy", "sample0"):
                episodes.append({"model": model, "run": run, "batch": "b1", "task_id": f"t{i}", "steps": steps,
                                 "answer": answer, "stop": "finish" if answer else "max_steps", "messages": messages,
                                 "success": float(bool(answer)), "reward": 0.9 if answer else 0.1})
    write_jsonl(root / "data/eval_agent/episodes.jsonl", episodes)


def test_agent_episodes_are_exported_blind_and_rated_against_the_base_model(project):
    root, cfg = project
    _with_agent_episodes(root)
    tasks, key = _export(root, cfg)
    agent = [t for t in tasks if key["tasks"][t["data"]["uid"]]["kind"] == "agent"]
    assert len(agent) == 9  # 3 tasks × 3 models, greedy runs only
    texts = {key["tasks"][t["data"]["uid"]]["model"]: t["data"]["answer"] for t in agent}
    assert "read_chunk(chunk_id='c1-p1')" in texts["agent_sft"] and "→ Sales were 7." in texts["agent_sft"]
    assert texts["agent_sft"].endswith("Final answer: 7") and "(not a valid action) Sales?" in texts["agent_base"]
    assert all("Sales were 7." in t["data"]["source"] for t in agent)  # the page the task needs
    export = [{"id": n, "data": t["data"], "annotations": [
        annotation(n * 10 + r, r, 4 if key["tasks"][t["data"]["uid"]]["model"] in ("candidate", "agent_sft") else 2,
                   True) for r in (1, 2)]} for n, t in enumerate(tasks, start=1)]
    r = _import(root, cfg, export)
    d = r["deltas"]["agent_sft-agent_base"]["usefulness"]
    assert (d["delta"], d["n"]) == (2.0, 3) and r["deltas"]["candidate-base"]["usefulness"]["n"] == N_ITEMS
    assert r["deltas"]["agent_sft-agent_prod"]["usefulness"]["delta"] == 2.0
    assert r["models"]["agent_base"]["usefulness"]["mean"] == 2.0  # not pooled with the extraction base model
    assert "prod" not in r["models"] and r["models"]["agent_prod"]["usefulness"]["n"] == 3  # nor prod's agent
    assert r["calibration"]["agent"]["success~usefulness"]["agreement_rate"] == 1.0
    # the labelled episodes, with their conversations, for the reward model's check against people
    labels = read_jsonl(root / "feedback/human/agent_labels.jsonl")
    assert r["agent_episodes_labelled"] == len(labels) == 9
    assert {(x["model"], x["correct"]) for x in labels} == {("base", 1.0), ("prod", 1.0), ("agent_sft", 1.0)}
    assert all(x["messages"][0]["role"] == "user" and x["annotators"] and x["steps"] for x in labels)
    _import(root, cfg, export)  # importing the same export again replaces its rows
    assert len(read_jsonl(root / "feedback/human/agent_labels.jsonl")) == 9


def test_an_agent_episode_changed_since_its_export_is_not_kept_for_the_reward_models_check(project):
    root, cfg = project
    _with_agent_episodes(root, n_tasks=1)
    tasks, key = _export(root, cfg)
    episodes = read_jsonl(root / "data/eval_agent/episodes.jsonl")
    for ep in episodes:
        if ep["model"] == "agent_sft":
            ep["answer"] = "8"  # a new evaluation ran since the export
    write_jsonl(root / "data/eval_agent/episodes.jsonl", episodes)
    export = [{"id": n, "data": t["data"], "annotations": [annotation(n * 10, 1, 4, True)]}
              for n, t in enumerate(tasks, start=1)]
    r = _import(root, cfg, export)
    assert r["agent_episodes_labelled"] == 2
    assert any("agent:t0 of agent_sft: not in" in p for p in r["problems"])


def test_argilla_dataset_folder_mirrors_the_label_studio_tasks(project):
    """The folder `rg.Dataset.from_disk` reads: settings (3 text fields, 3 ratings 1–5, a correct/incorrect
    label), the dataset model, one record per task keyed by the same blind uid."""
    root, cfg = project
    tasks, key = _export(root, cfg)
    folder = root / "feedback/human/export/argilla"
    settings = json.loads((folder / "settings.json").read_text())
    records = json.loads((folder / "records.json").read_text())
    dataset = json.loads((folder / "dataset.json").read_text())
    assert [f["name"] for f in settings["fields"]] == ["source", "question", "answer"]
    questions = {q["name"]: q["settings"] for q in settings["questions"]}
    assert questions["usefulness"] == {"type": "rating", "options": [{"value": v} for v in range(1, 6)]}
    assert [o["value"] for o in questions["correctness"]["options"]] == ["correct", "incorrect"]
    assert [r["id"] for r in records] == [t["data"]["uid"] for t in tasks]
    assert records[0]["fields"] == {f: tasks[0]["data"][f] for f in ("source", "question", "answer")}
    assert dataset["name"] == f"clap-human-{key['export_id']}" and "candidate" not in (folder / "records.json").read_text()
