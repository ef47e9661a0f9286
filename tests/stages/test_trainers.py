"""The registry of trainers (`clap.stages.trainers`): each spec agrees with the loop's names, its config section,
its switches and its `dvc.yaml` stage, so a trainer added with a spec that says otherwise fails here."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from clap import paths
from clap.domain.names import AGENT_CHAIN, CHAIN, REWARD_MODEL
from clap.stages import trainers
from clap.train import guards
from clap.train.spec import AGENT, EXTRACTION, NO_CHAIN, Need, TrainerSpec

ROOT = Path(__file__).resolve().parents[2]
STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
SPECS = list(trainers.REGISTRY.values())


def test_the_chains_are_the_loops_names_in_order():
    """Evaluation, admission and the gate judge by `clap.domain.names`; the registry runs the same trainers."""
    assert [s.name for s in trainers.chain(EXTRACTION)] == list(CHAIN)
    assert [s.name for s in trainers.chain(AGENT)] == list(AGENT_CHAIN)
    assert REWARD_MODEL in [s.name for s in trainers.chain(NO_CHAIN)]  # outside both chains, as a toy may be


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_a_spec_names_a_typed_section_and_boolean_switches(spec, params):
    assert isinstance(spec.settings(params), BaseModel)
    for key in spec.switches:
        value = params
        for part in key.split("."):
            value = getattr(value, part)
        assert isinstance(value, bool), key
    assert spec.signals in (guards.LOSS, guards.PREFERENCE, guards.POLICY_GRADIENT)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_a_spec_is_its_dvc_stage(spec):
    """`train_<name>` runs `clap train <command>`, writes models/<name>/ and depends on exactly the data the spec
    says it reads (the batches' folders, its inputs, the adapter it continues, what it reads when present)."""
    stage = STAGES[f"train_{spec.name}"]
    assert stage["cmd"].split()[:3] == ["clap", "train", spec.command]
    outs = [o if isinstance(o, str) else next(iter(o)) for o in stage["outs"]]
    assert str(paths.MODELS / spec.name) in outs and str(paths.train_metrics(spec.name)) in outs
    data_deps = {d for d in stage["deps"] if not d.startswith("src/")}
    expected = {"models/base", *(str(n.path) for n in spec.inputs), *map(str, spec.optional)}
    expected |= {str(paths.MATERIALIZED), str(paths.ADMISSION)} if spec.reads_batches else set()
    expected |= {str(paths.MODELS / spec.continues)} if spec.continues else set()
    assert data_deps == expected


@pytest.mark.parametrize("switches, expected", [
    ((), None),
    (("agent.enabled",), "agent.enabled"),                             # off
    (("train.dpo.enabled",), None),                                   # on
    (("agent.enabled", "agent.dpo.enabled"), "agent.enabled"),         # the outer switch is named first
])
def test_switched_off_names_the_first_false_switch(params, switches, expected):
    params = copy.deepcopy(params)
    params.agent.enabled = False
    spec = TrainerSpec(name="toy", chain=NO_CHAIN, section="train.sft", signals=guards.LOSS, main=dict,
                       switches=switches)
    assert spec.switched_off(params) == expected


def test_needs_are_checked_batches_first_then_inputs_then_the_adapter_continued():
    spec = TrainerSpec(name="toy", chain=EXTRACTION, section="train.dpo", signals=guards.PREFERENCE, main=dict,
                       reads_batches=True, inputs=(Need(Path("data/x"), "dvc repro x"),), continues="sft")
    assert [(str(n.path), n.made_by) for n in spec.needs(["b1", "b2"])] == [
        ("data/admission/b1.json", "dvc repro admit@b1"), ("data/admission/b2.json", "dvc repro admit@b2"),
        ("data/materialized/b1", "dvc repro materialize@b1"), ("data/materialized/b2", "dvc repro materialize@b2"),
        ("data/x", "dvc repro x"), ("models/sft/adapter", "dvc repro train_sft")]
    assert spec.needs([], start=Path("elsewhere/adapter"))[-1].path == Path("elsewhere/adapter")  # --start


def test_an_unknown_trainer_is_one_line_naming_them_all(tmp_path, params):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params.as_yaml_dict(), sort_keys=False))
    r = subprocess.run([str(Path(sys.executable).parent / "clap"), "train", "no-such-trainer"], cwd=tmp_path,
                       capture_output=True, text=True)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode != 0 and "Traceback" not in said
    assert "unknown trainer 'no-such-trainer': use sft, dpo, grpo, agent-sft," in said
    assert all(f" {s.command}" in said.split("use", 1)[1] for s in SPECS)


def test_the_registry_imports_no_training_library():
    """`clap train --help`, `clap init` and a switched-off trainer read the registry; none of them may pay torch."""
    script = ("import sys; import clap.stages.trainers; "
              "print(sorted(m for m in ('torch', 'transformers', 'peft', 'trl') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr[-2000:]
