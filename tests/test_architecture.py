"""The house's shape (clap.LAYERS): no import climbs to a higher floor, no circle, no stage imported by a library.

The sources are parsed in a fresh interpreter (`python tests/test_architecture.py SRC` prints the graph as JSON):
CPython 3.11's `ast.parse` can raise a spurious "AST constructor recursion depth mismatch" SystemError while other
threads left by earlier tests (Ray, uvicorn, tokenizers) run (python/cpython#106905, fixed in 3.12).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import clap
from clap.codedeps import import_graph

SRC = Path(clap.__file__).parent


def graph_of(src: Path = SRC) -> dict[str, set[str]]:
    """`import_graph(src)`, computed in a fresh interpreter with no other thread running."""
    done = subprocess.run([sys.executable, __file__, str(src)], capture_output=True, text=True, check=True)
    return {m: set(ts) for m, ts in json.loads(done.stdout).items()}


def floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(clap.LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its package {top!r} is on no floor of clap.LAYERS")


def test_every_package_has_a_floor():
    for mod in graph_of():
        if mod != "clap":
            floor(mod)


def climbs(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} (floor {floor(m)}) imports {t} (floor {floor(t)})"
                  for m, ts in graph.items() if m != "clap" for t in ts if floor(t) > floor(m))


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_climbs_to_a_higher_floor():
    assert not (found := climbs(graph_of())), "\n".join(found)


def test_no_circle():
    assert (found := circle(graph_of())) is None, " → ".join(found)


def may_import_stage(importer: str, stage: str) -> bool:
    """A stage module is imported by the CLI alone, but for the registry of trainers (`clap.stages.trainers`),
    which collects the trainer stages' specs and is read by the CLI and `clap init` (clap.project)."""
    if importer.split(".")[:2] == ["clap", "cli"]:
        return True
    if stage == "clap.stages.trainers":
        return importer == "clap.project"
    return importer == "clap.stages.trainers" and stage.startswith("clap.stages.train_")


def test_a_stage_is_imported_by_the_cli_alone():
    wrong = sorted(f"{m} imports {t}" for m, ts in graph_of().items() for t in ts
                   if t.startswith("clap.stages.") and not may_import_stage(m, t))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("importer, stage, allowed", [
    ("clap.cli.train", "clap.stages.train_sft", True),
    ("clap.stages.trainers", "clap.stages.train_sft", True),
    ("clap.stages.trainers", "clap.stages.gate", False),   # the registry collects trainers only
    ("clap.project", "clap.stages.trainers", True),
    ("clap.project", "clap.stages.train_sft", False),
    ("clap.release.gate", "clap.stages.trainers", False),   # a library never reads the registry
    ("clap.stages.gate", "clap.stages.train_sft", False),
])
def test_who_may_import_a_stage(importer, stage, allowed):
    assert may_import_stage(importer, stage) is allowed


def test_the_checks_see_a_climb_and_a_circle(tmp_path):
    """The checks can fail: a package tree where the domain imports release and release imports it back."""
    root = tmp_path / "clap"
    for package in ("domain", "release"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "domain" / "a.py").write_text("def f():\n    from clap.release import b\n")
    (root / "release" / "b.py").write_text("from clap.domain.a import f\nfrom . import c\n")
    (root / "release" / "c.py").write_text("")
    graph = graph_of(root)
    assert graph["clap.domain.a"] == {"clap.release", "clap.release.b"}  # importing b runs the package first
    assert graph["clap.release.b"] == {"clap.domain.a", "clap.release", "clap.release.c"}
    assert climbs(graph) == ["clap.domain.a (floor 0) imports clap.release (floor 6)",
                             "clap.domain.a (floor 0) imports clap.release.b (floor 6)"]
    assert circle(graph) == ["clap.domain.a", "clap.release.b", "clap.domain.a"]


if __name__ == "__main__":
    print(json.dumps({m: sorted(ts) for m, ts in import_graph(Path(sys.argv[1])).items()}))
