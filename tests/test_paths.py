"""Each path is written once in Python (`clap.paths`); dvc.yaml, the pipeline's own file, must agree."""

from pathlib import Path

from tests.conftest import ROOT

from clap import paths


def test_every_path_constant_is_the_one_dvc_yaml_uses():
    dvc = (ROOT / "dvc.yaml").read_text()
    constants = {k: v for k, v in vars(paths).items() if isinstance(v, Path) and v not in paths.OUTSIDE_PIPELINE}
    assert len(constants) > 10
    missing = {k: str(v) for k, v in constants.items() if str(v) not in dvc}
    assert not missing, f"clap.paths names paths dvc.yaml does not use: {missing}"
    assert str(paths.adapter("sft")) in dvc and str(paths.eval_metrics("b1")).replace("b1", "${item}") in dvc
