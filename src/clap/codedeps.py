"""Each DVC stage's code dependencies, derived from the imports of the code it runs — never kept by hand.

    clap dvc-deps            # exit 1, one line per (stage, module) that dvc.yaml's deps miss or list in excess
    clap dvc-deps --write    # rewrite the `src/clap/...` deps of every stage of dvc.yaml from the imports

A stage `S` runs `clap <command>`: the CLI module that defines the command (`clap.cli.<group>`, the one that imports
`clap.stages.S`), `clap.cli.common` (parameters, input checks, errors) and `clap.stages.S`. Its code is the
transitive closure of their `clap` imports — at module level and inside functions alike, as `ast` reads them, and
the modules bound with `clap.lazy.module` — plus the packages' `__init__` modules Python runs on the way, without
other stages' modules and other command groups (a command group imports every stage it can run; a stage runs only
its own). The registry of trainers (`clap.stages.trainers`) is in the closure of every stage whose command reads it;
a trainer the registry collects runs through it and `clap train` (`clap.cli.train`), and the other trainers' modules
the registry imports are left out as other stages are (a change to one reruns that trainer, and its outputs rerun
the stages that judge it). A stage the registry of stages (`clap.stages.registry`) collects runs through it and the
command group its spec names (`group="data"`: `clap.cli.data`). A change to any file of the closure reruns the
stage; a change elsewhere does not. `tests/test_codedeps.py` fails, naming the stage and the module, when dvc.yaml
and the imports disagree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import clap
from clap import paths
from clap.errors import UserError
from clap.io import read_json

SRC = Path(clap.__file__).parent
COMMON = "clap.cli.common"
REGISTRY = "clap.stages.trainers"  # the trainers' specs: read by the commands that run or judge a trainer
TRAIN_COMMAND = "clap.cli.train"  # `clap train <trainer>`: runs each trainer the registry collects
STAGES = "clap.stages.registry"  # the other stages' specs: each command group registers its own from it
NOT_STAGES = {REGISTRY, STAGES, "clap.stages.spec"}  # modules of clap/stages/ that are no stage of their own


def module_of(path: Path, src: Path = SRC) -> str:
    parts = ("clap", *path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The clap module `name` refers to (`clap.x.y` may be an attribute of `clap.x`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def lazy_binding(node: ast.AST) -> str | None:
    """The module a `lazy.module("clap.x")` call binds (`clap.lazy`: imported at first use, an import all the same)."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "module"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "lazy" and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """module → the clap modules it imports (anywhere in the file, function bodies too, and the ones it binds
    with `lazy.module`)."""
    files = {module_of(p, src): p for p in src.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif (deferred := lazy_binding(node)) is not None:
                targets = [deferred]
            else:
                continue
            for t in targets:
                if t.startswith("clap"):
                    hit = _resolve(t, modules)
                    if hit and hit != mod and hit != "clap":
                        graph[mod].add(hit)
    return graph


def _packages(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def spec_group(stage: str, src: Path = SRC) -> str:
    """The command group `STAGE = StageSpec(..., group=...)` in `clap/stages/<stage>.py` names (read, not imported)."""
    tree = ast.parse((src / "stages" / f"{stage}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "StageSpec":
            for kw in node.keywords:
                if kw.arg == "group" and isinstance(kw.value, ast.Constant):
                    return kw.value.value
    raise KeyError(f"{stage}: clap.stages.registry collects it, but src/clap/stages/{stage}.py has no "
                   "StageSpec(..., group=...)")


def stage_closure(stage: str, graph: dict[str, set[str]], src: Path = SRC) -> set[str]:
    """The clap modules stage `stage` runs (pure, over `graph`)."""
    own = f"clap.stages.{stage}"
    if own not in graph:
        raise KeyError(f"{stage}: no module {own} (src/clap/stages/{stage}.py)")
    if own in graph.get(REGISTRY, ()):
        commands = [REGISTRY, TRAIN_COMMAND]
    elif own in graph.get(STAGES, ()):
        commands = [STAGES, f"clap.cli.{spec_group(stage, src)}"]
    else:
        commands = sorted(m for m, ts in graph.items() if m.startswith("clap.cli.") and own in ts)
    start = {own, COMMON, *commands}
    seen, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for t in graph.get(m, ()):
            if t.startswith("clap.stages.") and t != own and t not in NOT_STAGES or \
                    t.startswith("clap.cli.") and t not in start:
                continue
            todo.append(t)
    return seen | {p for m in seen for p in _packages(m) if p in graph}  # a namespace package has no file


def module_file(module: str, src: Path = SRC) -> str:
    """`clap.data.ingest.grid` → `src/clap/data/ingest/grid.py` (a package: its `__init__.py`)."""
    rel = Path(*module.split(".")[1:])
    path = src / rel / "__init__.py" if (src / rel).is_dir() else src / rel.with_suffix(".py")
    return "src/clap/" + path.relative_to(src).as_posix()


def derived_deps(stage: str, graph: dict[str, set[str]], src: Path = SRC) -> list[str]:
    return sorted(module_file(m, src) for m in stage_closure(stage, graph, src))


def _stage_blocks(text: str) -> list[tuple[str, int, int]]:
    """(stage name, first line, end line) of each stage block of a dvc.yaml text."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stages:"))
    heads = [(i, m.group(1)) for i, line in enumerate(lines) if i > start and (m := re.match(r"^  (\w+):\s*$", line))]
    ends = [i for i, _ in heads[1:]] + [len(lines)]
    return [(name, i, end) for (i, name), end in zip(heads, ends)]


