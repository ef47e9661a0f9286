"""Main carries no pipeline run state: no file git tracks is an output of a `dvc.yaml` stage (no `dvc.lock`, no
metrics, admission records, bundle), so nothing committed can disagree with the code beside it. The run state
lives where a run made it: `make demo`'s own project folder (`demo-run/`), a user's project, a DVC remote.

On the tracked files of this checkout (copied into a fresh git repository, as a clone would have them): there is no
lock, so every stage is one never run — DVC lists each with its outputs missing (and, since it compares a dependency
with a hash the lock would have recorded before it checks whether there is one, its dependencies as "modified");
`dvc metrics show` reads no metrics file that is wrong, only ones the first `dvc repro` creates; and there is no
bundle for `clap verify` to refuse."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked() -> list[str]:
    return subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True,
                          check=True).stdout.split("\0")[:-1]


def stage_outputs(root: Path) -> set[str]:
    """Every output path (outs, metrics, plots) of every stage in `root`'s dvc.yaml, foreach expanded."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {Path(out.fs_path).relative_to(root.resolve()).as_posix()
                for stage in repo.index.stages for out in stage.outs}


def run_state(tracked: list[str], outputs: set[str]) -> list[str]:
    """The tracked files that are the pipeline's run state: its lock, and any stage output or file under one."""
    return sorted(f for f in tracked if f == "dvc.lock" or any(f == o or f.startswith(o + "/") for o in outputs))


def test_the_check_names_a_committed_lock_and_an_output():
    outputs = {"metrics/gate.json", "models/sft"}
    assert run_state(["dvc.lock", "metrics/gate.json", "models/sft/adapter/x", "release/prod.json", "params.yaml"],
                     outputs) == ["dvc.lock", "metrics/gate.json", "models/sft/adapter/x"]


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """The tracked files of this checkout in a fresh git repository (what a clone holds)."""
    root = tmp_path_factory.mktemp("committed") / "repo"
    root.mkdir()
    files = _tracked()
    subprocess.run(["tar", "-C", str(ROOT), "-cf", str(root.parent / "t.tar"), "--null", "-T", "-"],
                   input="\0".join(files) + "\0", text=True, check=True)
    subprocess.run(["tar", "-C", str(root), "-xf", str(root.parent / "t.tar")], check=True)
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    return root


def test_main_tracks_no_output_of_its_pipeline(committed):
    outputs = stage_outputs(committed)
    assert "metrics/gate.json" in outputs and "release/bundle.json" in outputs  # the check sees the pipeline
    assert run_state(_tracked(), outputs) == [], \
        "tracked run state (remove it with `git rm --cached`; a run commits it in its own project): "


def test_a_clone_is_a_pipeline_never_run_and_its_metrics_come_from_the_first_repro(committed):
    import json

    outputs = stage_outputs(committed)
    assert not (committed / "dvc.lock").exists()
    status = subprocess.run(["dvc", "status", "--json"], cwd=committed, capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    for stage, changes in json.loads(status.stdout).items():
        outs = {k: v for c in changes if isinstance(c, dict) for k, v in c.get("changed outs", {}).items()}
        assert outs and set(outs.values()) <= {"deleted", "not in cache"}, (stage, outs)  # never run: nothing made
    metrics = subprocess.run(["dvc", "metrics", "show", "--json"], cwd=committed, capture_output=True, text=True)
    assert metrics.returncode == 0, metrics.stderr[-2000:]
    shown = json.loads(metrics.stdout)[""]
    errors = {path: e["error"]["type"] for path, e in shown.get("data", {}).items() if "error" in e}
    assert errors and set(errors.values()) == {"FileNotFoundError"} and set(errors) <= outputs, errors
    assert "error" not in shown  # dvc.yaml itself loads
    assert not (committed / "release" / "bundle.json").exists()  # nothing for `clap verify` to refuse
    verify = subprocess.run(["clap", "verify"], cwd=committed, capture_output=True, text=True)
    said = verify.stdout + verify.stderr
    assert verify.returncode == 1 and "Traceback" not in said, said  # fails closed, in one line
    assert "release/bundle.json: no bundle here, so nothing is verified" in " ".join(said.split()), said
