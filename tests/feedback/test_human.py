"""Human evaluation round trip: export → (simulated) Label Studio export → import, checked the way a user meets it."""

import json
import subprocess
from pathlib import Path

import pytest
from tests.feedback.conftest import N_ITEMS, annotation

from clap.feedback import human
from clap.feedback.labelstudio import labeling_config, parse_export


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
    (root / "params.yaml").write_text(json.dumps(cfg))  # YAML reads JSON
    tampered = _ls_export(tasks, key)
    tampered[3]["data"]["answer"] = '{"value": 12345}'
    (root / "tampered.json").write_text(json.dumps(tampered))
    (root / "broken.json").write_text("[{")
    for args, message in ((["tampered.json"], "task 4 shows an answer that differs from the one exported"),
                          (["broken.json"], "broken.json: not JSON"),
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
