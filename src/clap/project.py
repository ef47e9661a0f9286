"""`clap init DIR`: a new CLAP project — git and DVC initialised, `conf/`, `dvc.yaml`, `params.yaml`, `.gitignore`,
a short README — whose pipeline starts from the team's own sources (`clap ingest`) instead of the demo corpus.

    clap init my-project            # sources/docs + sources/tables → ingest → the loop
    clap init my-demo --demo        # today's demo: the generated corpus and its rounds

The pipeline and the configuration are this repository's own `dvc.yaml` and `conf/` (one definition): the
project's copy replaces the dependencies on CLAP's source files (a project has no `src/clap`) by a pin of the
installed CLAP's code per stage in `clap-code.json` (clap.codedeps; each stage depends on its own key, a stage run
under other code stops in one line, `clap upgrade` re-pins and `dvc status` then names the stages to rerun), and for own
data replaces the `demo_data` stage with `ingest`, composes `conf/ingest/default.yaml`, drops the `demo`
section and starts with one batch and the extraction track (DPO/GRPO need a decisions table; the agent track
costs an hour a round on CPU — both are one key away), every row used and SFT sized in epochs rather than the
demo's caps. Refuses a non-empty folder unless `--force`, and even then never overwrites a file nor writes through a
symlink; in an existing repository its commit holds only the files it wrote. The project starts with one commit
(bundles name the commit their evidence was made at).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import tempfile
from pathlib import Path

import yaml

from clap import paths, vcs
from clap.codedeps import PINS, command_words, pin
from clap.config import UpgradePlan, check, compose, dump, upgrade_plan
from clap.errors import UserError
from clap.io import atomic_write_text, read_json
from clap.stages import trainers
from clap.train.spec import EXTRACTION

SOURCES = Path("sources")
DOCS = SOURCES / "docs"
TABLES = SOURCES / "tables"
DVC_CONFIG = """[core]
    autostage = true
    analytics = false
    check_update = false
    remote = local
[hydra]
    enabled = true
['remote "local"']
    url = {remote}
