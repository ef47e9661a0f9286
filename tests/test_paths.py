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


def test_every_file_a_release_pins_is_an_output_the_pipeline_declares():
    """The bundle's roles (clap.release.bundle.ROLES) are built from clap.paths and cover only what dvc.yaml's stages
    write, or read as git-tracked evidence a command outside the pipeline writes (metrics/human.json): a role whose
    folder the pipeline never names would pin nothing, or something no stage vouches for."""
    import re

    import yaml

    from clap.project import project_pipeline
    from clap.release.bundle import ROLES

    ours = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    stages = [*ours["stages"].values(), *project_pipeline(ours, demo=False)["stages"].values()]  # a team's project too
    declared = set()
    for stage in stages:
        body = stage.get("do", stage)
        for key in ("outs", "metrics", "plots", "deps"):
            for out in body.get(key, []):
                declared.add(re.sub(r"\$\{[^}]+\}", "*", next(iter(out)) if isinstance(out, dict) else out))
    for pattern, role in ROLES:
        root = re.split(r"[*{]", pattern, maxsplit=1)[0].rstrip("/")
        assert any(d.startswith(root) or root.startswith(d.split("*")[0].rstrip("/")) for d in declared), (pattern, role)
