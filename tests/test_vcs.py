"""`clap.vcs`: git and dvc run in one place, dvc.lock read in one place, as DVC writes it (YAML 1.2)."""

from __future__ import annotations

import subprocess

import pytest

from clap import vcs

LOCK = """schema: '2.0'
stages:
  train_sft:
    cmd: clap train sft
    params:
      params.yaml:
        train.sft.learning_rate: 5e-05
    outs:
    - path: models/sft
      md5: 0123abcd.dir
    - path: metrics/train_sft.json
  gate:
    cmd: clap gate
"""


def test_a_lock_is_read_as_yaml_1_2():
    """`5e-05` is a float to DVC (YAML 1.2) and a string to PyYAML's YAML 1.1: the bundle's config check compares
    floats, so the lock must be read as DVC wrote it."""
    lock = vcs.parse_lock(LOCK)
    assert vcs.stages(lock)["train_sft"]["params"]["params.yaml"]["train.sft.learning_rate"] == 5e-05
    assert vcs.stages(lock)["gate"] == {"cmd": "clap gate"}


@pytest.mark.parametrize("text, outs, hashes", [
    (LOCK, ["models/sft", "metrics/train_sft.json"], {"models/sft": "0123abcd.dir", "metrics/train_sft.json": ""}),
    ("", [], {}),                                # an empty lock
    ("schema: '2.0'\n", [], {}),                 # no stages yet
    ("stages:\n  a:\n    cmd: x\n", [], {}),     # a stage without outputs
])
def test_outputs_and_their_hashes(text, outs, hashes):
    assert [o["path"] for o in vcs.lock_outs(text)] == outs
    assert vcs.out_hashes(text) == hashes


def test_a_missing_lock_reads_as_empty(tmp_path):
    assert vcs.read_lock(tmp_path) == {}
    (tmp_path / "dvc.lock").write_text(LOCK)
    assert set(vcs.stages(vcs.read_lock(tmp_path))) == {"train_sft", "gate"}


def test_a_failing_git_command_is_returned_not_raised(tmp_path):
    """Callers decide what a failure means (a release refused, a commit called "unknown"): `git` never raises."""
    r = vcs.git(tmp_path, "rev-parse", "HEAD")
    assert isinstance(r, subprocess.CompletedProcess) and r.returncode != 0 and r.stderr
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert vcs.git(tmp_path, "rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
