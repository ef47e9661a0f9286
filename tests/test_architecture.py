"""The house's shape (clap.LAYERS): no import climbs to a higher floor, no circle, no stage imported by a library;
clap modules are imported at the top of a module, but for those whose import pulls a third-party heavyweight.

The sources are parsed in a fresh interpreter (`python tests/test_architecture.py SRC` prints the graph as JSON):
CPython 3.11's `ast.parse` can raise a spurious "AST constructor recursion depth mismatch" SystemError while other
threads left by earlier tests (Ray, uvicorn, tokenizers) run (python/cpython#106905, fixed in 3.12).
"""

from __future__ import annotations

import ast
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
    """A stage module is imported by the CLI alone, but for the registries: the registry of trainers
    (`clap.stages.trainers`), which collects the trainer stages' specs and is read by the CLI and `clap init`
    (clap.project) and the stages that answer with or judge a chain's trainers (the gate, the decision and agent
    evaluations), and the registry of the other stages (`clap.stages.registry`), which collects theirs. What a
    stage is (`clap.stages.spec`) is read by every stage and the CLI."""
    if importer.split(".")[:2] == ["clap", "cli"]:
        return True
    if stage == "clap.stages.spec":
        return importer.startswith("clap.stages.")
    if stage == "clap.stages.trainers":  # each chain's switched-on trainers: what the gate judges, what is evaluated
        return importer in ("clap.project", "clap.stages.gate", "clap.stages.evaluate_decisions",
                            "clap.stages.evaluate_agent")
    if importer == "clap.stages.registry":
        return not stage.startswith("clap.stages.train")
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
    ("clap.stages.registry", "clap.stages.ingest", True),
    ("clap.stages.gate", "clap.stages.trainers", True),
    ("clap.stages.evaluate", "clap.stages.trainers", False),
    ("clap.stages.evaluate_decisions", "clap.stages.trainers", True),   # the extraction chain's steps it answers
    ("clap.stages.evaluate_agent", "clap.stages.trainers", True),
    ("clap.stages.registry", "clap.stages.train_sft", False),   # a trainer is in the registry of trainers
    ("clap.stages.ingest", "clap.stages.spec", True),
    ("clap.release.gate", "clap.stages.spec", False),
    ("clap.release.gate", "clap.stages.registry", False),
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


# Third-party libraries whose import costs a command seconds on 2 cores (torch ≈ 7 s, scipy ≈ 1.3 s, FastAPI ≈ 0.4 s):
# a module binds one at its top with `clap.lazy.module`, or imports it inside the function that needs it.
HEAVYWEIGHTS = {"torch", "transformers", "peft", "trl", "vllm", "ray", "datasets", "scipy", "datasketch", "fastapi",
                "uvicorn", "mlflow", "matplotlib"}


def import_sites(src: Path) -> dict[str, dict[str, list]]:
    """module → {"top": modules imported at module level, "inner": per clap import statement inside a function, the
    names it may load (`from clap.x import y`: clap.x and clap.x.y, whichever are modules), "deferred": the modules
    bound at the top with `lazy.module` (imported at their first use)}."""
    from clap.codedeps import lazy_binding, module_of

    out = {}
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        top, lazy, deferred = set(), [], set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module, *(f"{n.module}.{a.name}" for a in n.names)]
            else:
                if (bound := lazy_binding(n)) is not None:
                    deferred.add(bound)
                continue
            if id(n) in inner:
                if names[0].startswith("clap."):
                    lazy.append(sorted(names))
            else:
                top |= set(names)
        out[module_of(path, src)] = {"top": sorted(top), "inner": sorted(lazy), "deferred": sorted(deferred)}
    return out


def heavy_at_import(sites: dict[str, dict[str, list]]) -> dict[str, set[str]]:
    """module → the heavyweights importing it loads (through module-level imports, clap's and third parties')."""
    memo: dict[str, set[str]] = {}

    def pulls(m: str, stack: tuple[str, ...] = ()) -> set[str]:
        if m in memo or m in stack:
            return memo.get(m, set())
        found = set()
        for name in sites[m]["top"]:
            if name.split(".")[0] in HEAVYWEIGHTS:
                found.add(name.split(".")[0])
            elif name in sites and name != m:
                found |= pulls(name, (*stack, m))
        memo[m] = found
        return found

    return {m: pulls(m) for m in sites}


def imports_out_of_place(sites: dict[str, dict[str, list]]) -> list[str]:
    """Each clap import inside a function (it belongs at the module's top, where a reader sees the graph), and each
    clap module bound with `lazy.module` whose import pulls no heavyweight (a plain import costs nothing)."""
    heavy = heavy_at_import(sites)
    inner = [f"{m} imports {' '.join(t for t in names if t in sites)} inside a function"
             for m, s in sites.items() for names in s["inner"]]
    deferred = [f"{m} binds {t} with lazy.module, but importing it pulls no heavyweight"
                for m, s in sites.items() for t in s["deferred"] if t.startswith("clap.") and not heavy.get(t)]
    return sorted(inner + deferred)


