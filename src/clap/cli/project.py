"""Project commands: `clap init`, `clap params`, `clap exp`, `clap reference`, `clap dvc-deps`, `clap dag`."""

from __future__ import annotations

from pathlib import Path

import typer

from clap import vcs
from clap.cli.common import _fail, app, console
from clap.codedeps import derived_deps, differences, import_graph, listed_deps, rewrite
from clap.config import check as check_params
from clap.config import compose, dump, load
from clap.dag import TRACKS, layout, mermaid, pipeline_edges
from clap.dag import text as dag_text
from clap.errors import UserError
from clap.io import atomic_write_text
from clap.project import DOCS, upgrade_conf
from clap.project import init as make
from clap.project import upgrade as re_pin
from clap.reference import PAGES, render


@app.command()
def upgrade() -> None:
    """Bring this project to the installed CLAP: its conf/ to CLAP's schema (a moved key keeps its value, a new key
    comes with CLAP's default; params.yaml rewritten), and CLAP's code re-pinned (clap-code.json); `dvc status` then
    names the stages to rerun."""
    for line in upgrade_conf():
        console.print(line, highlight=False, soft_wrap=True)
    changed = re_pin()
    for stage, (old, new) in changed.items():
        console.print(f"{stage}: {old} → {new}")
    console.print(f"clap-code.json: {len(changed)} stage(s) re-pinned" + ("; `dvc status` names what reruns" if changed
                                                                          else " (the installed code is the pinned one)"))


@app.command()
def dag(track: str = typer.Option("extraction", help=" | ".join(TRACKS)),
        md: bool = typer.Option(False, "--md", help="a Mermaid flowchart instead of one line a stage")) -> None:
    """The pipeline one track at a time: each stage after the stages it reads from, a batch's copies as one
    (`materialize@*`). `dvc dag` draws every stage side by side; this is the view a terminal can hold."""
    if track not in TRACKS:
        _fail(ValueError(f"--track {track!r}: use {', '.join(TRACKS)}"))
    rows = layout(pipeline_edges(Path(".")), track)
    console.print(mermaid(rows) if md else dag_text(rows), soft_wrap=True, markup=False, highlight=False)


@app.command("dvc-deps")
def dvc_deps(write: bool = typer.Option(False, help="rewrite each stage's src/clap deps in dvc.yaml from its imports"),
             pipeline: Path = typer.Option(Path("dvc.yaml"), help="the pipeline file")) -> None:
    """Each stage's code deps from the imports of the code it runs (clap.codedeps): check, or --write them."""
    if not pipeline.is_file():
        raise UserError(f"{pipeline}: no such file (run it in CLAP's repository)")
    text, graph = pipeline.read_text(encoding="utf-8"), import_graph()
    if write:
        new = rewrite(text, {name: derived_deps(name, graph) for name in listed_deps(text)})
        pipeline.write_text(new, encoding="utf-8")
        console.print(f"{pipeline}: each stage's code deps written from its imports")
        return
    problems = differences(text, graph)
    for line in problems:
        console.print(line, highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)
    console.print(f"{pipeline}: every stage's code deps match its imports")


@app.command()
def reference(out: Path = typer.Option(Path("docs/reference"), help="folder of the generated pages"),
              check: bool = typer.Option(False, help="fail when a page differs from what the code generates")) -> None:
    """Reference pages generated from the code (the raw contract from its Pandera models)."""
    for name in PAGES:
        text, path = render(name, typer.main.get_command(app)), out / name
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                raise UserError(f"{path}: stale; run `clap reference` and commit it")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        console.print(f"{path}: written from the code")


@app.command()
def init(directory: Path = typer.Argument(..., help="the new project's folder"),
         demo: bool = typer.Option(False, help="the demo's pipeline (generated corpus, three rounds) instead of ingest"),
         force: bool = typer.Option(False, help="add the project's files to a non-empty folder (never overwrites one)"),
         ) -> None:
    """A new CLAP project: git + DVC, conf/, dvc.yaml, params.yaml; its pipeline starts from your sources."""
    written = make(directory, demo=demo, force=force)
    console.print(f"CLAP project → {directory} ({len(written)} files; git and DVC initialised)")
    if demo:
        console.print(f"next: cd {directory} && dvc repro    (or clap demo: the three rounds)")
    else:
        console.print(f"next: cd {directory}; put documents in {DOCS}/ (tables: conf/ingest/default.yaml); "
                      "dvc repro; clap release")


@app.command()
def params(check: bool = typer.Option(False, help="fail when params.yaml differs from ./conf or breaks the schema"),
           override: list[str] = typer.Option(None, "--set", "-S", help="Hydra override, e.g. train.sft.epochs=3")) -> None:
    """Compose ./conf into params.yaml (what DVC's Hydra integration does for `dvc exp run`), checked by the schema."""
    composed = check_params(compose(override or []), "conf/ (composed)")
    text = dump(composed)
    if check:
        load(Path("params.yaml"))
        if Path("params.yaml").read_text(encoding="utf-8") != text:
            _fail(ValueError("params.yaml differs from the composition of conf/: run `clap params`"))
        console.print("params.yaml: matches conf/ and the schema")
        return

    atomic_write_text(Path("params.yaml"), text)


@app.command("exp", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exp(ctx: typer.Context,
        override: list[str] = typer.Option(None, "--set-param", "-S", help="Hydra override, e.g. train.sft.epochs=3")) -> None:
    """`dvc exp run … -S k=v` with the overrides composed and checked first: an invalid value is never queued.

        clap exp run --queue -S train.sft.learning_rate=1e-4
    """
    args = list(ctx.args)
    if not args or args[0] != "run":
        _fail(ValueError("usage: clap exp run [dvc exp run options] -S key=value ..."))
    check_params(compose(override or []), f"overrides {' '.join(override or [])}")
    raise typer.Exit(vcs.dvc(None, "exp", *args, *(a for o in override or [] for a in ("-S", o)), capture=False).returncode)
