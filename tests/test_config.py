import copy
from pathlib import Path

import pytest
import yaml
from tests.conftest import ROOT

from clap.config import compose, load


def test_committed_params_equal_the_composition_of_conf():
    assert yaml.safe_load((ROOT / "params.yaml").read_text()) == compose()


def test_unknown_keys_are_rejected(tmp_path):
    params = compose()
    params["train"]["sft"]["learning_rte"] = 1e-3
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(ValueError, match="train.sft.learning_rte"):
        load(path)


def test_hydra_overrides_compose():
    p = compose(["train.sft.learning_rate=1e-4", "gate=default", "data.batches=[b2]"])
    assert p["train"]["sft"]["learning_rate"] == 1e-4 and p["data"]["batches"] == ["b2"]
    assert p["gate"]["name"] == "default"


@pytest.mark.parametrize("kind, switches, expected", [
    ("sft", {"agent": False, "dpo": False}, None),                     # SFT always trains
    ("dpo", {"dpo": False}, "train.dpo.enabled"),
    ("grpo", {}, None),
    ("agent-sft", {"agent": False}, "agent.enabled"),                 # the track's switch turns off every agent trainer
    ("agent-rm", {"agent": False}, "agent.enabled"),
    ("agent-dpo", {"agent": False, "agent_dpo": False}, "agent.enabled"),  # the track's switch is named first
    ("agent-dpo", {"agent_dpo": False}, "agent.dpo.enabled"),
    ("agent-grpo", {"agent_grpo": False}, "agent.grpo.enabled"),
    ("agent-rm", {"agent_dpo": False, "agent_grpo": False}, None),
])
def test_the_switch_that_keeps_a_trainer_off_is_named(params, kind, switches, expected):
    from clap.stages.trainers import by_command

    cfg = copy.deepcopy(params)
    cfg.agent.enabled = switches.get("agent", True)
    for step in ("dpo", "grpo"):
        getattr(cfg.train, step).enabled = switches.get(step, True)
        getattr(cfg.agent, step).enabled = switches.get(f"agent_{step}", True)
    assert by_command(kind).switched_off(cfg) == expected


@pytest.mark.parametrize("profile", sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "model").glob("*.yaml")))
def test_every_model_profile_composes_into_params_the_schema_accepts(profile):
    """Each conf/model/ profile, chosen as the docs say (`clap params -S model=NAME`), composes with the rest of
    conf/ and passes the typed schema: a profile whose keys drifted from the schema fails here, not on a GPU."""
    from clap.config import compose, typed

    conf = Path(__file__).resolve().parents[1] / "conf"
    params = typed(compose([f"model={profile}"], conf=conf), f"model={profile}")
    assert params.model.base and params.train.sft.max_length >= 16


# --- `clap upgrade`: a project's conf brought to this CLAP's schema (clap.config.upgrade_plan) ---

def _composed():
    return compose(conf=ROOT / "conf")


def _without(tree: dict, *keys: str) -> dict:
    import copy

    tree = copy.deepcopy(tree)
    for key in keys:
        *parents, last = key.split(".")
        node = tree
        for p in parents:
            node = node[p]
        del node[last]
    return tree


@pytest.mark.parametrize("change, moves, adds, unknown, invalid", [
    ("as CLAP writes it", (), (), (), ()),
    ("a key CLAP moved, under its old name", (("evaluate.latency_requests", "replay.latency_requests", 7),), (), (), ()),
    ("a key CLAP added", (), (("train.sft.pad_to_multiple_of", 64),), (), ()),
    ("a section CLAP added", (), (("canary", "SECTION"),), (), ()),
    ("a key no CLAP knows", (), (), ("retrieval.fusion",), ()),
    ("both the old and the new name", (), (), ("evaluate.latency_requests",), ()),
    ("a value the schema refuses", (), (), (), ("retrieval.k: input should be a valid integer (got 'three')",)),
])
def test_upgrade_plan(change, moves, adds, unknown, invalid):
    from clap.config import upgrade_plan

    template = _composed()
    project = {
        "as CLAP writes it": lambda t: t,
        "a key CLAP moved, under its old name": lambda t: _without(t, "replay.latency_requests")
        | {"evaluate": t["evaluate"] | {"latency_requests": 7}},
        "a key CLAP added": lambda t: _without(t, "train.sft.pad_to_multiple_of"),
        "a section CLAP added": lambda t: _without(t, "canary"),
        "a key no CLAP knows": lambda t: t | {"retrieval": t["retrieval"] | {"fusion": "max"}},
        "both the old and the new name": lambda t: t | {"evaluate": t["evaluate"] | {"latency_requests": 7}},
        "a value the schema refuses": lambda t: t | {"retrieval": t["retrieval"] | {"k": "three"}},
    }[change](template)
    plan = upgrade_plan(project, template)
    assert plan.moves == moves and plan.unknown == unknown and plan.invalid == invalid
    assert plan.adds == tuple((k, template[k] if v == "SECTION" else v) for k, v in adds)
