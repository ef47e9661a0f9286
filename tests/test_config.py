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
