"""git and dvc, run in one place, and `dvc.lock` read in one place.

    vcs.git(root, "rev-parse", "HEAD").stdout        # a CompletedProcess: text, captured, never raising
    vcs.dvc(root, "checkout", "--force")
    vcs.lock_outs(text)                              # every stage output a dvc.lock's text records

Every git and dvc command CLAP runs goes through `run` (the callers decide what a failure means: a release refused,
a round stopped, a commit called "unknown"). A dvc.lock is read as DVC writes it, YAML 1.2 (`5e-05` is a float
there and a string to PyYAML's YAML 1.1), by `read_lock` or `parse_lock`; the stage outputs, their hashes and a
stage's recorded params come from the parsed document.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

LOCK = Path("dvc.lock")


def run(tool: str, root: Path | str | None, *args: str, capture: bool = True) -> subprocess.CompletedProcess:
    """`tool args…` in `root` (the current folder when None), its output captured as text unless `capture` is false
    (a long `dvc repro` streams to the terminal)."""
    return subprocess.run([tool, *args], cwd=root, capture_output=capture, text=True)


def git(root: Path | str | None, *args: str, capture: bool = True) -> subprocess.CompletedProcess:
    return run("git", root, *args, capture=capture)


def dvc(root: Path | str | None, *args: str, capture: bool = True) -> subprocess.CompletedProcess:
    return run("dvc", root, *args, capture=capture)


def parse_lock(text: str) -> dict:
    """A dvc.lock's text parsed as DVC writes it (YAML 1.2); {} for an empty one."""
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(text) or {}


def read_yaml12(path: Path) -> dict:
    """A YAML file DVC reads or writes (dvc.lock, params.yaml), parsed as YAML 1.2."""
    return parse_lock(Path(path).read_text(encoding="utf-8"))


def read_lock(root: Path) -> dict:
    """`root`'s dvc.lock parsed, {} when there is none."""
    lock = Path(root) / LOCK
    return parse_lock(lock.read_text(encoding="utf-8")) if lock.exists() else {}


def stages(lock: dict) -> dict[str, dict]:
    """Stage name → its record (cmd, deps, params, outs) in a parsed dvc.lock."""
    return lock.get("stages") or {}


def lock_outs(text: str) -> list[dict]:
    """Every stage output ({path, md5, …}) recorded in the text of a dvc.lock."""
    return [o for st in stages(parse_lock(text)).values() for o in st.get("outs", [])]


def out_hashes(text: str) -> dict[str, str]:
    """path → md5 of every stage output a dvc.lock's text pins ("" for one it pins no hash for)."""
    return {o["path"]: o.get("md5", "") for o in lock_outs(text)}
