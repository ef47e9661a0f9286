"""The round trip against Label Studio itself: its own package in its own environment (`make label-studio`
installs it into .venv-label-studio), started on 127.0.0.1; a project made from CLAP's labelling config,
CLAP's exported tasks imported, annotations added through its API (one of them cancelled, one task
annotated twice), its JSON export read back by `clap human import`."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.feedback.conftest import N_ITEMS

from clap.feedback import human
from clap.feedback.labelstudio import labeling_config

pytestmark = pytest.mark.slow
TOKEN = "0123456789abcdef0123456789abcdef01234567"  # a throwaway token of a throwaway local server
LABEL_STUDIO = Path(os.environ.get("CLAP_LABEL_STUDIO", ROOT / ".venv-label-studio/bin/label-studio"))


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    if not LABEL_STUDIO.exists():
        pytest.skip(f"{LABEL_STUDIO}: Label Studio is not installed (`make label-studio`)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path_factory.mktemp("label_studio")
    env = os.environ | {"LABEL_STUDIO_BASE_DATA_DIR": str(data), "LABEL_STUDIO_USERNAME": "admin@clap.invalid",
                        "LABEL_STUDIO_PASSWORD": "clap-local-test", "LABEL_STUDIO_USER_TOKEN": TOKEN,
                        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true"}
    proc = subprocess.Popen([str(LABEL_STUDIO), "start", "--no-browser", "--host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(data)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def _call(url: str, method: str, path: str, body=None):
    req = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Token {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"null")


def _result(usefulness: int, correct: bool) -> list[dict]:
    return [{"from_name": s, "to_name": "answer", "type": "rating", "value": {"rating": usefulness}}
            for s in ("usefulness", "safety", "fluency")] + [
        {"from_name": "correctness", "to_name": "answer", "type": "choices",
         "value": {"choices": ["correct" if correct else "incorrect"]}}]


def test_round_trip_through_label_studio(label_studio, project):
    root, cfg = project
    export = human.export(cfg, root, root / "feedback/human/export", root / "feedback/human/keys")
    tasks = json.loads((root / "feedback/human/export/tasks.json").read_text())
    key = json.loads((root / "feedback/human/keys" / f"{export['export_id']}.json").read_text())
    pid = _call(label_studio, "POST", "/api/projects", {"title": "clap", "label_config": labeling_config()})["id"]
    assert _call(label_studio, "POST", f"/api/projects/{pid}/import", tasks)["task_count"] == 2 * N_ITEMS
    listed = _call(label_studio, "GET", f"/api/tasks?project={pid}&page_size=1000")
    listed = listed["tasks"] if isinstance(listed, dict) else listed
    for t in listed:  # usefulness 4 and correct for the candidate's answers, 2 and incorrect for the base model's
        cand = key["tasks"][t["data"]["uid"]]["model"] == "candidate"
        _call(label_studio, "POST", f"/api/tasks/{t['id']}/annotations",
              {"result": _result(4 if cand else 2, cand), "was_cancelled": False})
    _call(label_studio, "POST", f"/api/tasks/{listed[0]['id']}/annotations", {"result": [], "was_cancelled": True})
    again = listed[1]
    cand = key["tasks"][again["data"]["uid"]]["model"] == "candidate"
    _call(label_studio, "POST", f"/api/tasks/{again['id']}/annotations",
          {"result": _result(4 if cand else 2, cand), "was_cancelled": False})
    exported = _call(label_studio, "GET", f"/api/projects/{pid}/export?exportType=JSON")
    (root / "ls_export.json").write_text(json.dumps(exported))

    r = human.import_(cfg, root, root / "ls_export.json", root / "feedback/human/keys", root / "metrics/human.json",
                      root / "feedback/production.jsonl")
    assert r["tasks_labelled"] == 2 * N_ITEMS and r["labels"] == 2 * N_ITEMS and r["cancelled"] == 1
    assert any("annotated it twice" in p for p in r["problems"])
    assert r["models"]["candidate"]["usefulness"]["mean"] == 4.0 and r["models"]["base"]["correctness"]["mean"] == 0.0
    assert r["deltas"]["candidate-base"]["usefulness"]["delta"] == 2.0