def test_clap_modules_are_imported_at_the_top():
    done = subprocess.run([sys.executable, __file__, "--sites", str(SRC)], capture_output=True, text=True, check=True)
    assert not (found := imports_out_of_place(json.loads(done.stdout))), "\n".join(found)


def test_the_import_place_check_can_fail():
    sites = {"clap.a": {"top": [], "inner": [["clap.b"]], "deferred": ["clap.c", "clap.b", "torch"]},
             "clap.b": {"top": ["numpy"], "inner": [], "deferred": []},       # light
             "clap.c": {"top": ["clap.d"], "inner": [], "deferred": []},      # pulls torch through d
             "clap.d": {"top": ["torch.nn"], "inner": [], "deferred": []},
             "clap.e": {"top": ["clap.c"], "inner": [], "deferred": ["torch"]}}
    assert heavy_at_import(sites) == {"clap.a": set(), "clap.b": set(), "clap.c": {"torch"}, "clap.d": {"torch"},
                                      "clap.e": {"torch"}}
    assert imports_out_of_place(sites) == ["clap.a binds clap.b with lazy.module, but importing it pulls no heavyweight",
                                           "clap.a imports clap.b inside a function"]


def test_the_cli_imports_no_heavyweight():
    """`clap --help`, and every command before it reaches its work, load none of them."""
    script = f"import sys, clap.cli; print(sorted(m for m in {sorted(HEAVYWEIGHTS)!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"



def _first_bindings(scope) -> dict[str, int]:
    """name → the first line a function (or lambda) binds it in its own scope."""
    a = scope.args
    first = {x.arg: scope.lineno for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]}
    todo = [scope.body] if isinstance(scope, ast.Lambda) else list(scope.body)
    while todo:
        n = todo.pop()
        names = []
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [n.name]
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names = [n.id]
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names = [n.name]
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names = [(x.asname or x.name).split(".")[0] for x in n.names]
        for name in names:
            first[name] = min(first.get(name, n.lineno), n.lineno)
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
                              ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(n))
    return first


def rebound_imports(source: str, module: str = "m") -> list[str]:
    """Each function that binds a name its module imports at the top (a parameter, an assignment, a loop variable,
    an import of its own): inside that function the name is the local, and a nested function that meant the module
    meets "cannot access free variable" only when it runs — the demo's canary did, after imports moved to the top."""
    tree = ast.parse(source)
    imported = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    return [f"{module}:{f.lineno} {f.name} rebinds {name}, which the module imports"
            for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for name in sorted(set(_first_bindings(f)) & imported)]


def test_the_rebinding_check_can_fail():
    source = ("from clap.release import registry as rel\nimport os\n\n"
              "def demo(result):\n    def canary():\n        return rel.current()\n"
              "    for rel in result:\n        print(rel)\n\n"
              "def ok(path):\n    return os.path.join(path)\n\n"
              "def param(os):\n    return [rel for rel in os]\n")
    assert rebound_imports(source) == ["m:4 demo rebinds rel, which the module imports",
                                       "m:13 param rebinds os, which the module imports"]


def late_bound_free_names(source: str, module: str = "m") -> list[str]:
    """Each nested function (or lambda) reading a name its enclosing function binds only below it: where the name
    was meant to be a module (an import that moved), the nested function fails with "cannot access free variable"
    when it runs, and only then — `clap demo`'s canary callback read `rel`, bound by a loop further down."""
    found = []
    for f in ast.walk(ast.parse(source)):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        outer, todo = _first_bindings(f), list(f.body)
        while todo:
            g = todo.pop()
            if not isinstance(g, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                todo.extend(ast.iter_child_nodes(g))
                continue
            reads = {n.id for n in ast.walk(g) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            found += [f"{module}:{g.lineno} {f.name} → {getattr(g, 'name', 'lambda')} reads {name}, bound only at "
                      f"line {outer[name]}" for name in sorted(reads - set(_first_bindings(g)))
                      if outer.get(name, 0) > g.lineno]
    return found


@pytest.mark.parametrize("check", [rebound_imports, late_bound_free_names], ids=["no function rebinds a name its "
                         "module imports", "no nested function reads a name bound only below it"])
def test_names_in_src_are_bound_where_they_are_meant(check):
    found = [line for path in sorted(SRC.rglob("*.py"))
             for line in check(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))]
    assert not found, "\n".join(found)


def test_the_late_binding_check_can_fail():
    source = ("def demo(result):\n    def canary():\n        return rel.current()\n"
              "    for rel in result:\n        print(rel)\n\n"
              "def ok(items):\n    total = 0\n    def add(x):\n        return x + total\n    return [add(i) for i in items]\n")
    assert late_bound_free_names(source) == ["m:2 demo → canary reads rel, bound only at line 4"]


if __name__ == "__main__":
    if sys.argv[1] == "--sites":
        print(json.dumps(import_sites(Path(sys.argv[2]))))
    else:
        print(json.dumps({m: sorted(ts) for m, ts in import_graph(Path(sys.argv[1])).items()}))