"""  # the remote: the project's own .dvc-remote/ by its absolute path, so a clone on this machine pulls from it
GITIGNORE = """.venv/
__pycache__/
/.dvc-remote/
/data/*
!/data/.gitkeep
!/data/admission/
/models/*
!/models/.gitkeep
.dvc/config.local
.dvc/tmp
.dvc/cache
*.tmp
/mlflow.db
/mlruns/
"""
README = """# {name}

A CLAP project: your documents and tables → post-training assets → a LoRA adapter that ships only when the gate
says so.

1. Put documents in `sources/docs/` (PDF, HTML/XHTML with inline XBRL, DOCX, Markdown, text) and map any
   tables in `sources/tables/` in `conf/ingest/default.yaml` (`tables:`).
2. `dvc repro` — ingest, assetize, materialize, admit, train, evaluate, replay, gate, bundle.
3. `git add -A && git commit`, then `clap release` — tags the adapter the gate passed (`clap registry` lists them).

`data/raw/ingest_report.json` lists every document that could not be read and why.
"""


class InitError(UserError, ValueError):
    """`clap init` refused: the folder, or a file it would overwrite."""


def template_root() -> Path:
    """Where this repository's `dvc.yaml` and `conf/` are: the checkout CLAP runs from (an editable install), else
    the copy a wheel carries (`clap/_template/`, written by setup.py's build hook)."""
    here = Path(__file__).resolve()
    for root in (here.parents[2], here.parent / "_template"):
        if (root / "dvc.yaml").is_file() and (root / "conf" / "config.yaml").is_file():
            return root
    raise InitError(f"{here.parent}: CLAP's pipeline template (dvc.yaml, conf/) is in neither the checkout nor the "
                    "installed package; reinstall CLAP")


def project_pipeline(template: dict, demo: bool) -> dict:
    """The project's dvc.yaml from the repository's (pure): no `src/` dependencies; own data starts at `ingest`."""
    stages = {}
    if not demo:
        stages["ingest"] = {"cmd": f"clap ingest --out {paths.RAW.as_posix()}", "deps": [SOURCES.as_posix()],
                            "params": ["ingest", "data.batches"], "outs": [paths.RAW.as_posix()]}
    for name, stage in template["stages"].items():
        if name == "demo_data" and not demo:
            continue
        stage = copy.deepcopy(stage)  # the template stays as it is
        body = stage.get("do", stage)
        deps = [d for d in body.get("deps", []) if not str(d).startswith("src/")]
        if deps:
            body["deps"] = deps
        else:
            body.pop("deps", None)
        stages[name] = stage
    for name, stage in stages.items():  # CLAP's code: each stage depends on its own pin (clap.codedeps)
        body = stage.get("do", stage)
        body["params"] = [*body.get("params", []), {PINS.as_posix(): [f"stages.{name}"]}]
    bundle = stages["bundle"].get("do", stages["bundle"])  # the bundle pins the whole file: every stage's code
    bundle["deps"] = [*bundle.get("deps", []), PINS.as_posix()]
    return {**({"artifacts": template["artifacts"]} if "artifacts" in template else {}), "stages": stages}


def stage_commands(pipeline: dict) -> dict[str, str]:
    """stage → the `clap` command words it runs (from the pipeline's `cmd`s)."""
    return {name: command_words(stage.get("do", stage)["cmd"]) for name, stage in pipeline["stages"].items()}


def project_config(text: str) -> str:
    """conf/config.yaml for own data (pure, on the text so its comments stay): the ingest group composed, the demo
    section gone, one batch, the extraction track only, every row used and SFT sized in epochs (`clap train sft`
    prints its rows, steps and time before it runs)."""
    text = text.replace("  - gate: default\n", "  - gate: default\n  - ingest: default\n", 1)
    text = re.sub(r"\ndemo:\n(?:(?:[ #].*)?\n)*?(?=\S)", "\n", text, count=1)
    text = re.sub(r"(\ndata:\n  batches: )\[[^\]]*\]", r"\1[b1]             # one id per batch ingest finds (ingest.batch_by)",
                  text, count=1)
    # a project's own data: every row, SFT sized in epochs (the demo's caps and step count are the demo's)
    for key, comment in (("max_train_per_batch", "every train row; a number caps each batch"),
                         ("max_eval_per_batch", "every held-out row; a number caps each batch (2 models × n generations)"),
                         ("max_replay_per_batch", "every held-out fact as a replay case; a number caps each batch")):
        text = re.sub(rf"(\n  {key}: )\S+ *#.*", rf"\1null   # {comment}", text, count=1)
    text = re.sub(r"(\n  sft:\n(?:    .*\n|    #.*\n)*?    epochs: )\S+ *#.*",
                  r"\g<1>2                   # passes over the train rows (max_steps -1 reads it)", text, count=1)
    # the application's answer quotes a table line and names its chunk and document, whose ids follow the team's file
    # names: at the demo's 192 tokens answers on real report pages were cut before their JSON closed
    text = re.sub(r"(\nreplay:\n  max_new_tokens: )\S+ *#.*",
                  r"\g<1>384           # the app answer: evidence, value, unit, chunk_id, doc_id and page", text, count=1)
    # rows of up to 2,048 tokens one at a time (8 accumulated: the demo's 4 × 2 per step): four at once held 24 GB of
    # attention activations on a 2-core CPU machine and were killed
    text = re.sub(r"(\n  sft:\n(?:    .*\n|    #.*\n)*?    per_device_batch_size: )\S+.*",
                  r"\g<1>1        # rows per forward pass (memory); × gradient_accumulation = rows per step", text, count=1)
    text = re.sub(r"(\n  sft:\n(?:    .*\n|    #.*\n)*?    gradient_accumulation: )\S+.*",
                  r"\g<1>8", text, count=1)
    # a report page's application prompt holds retrieval.k chunks of up to ingest.max_chunk_chars (1,200) characters:
    # at the demo's 1,024 tokens half of the rows of real annual-report pages were set aside
    text = re.sub(r"(\n  sft:\n(?:    .*\n|    #.*\n)*?    max_length: )\S+ *#.*\n(?: +#.*\n)*",
                  r"\g<1>2048            # tokens of a conversation: 3 retrieved chunks of 1,200 characters fit;"
                  r" longer rows are set aside by name\n", text, count=1)
    text = re.sub(r"(\n  sft:\n(?:    .*\n|    #.*\n)*?    max_steps: )\S+ *#.*",
                  r"\g<1>-1              # -1: steps from epochs; a number caps the run", text, count=1)
    for key in (k for spec in trainers.chain(EXTRACTION) for k in spec.switches):  # train.dpo.enabled, …
        text = re.sub(rf"(\n  {key.split('.')[1]}:\n(?:    #.*\n)*    enabled: )true", r"\1false", text, count=1)
    text = re.sub(r"(\nagent:.*\n  enabled: )true", r"\1false", text, count=1)
    return text


def init(target: Path, demo: bool = False, force: bool = False) -> list[Path]:
    """Create the project at `target`; returns the files written."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise InitError(f"{target}: exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise InitError(f"{target}: not empty; `clap init --force` adds the project's files beside what is there "
                        "(and never overwrites one)")
    root = template_root()
    files: dict[Path, str] = {}
    for conf_file in sorted((root / "conf").rglob("*.yaml")):
        rel = conf_file.relative_to(root)
        text = conf_file.read_text(encoding="utf-8")
        if rel.parts[-2:] == ("ingest", "default.yaml") and demo:
            continue
        files[rel] = project_config(text) if rel == Path("conf/config.yaml") and not demo else text
    header = ("# The CLAP loop for this project (made by `clap init`). `dvc repro` re-runs exactly what a change touches;\n"
              "# `dvc exp run -S key=value` composes conf/ with Hydra overrides into params.yaml first.\n")
    pipeline = project_pipeline(yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8")), demo)
    files[Path("dvc.yaml")] = header + yaml.safe_dump(pipeline, sort_keys=False, allow_unicode=True, width=120)
    files[Path(".gitignore")] = GITIGNORE
    files[paths.PROD_POINTER] = json.dumps({"artifact": paths.ARTIFACT, "version": None}, indent=2) + "\n"  # no release yet
    for readme in (paths.REPAIR_FIXED / "README.md", paths.AGENT_CORRECTIONS / "README.md"):
        files[readme] = (root / readme).read_text(encoding="utf-8")
    files[paths.INBOX] = ""  # the flywheel's inbox: human-flagged and canary-failed cases
    files[paths.AGENT_HUMAN_LABELS] = ""  # people's labels on agent episodes, until `clap human import`
    files[paths.HUMAN_METRICS] = json.dumps({"imported": False}, indent=2) + "\n"  # until `clap human import`
    files[Path("README.md")] = README.format(name=target.resolve().name)
    files[PINS] = json.dumps(pin(stage_commands(pipeline)), indent=2) + "\n"  # the installed CLAP's code, per stage
    for keep in ("data/.gitkeep", "models/.gitkeep", *([] if demo else [f"{DOCS}/.gitkeep", f"{TABLES}/.gitkeep"])):
        files[Path(keep)] = ""
    _refuse_clobber(target, [*files, Path("params.yaml")])
    for rel, text in files.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        _write_new(target / rel, text)
    params = check(compose([], conf=target / "conf"), f"{target}/conf (composed)")
    _write_new(target / "params.yaml", dump(params))
    written = [*files, Path("params.yaml")]
    _vcs(target, written)
    return written


def _refuse_clobber(target: Path, rels: list[Path]) -> None:
    """Before anything is written: no file the project would write exists (a dangling symlink included), and no
    folder on its way is a symlink (a write would land outside the project)."""
    import os

    for rel in sorted(rels):
        path = target / rel
        if os.path.lexists(path):
            raise InitError(f"{path}: exists; clap init never overwrites a file (--force only lets it add its files "
                            "to a folder that is not empty)")
        for parent in [*reversed(rel.parents)][1:]:
            if (target / parent).is_symlink():
                raise InitError(f"{target / parent}: a symlink; clap init writes only inside the project folder")


def _write_new(path: Path, text: str) -> None:
    """Create `path` (never through a symlink, never over a file: O_EXCL | O_NOFOLLOW)."""
    import os

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise InitError(f"{path}: exists; clap init never overwrites a file") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _vcs(target: Path, written: list[Path]) -> None:
    """git and DVC for the project; the first commit holds the files clap init wrote and nothing else (not the
    user's edited, staged or untracked files of an existing repository)."""
    def run(*cmd: str) -> str:
        r = vcs.run(cmd[0], target, *cmd[1:])
        if r.returncode != 0:
            raise InitError(f"{target}: `{' '.join(cmd)}` failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
        return r.stdout

    own = [p.as_posix() for p in written]
    if not (target / ".git").exists():
        run("git", "init", "-q")
    if not (target / ".dvc").exists():
        run("dvc", "init", "-q")
        remote = (target / ".dvc-remote").resolve()
        remote.mkdir(exist_ok=True)
        (target / ".dvc" / "config").write_text(DVC_CONFIG.format(remote=remote), encoding="utf-8")
        own += [".dvc/config", ".dvc/.gitignore", ".dvcignore"]
    own = [p for p in own if (target / p).exists()]
    run("git", "add", "--", *own)
    # the first commit: every bundle names the commit its evidence was made at, so the project starts with one
    identity = vcs.git(target, "config", "user.email").stdout.strip()
    run("git", *([] if identity else ["-c", "user.name=clap init", "-c", "user.email=clap@localhost"]),
        "commit", "-q", "-m", "clap init: a new CLAP project", "--only", "--", *own)


def upgrade_conf(folder: Path = Path(".")) -> list[str]:
    """A project's conf/ brought to the installed CLAP's schema (`clap upgrade`): a key CLAP moved carries its value to
    the new key (`clap.config.MOVED_KEYS`), a key CLAP added comes with CLAP's default and its comment, each written
    where CLAP's own conf defines it, the rest of every file as it was (comments included); then params.yaml. A key
    no schema knows, or a value it refuses, stops before any file is written. Returns the lines to print."""
    conf = folder / "conf"
    project = compose([], conf=conf)
    template_conf = template_root() / "conf"
    plan = upgrade_plan(project, compose(_group_overrides(conf, template_conf), conf=template_conf))
    if plan.unknown or plan.invalid:
        where = (_where(conf, k.split(" ")[0]) for k in plan.unknown)
        said = [f"{w[0].relative_to(folder) if w else conf}: unknown key {k}" for k, w in zip(plan.unknown, where)]
        raise InitError("; ".join([*said, *(f"{conf}: {v}" for v in plan.invalid)])
                        + " — not something `clap upgrade` can decide: fix it by hand (docs/reference/config.md)")
    lines, texts = _edits(conf, template_conf, plan)
    with tempfile.TemporaryDirectory() as tmp:  # the edited conf composes and meets the schema before a file changes
        trial = Path(tmp) / "conf"
        shutil.copytree(conf, trial)
        for path, text in texts.items():
            (trial / path.relative_to(conf)).write_text(text, encoding="utf-8")
        params = check(compose([], conf=trial), f"{conf} (composed after the upgrade's edits)")
    for path, text in texts.items():
        atomic_write_text(path, text)
    atomic_write_text(folder / "params.yaml", dump(params))
    return [*lines, "params.yaml: written from conf/"]


def _group_overrides(conf: Path, template_conf: Path) -> list[str]:
    """Hydra overrides that compose CLAP's conf with the project's group choices (`ingest: default`, `model: …`)."""
    ours = {g for g, _ in _defaults(template_conf)}
    return [f"{'' if g in ours else '+'}{g}={option}" for g, option in _defaults(conf)]


def _entries(conf: Path) -> list:
    """conf/config.yaml's `defaults` list as written (`_self_` and {group: option} entries, in order)."""
    return (yaml.safe_load((conf / "config.yaml").read_text(encoding="utf-8")) or {}).get("defaults", [])


def _defaults(conf: Path) -> list[tuple[str, str]]:
    """(group, option) of conf/config.yaml's `defaults`, in order (`_self_` left out)."""
    return [next(iter(e.items())) for e in _entries(conf) if isinstance(e, dict)]


def _files(conf: Path) -> list[tuple[Path, tuple[str, ...]]]:
    """The files the composition reads, in its order, each with the key path its top level sits at."""
    out, self_at = [], None
    for e in _entries(conf):
        if e == "_self_":
            self_at = len(out)
        elif isinstance(e, dict):
            group, option = next(iter(e.items()))
            path = conf / group / f"{option}.yaml"
            if path.is_file():
                global_ = "@package _global_" in path.read_text(encoding="utf-8").split("\n", 1)[0]
                out.append((path, () if global_ else (group,)))
    out.insert(len(out) if self_at is None else self_at, (conf / "config.yaml", ()))
    return out


def _where(conf: Path, key: str) -> tuple[Path, list[str]] | None:
    """The file that gives `key` its value (the last in the composition's order that has it) and the path in it."""
    parts, found = key.split("."), None
    for path, prefix in _files(conf):
        if tuple(parts[:len(prefix)]) != prefix:
            continue
        tree, rest = yaml.safe_load(path.read_text(encoding="utf-8")) or {}, parts[len(prefix):]
        for p in rest:
            tree = tree.get(p) if isinstance(tree, dict) else None
            if tree is None:
                break
        else:
            found = (path, rest)
    return found


def _edits(conf: Path, template_conf: Path, plan: UpgradePlan) -> tuple[list[str], dict[Path, str]]:
    """The plan's moves and adds as new texts of the project's files (nothing written): each key's line (and its
    comment lines) taken out or put in, every other line as it was; with the lines to print."""
    texts: dict[Path, list[str]] = {}

    def lines_of(path: Path) -> list[str]:
        return texts.setdefault(path, path.read_text(encoding="utf-8").splitlines())

    out = []
    for old, new, value in plan.moves:
        path, parts = _where(conf, old)
        start, end = _block(lines_of(path), parts)
        del lines_of(path)[start:end]
        target, at = _target(conf, template_conf, new)
        _insert(lines_of(target), at, value, [*_comment(template_conf, new), f"(moved here from {old} by clap upgrade)"])
        out.append(f"{target.relative_to(conf.parent)}: {old} → {new} (moved by CLAP; the value kept: {value!r})")
    for key, value in plan.adds:
        target, at = _target(conf, template_conf, key)
        _insert(lines_of(target), at, value, [*_comment(template_conf, key), "(added by clap upgrade)"])
        out.append(f"{target.relative_to(conf.parent)}: {key} = {value!r} (new in CLAP; its default)")
    return out, {path: "\n".join(lines) + "\n" for path, lines in texts.items()}


def _target(conf: Path, template_conf: Path, key: str) -> tuple[Path, list[str]]:
    """Where a key goes in the project: the file and path where CLAP's own conf defines it (config.yaml else)."""
    found = _where(template_conf, key)
    if found and (conf / found[0].relative_to(template_conf)).is_file():
        return conf / found[0].relative_to(template_conf), found[1]
    return conf / "config.yaml", key.split(".")


_KEY_LINE = re.compile(r"^( *)([A-Za-z0-9_-]+):(?: |$)")


def _block(lines: list[str], parts: list[str]) -> tuple[int, int]:
    """The lines of `parts`' key in a YAML text written one key a line (pure): its own line, its comment lines and
    its children, not the blank lines after it; (len, len) when it is not there."""
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        m = _KEY_LINE.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        if [k for _, k in stack] == parts:
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
                end += 1
            while end > i + 1 and not lines[end - 1].strip():
                end -= 1
            return i, end
    return len(lines), len(lines)


def _insert(lines: list[str], parts: list[str], value, comment: list[str]) -> None:
    """`value` as the last key of `parts`' parent mapping (a new section at the end when there is none), with the
    `comment` lines beside it, in the file's comment column."""
    parents, indent, at = parts[:-1], 0, len(lines)
    while parents:
        start, end = _block(lines, parents)
        if start < len(lines):
            key_text, _, rest = lines[start].partition(":")
            inline = rest.split(" #", 1)[0].strip()
            if inline:  # the parent is written in flow style (`weights: {a: 1}`): rewrite that one line with the key
                merged = {**(yaml.safe_load(inline) or {}), **_nested(parts[len(parents):], value)}
                head = f"{key_text}: {_flow(merged)}"
                lines[start] = f"{head:<32}# {comment[-1]}" if len(head) < 32 else f"{head}  # {comment[-1]}"
                return
            indent, at = len(lines[start]) - len(lines[start].lstrip()) + 2, end
            break
        parts, parents = [parents[-1], *parts[len(parents):]], parents[:-1]  # the parent is missing too: write it
    new = [" " * indent + line for line in _render(parts[len(parents):], value)]
    head, column = new[0], max(32, len(new[0]) + 2)
    new[0:1] = [f"{head:<{column}}# {comment[0]}", *(f"{'':<{column}}# {c}" for c in comment[1:])]
    if not parents and at == len(lines) and lines and lines[-1].strip():
        new.insert(0, "")
    lines[at:at] = new


def _nested(parts: list[str], value) -> dict:
    for p in reversed(parts):
        value = {p: value}
    return value


def _render(parts: list[str], value) -> list[str]:
    """`value` at the key path `parts` as conf/ writes YAML (pure): a mapping per line, a leaf's list or mapping of
    scalars in flow style (`batches: [b1]`)."""
    if len(parts) > 1:
        return [f"{parts[0]}:", *("  " + line for line in _render(parts[1:], value))]
    if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
        return [f"{parts[0]}:", *("  " + line for k, v in value.items() for line in _render([k], v))]
    return [f"{parts[0]}: {_flow(value)}"]


def _flow(value) -> str:
    """`value` in YAML's flow style, on one line, its keys in their order (`{a: 1, b: [x]}`)."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def _comment(template_conf: Path, key: str) -> list[str]:
    """The comment lines CLAP's conf writes beside `key`, without their `#` ([] if none)."""
    found = _where(template_conf, key)
    if not found:
        return []
    lines = found[0].read_text(encoding="utf-8").splitlines()
    start, end = _block(lines, found[1])
    own = [lines[start].split(" #", 1)[1]] if start < len(lines) and " #" in lines[start] else []
    own += [line.strip()[1:] for line in lines[start + 1:end] if line.strip().startswith("#")]
    return [c.strip() for c in own]


def upgrade(folder: Path = Path(".")) -> dict[str, tuple[str | None, str]]:
    """Re-pin the installed CLAP's code in a project (`clap upgrade`); returns the stages whose pin changed (old, new)."""
    path = folder / PINS
    if not path.is_file():
        raise InitError(f"{path}: no such file; `clap upgrade` re-pins CLAP's code in a project made by `clap init`")
    old = read_json(path)
    new = pin(old["commands"])
    path.write_text(json.dumps(new, indent=2) + "\n", encoding="utf-8")
    return {s: (old["stages"].get(s), code) for s, code in new["stages"].items() if old["stages"].get(s) != code}
