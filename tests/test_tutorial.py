"""docs/tutorial/own-data.md, run as written: every `bash` block in order in a fresh folder, the `yaml` block pasted where
the page says. The test's only changes: the copy of the user's files writes the sample sources
(tests/helpers/tutorial.py), and `clap params` composes a tiny model and a relaxed gate (a random model cannot pass
the real policy)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.helpers.tutorial import write_sources

TUTORIAL = ROOT / "docs" / "tutorial" / "own-data.md"
TINY = ["materialize.max_train_per_batch=6", "materialize.max_eval_per_batch=3", "materialize.max_replay_per_batch=2",
        "admit.min_train_samples=4", "train.sft.max_steps=2", "train.sft.save_steps=1", "train.sft.per_device_batch_size=2",
        "train.sft.gradient_accumulation=1", "evaluate.max_new_tokens=8", "evaluate.bootstrap=50",
        "replay.max_new_tokens=8", "evaluate_decisions.max_new_tokens=8", "gate.min_parse_ok=0.0",
        "gate.require_replay_gain=false", "gate.max_regressed_batches=5", "gate.ci_lower_must_exceed=-1.0",
        "gate.max_batch_regression=-1.0", "gate.min_overall_delta=-1.0", "gate.min_decision_delta=-1.0",
        "gate.decision_ci_lower_must_exceed=-1.0", "gate.max_p95_latency_ratio=1000.0"]


def blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"```(bash|yaml)\n(.*?)```", text, flags=re.S)


def test_the_tutorial_runs_as_written(tmp_path, tiny_dir):
    env = os.environ | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cwd, outputs = tmp_path, {}
    steps = blocks(TUTORIAL.read_text(encoding="utf-8"))
    assert [kind for kind, _ in steps] == ["bash", "bash", "yaml", "bash", "bash"], "the tutorial's steps changed"
    for kind, body in steps:
        if kind == "yaml":
            conf = cwd / "conf" / "ingest" / "default.yaml"
            conf.write_text(conf.read_text(encoding="utf-8").replace("tables: []\n", body), encoding="utf-8")
            continue
        for line in body.strip().splitlines():
            if line.startswith("cd "):
                cwd = cwd / line.split()[1]
                continue
            if line.startswith("cp "):  # the user's files: the sample sources instead
                write_sources(cwd / "sources")
                continue
            if line == "clap params":
                line += "".join(f" -S {o}" for o in [*TINY, f"model.base={tiny_dir}"])
            r = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True)
            assert r.returncode == 0, f"{line}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            outputs[line.split(" -S")[0]] = r.stdout + r.stderr

    assert "ingested 11 (3 html, 6 pdf, 1 markdown, 1 docx" in outputs["clap ingest"]
    assert "→ data/raw: 24 chunks, 45 facts (21 inline XBRL), 12 decisions" in outputs["clap ingest"]
    report = json.loads((cwd / "data/raw/ingest_report.json").read_text())
    assert report["table_facts_located"] == {"facts": 24, "found": 24, "period_from_header": 0, "no_period": 0,
                                             "no_such_document": 0}
    assert json.loads((cwd / "metrics/gate.json").read_text())["decision"] == "promote"
    tags = subprocess.run(["git", "tag"], cwd=cwd, capture_output=True, text=True).stdout.split()
    assert {"clap-adapter@v0.0.1", "clap-adapter#prod#1"} <= set(tags)
    # the release pins the CLAP code every stage ran (clap-code.json), and `clap verify` recomputes it
    bundle = json.loads((cwd / "release/bundle.json").read_text())
    assert {"path": "clap-code.json", "role": "clap_code"} in [{k: f[k] for k in ("path", "role")} for f in bundle["files"]]
