"""A stage's code deps in dvc.yaml are its imports (clap.codedeps): derived by `clap dvc-deps --write`, and this
test fails, naming the stage and the module, the moment a stage imports a module its deps do not list."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.test_architecture import graph_of

from clap.codedeps import derived_deps, differences, listed_deps, rewrite, stage_closure

PIPELINE = (ROOT / "dvc.yaml").read_text(encoding="utf-8")


def test_every_stages_code_deps_are_its_imports():
    assert differences(PIPELINE, graph_of()) == []


def test_an_import_added_without_its_dep_is_named_with_its_stage(tmp_path):
    src = tmp_path / "clap"
    shutil.copytree(ROOT / "src" / "clap", src, ignore=shutil.ignore_patterns("__pycache__"))
    gate = src / "stages" / "gate.py"
    gate.write_text(gate.read_text(encoding="utf-8") + "\n\ndef _late():\n    from clap.data import near_dup  # noqa\n",
                    encoding="utf-8")
    problems = differences(PIPELINE, graph_of(src), src)
    assert "dvc.yaml: stage gate runs src/clap/data/near_dup.py (imported) but its deps do not list it; " \
           "run `clap dvc-deps --write`" in problems
    assert all("stage gate " in p for p in problems)  # no other stage runs gate's code


def test_a_stage_runs_its_own_stage_module_only_and_the_plumbing_its_command_needs():
    graph = graph_of()
    sft = stage_closure("train_sft", graph)
    assert {"clap.stages.train_sft", "clap.cli.train", "clap.cli.common", "clap.model", "clap.integrity",
            "clap.config", "clap.domain.prompts", "clap", "clap.stages", "clap.cli"} <= sft
    # the registry it runs through, not the other trainers' modules the registry imports
    assert {m for m in sft if m.startswith("clap.stages.")} == {"clap.stages.train_sft", "clap.stages.trainers",
                                                                "clap.stages.spec"}
    assert "clap.cli.release" not in sft


@pytest.mark.parametrize("stage", ["demo_data", "ingest", "assetize", "index", "base_model", "repair_queue",
                                   "prod_adapter", "gate", "bundle", "train_sft", "train_dpo", "agent_tasks"])
def test_a_stage_that_answers_with_no_model_does_not_run_the_generation_code(stage):
    """A change to how models answer (`clap.evaluate.generate`, the engines, serving) reruns the stages that answer
    with a model, never the data, release or SFT/DPO stages: their commands are registered from modules that build
    no engine and start no server."""
    closure = stage_closure(stage, graph_of())
    assert not {"clap.evaluate.generate", "clap.evaluate.engines", "clap.serve.engine", "clap.cli.serve"} & closure


def test_rewrite_keeps_comments_order_and_data_deps_and_is_idempotent():
    text = ("# a comment\nstages:\n  a:\n    cmd: clap a\n    deps:\n      - src/clap/errors.py\n      - data/raw\n"
            "    outs:\n      - out\n\n  b:\n    foreach: [x]\n    do:\n      cmd: clap b ${item}\n      deps:\n"
            "        - data/in\n")
    once = rewrite(text, {"a": ["src/clap/io.py", "src/clap/stages/admit.py"], "b": ["src/clap/stages/bundle.py"]})
    assert once == ("# a comment\nstages:\n  a:\n    cmd: clap a\n    deps:\n      - src/clap/io.py\n"
                    "      - src/clap/stages/admit.py\n      - data/raw\n    outs:\n      - out\n\n  b:\n    foreach: [x]\n"
                    "    do:\n      cmd: clap b ${item}\n      deps:\n        - src/clap/stages/bundle.py\n        - data/in\n")
    assert rewrite(once, {"a": ["src/clap/io.py", "src/clap/stages/admit.py"], "b": ["src/clap/stages/bundle.py"]}) == once
    assert listed_deps(once) == {"a": ["src/clap/io.py", "src/clap/stages/admit.py"], "b": ["src/clap/stages/bundle.py"]}


def test_clap_dvc_deps_checks_the_repository():
    r = subprocess.run([str(Path(sys.executable).parent / "clap"), "dvc-deps"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0 and "every stage's code deps match its imports" in r.stdout, r.stdout + r.stderr
    assert derived_deps("gate", graph_of())[0].startswith("src/clap/")