_SRC_DEP = re.compile(r"^(\s+)- src/clap/\S*\s*$")


def listed_deps(text: str) -> dict[str, list[str]]:
    """stage → the `src/clap/...` deps its dvc.yaml block lists."""
    lines = text.splitlines()
    return {name: [line.split("- ", 1)[1].strip() for line in lines[a:b] if _SRC_DEP.match(line)]
            for name, a, b in _stage_blocks(text)}


def rewrite(text: str, derived: dict[str, list[str]]) -> str:
    """dvc.yaml's text with each stage's `src/clap/...` deps replaced by `derived[stage]` (where the first one was,
    else first in its `deps:`), everything else — comments, order, data deps — as it was."""
    lines = text.splitlines()
    out: list[str] = []
    last = 0
    for name, a, b in _stage_blocks(text):
        out += lines[last:a]
        block = lines[a:b]
        at = [i for i, line in enumerate(block) if _SRC_DEP.match(line)]
        if at:
            first, indent = at[0], _SRC_DEP.match(block[at[0]]).group(1)
        else:
            deps_at = next((i for i, line in enumerate(block) if line.strip() == "deps:"), None)
            if deps_at is None:
                raise ValueError(f"dvc.yaml: stage {name} has no deps: list to write its code into")
            first, indent = deps_at + 1, " " * (len(block[deps_at]) - len(block[deps_at].lstrip()) + 2)
        pos = sum(1 for line in block[:first] if not _SRC_DEP.match(line))
        rest = [line for line in block if not _SRC_DEP.match(line)]
        out += rest[:pos] + [f"{indent}- {d}" for d in derived[name]] + rest[pos:]
        last = b
    out += lines[last:]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def differences(text: str, graph: dict[str, set[str]], src: Path = SRC) -> list[str]:
    """One line per (stage, module) where dvc.yaml's deps and the imports disagree (empty: they agree)."""
    problems = []
    for name, listed in listed_deps(text).items():
        want = set(derived_deps(name, graph, src))
        for f in sorted(want - set(listed)):
            problems.append(f"dvc.yaml: stage {name} runs {f} (imported) but its deps do not list it; "
                            "run `clap dvc-deps --write`")
        for f in sorted(set(listed) - want):
            problems.append(f"dvc.yaml: stage {name} lists {f} in its deps but does not import it; "
                            "run `clap dvc-deps --write`")
    return problems


# ---------------------------------------------------------------- the installed CLAP's code, pinned in a project
PINS = paths.CODE_PINS  # in a project made by `clap init`: tracked, every stage depends on its own key


def command_words(cmd: str) -> str:
    """`clap train sft --out models/sft` → `train sft`; `clap materialize ${item} …` → `materialize`."""
    words = []
    for w in cmd.split()[1:]:
        if w.startswith(("-", "$")) or "/" in w:
            break
        words.append(w)
    return " ".join(words)


def code_identity(stage: str, graph: dict[str, set[str]], src: Path = SRC) -> str:
    """A hash of the files stage `stage` runs, their paths and bytes: equal exactly when the code is."""
    import hashlib

    h = hashlib.sha256()
    for f in derived_deps(stage, graph, src):
        h.update(f.encode() + b"\0" + (src / f.removeprefix("src/clap/")).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def pin(commands: dict[str, str], src: Path = SRC) -> dict:
    """The pins of a project whose stages run `commands` (stage → command words): CLAP's version and each stage's
    code identity."""
    graph = import_graph(src)
    return {"clap": clap.__version__, "commands": dict(sorted(commands.items())),
            "stages": {s: code_identity(s, graph, src) for s in sorted(commands)}}


def stage_of(argv: list[str], commands: dict[str, str]) -> str | None:
    """The stage a `clap …` command line runs (its command words a prefix of `argv`), the longest match."""
    hits = [(len(words.split()), s) for s, words in commands.items() if words and argv[: len(words.split())] == words.split()]
    return max(hits)[1] if hits else None


def check_pinned(argv: list[str], folder: Path = Path(".")) -> None:
    """Before a stage's command does any work in a project that pins CLAP's code: the installed code of that stage
    must be the pinned one, else one line naming both and the command that re-pins."""
    path = folder / PINS
    if not path.is_file():
        return
    pins = read_json(path)
    stage = stage_of(argv, pins.get("commands", {}))
    if stage is None:
        return
    pinned = pins.get("stages", {}).get(stage)
    installed = code_identity(stage, import_graph())
    if pinned != installed:
        raise UserError(f"{path}: stage {stage} is pinned to CLAP {pins.get('clap')} code {pinned}, the installed CLAP "
                        f"{clap.__version__} runs code {installed}; run `clap upgrade` to re-pin (then `dvc status` "
                        "names the stages that will rerun), or install the pinned CLAP")
