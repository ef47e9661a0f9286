"""What every `clap` command shares: the environment it runs in, the console, the application and its groups,
one-line errors, the parameters, the registration of a stage's command from its spec."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

# Subprocesses (dvc, and the `clap …` commands of dvc.yaml's stages) must resolve to this environment
# even when it is not activated, e.g. `.venv/bin/clap demo` from the Makefile.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

import clap
from clap import vcs
from clap.codedeps import check_pinned
from clap.config import Params, load
from clap.errors import UserError  # noqa: E402
from clap.io import require_inputs
from clap.stages.spec import StageSpec

console = Console(width=max(140, Console().width))  # tables stay readable in logs and CI


def _need(*needed: tuple[Path, str]) -> None:
    """The command's inputs, checked before its work (`clap.io.require_inputs`): one line naming the first missing
    path and the command that makes it."""
    require_inputs(list(needed))


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(code=2)


class _UserErrorsInOneLine(TyperGroup):
    """Every sub-command: a mistake the user can fix (`UserError`) is one line and exit 2, no traceback."""

    def invoke(self, ctx):
        try:
            check_pinned(sys.argv[1:])  # in a project pinning CLAP's code: a stage never runs under other code
            return super().invoke(ctx)
        except UserError as exc:
            _fail(exc)


def register(spec: StageSpec, group: typer.Typer | None = None) -> None:
    """`spec`'s command on `group` (the `clap` app): its arguments parsed as the spec declares them, then
    `params.yaml` loaded, the stage's `main` called and its lines printed — all a stage's command does."""
    def command(**arguments) -> None:
        for line in spec.main(_params(), **arguments):
            _say(line)

    def parameter(a) -> inspect.Parameter:
        default = typer.Argument(a.default, help=a.help) if a.positional else typer.Option(a.default, a.flag, help=a.help)
        return inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=a.kind)

    command.__signature__ = inspect.Signature([parameter(a) for a in spec.args])
    command.__doc__ = spec.help
    command.__name__ = spec.name
    (group or app).command(spec.command)(command)


def _say(line) -> None:
    """One line of a stage's output; `warning: …` marked as a warning. What a line quotes (a file name, a cell) is
    printed as written, never read as markup; a rich table is printed as a table."""
    if not isinstance(line, str):
        return console.print(line)
    if line.startswith("warning: "):
        return console.print("[bold yellow]warning:[/] " + escape(line.removeprefix("warning: ")))
    console.print(escape(line))


def _params() -> Params:
    return load(Path("params.yaml"))


app = typer.Typer(cls=_UserErrorsInOneLine, add_completion=False, no_args_is_help=True,
                  help="The `clap` command: one sub-command per stage, each a thin wrapper around `stages/<name>.run`.")
human_app = typer.Typer(no_args_is_help=True, help="Human evaluation round trip through Label Studio.")
canary_app = typer.Typer(no_args_is_help=True, help="The canary: serve, replay traffic, analyse, conclude.")


DISTRIBUTION = "clap-loop"  # the name on PyPI (`pip install clap-loop`); the command and the import package are `clap`


def version_text() -> str:
    """`clap --version`: the installed version, and the commit it was built from — the checkout CLAP runs from
    (an editable install), or the commit pip recorded when it installed from git (PEP 610's direct_url.json)."""
    import json
    from importlib import metadata

    here = Path(clap.__file__).resolve().parents[2]
    commit = ""
    if (here / ".git").exists():
        r = vcs.git(here, "describe", "--always", "--dirty", "--abbrev=12")
        commit = r.stdout.strip() if r.returncode == 0 else ""
    else:
        try:
            direct = json.loads(metadata.distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
        except (metadata.PackageNotFoundError, ValueError):
            direct = {}
        commit = (direct.get("vcs_info") or {}).get("commit_id", "")[:12]
    return f"clap {clap.__version__}" + (f" (commit {commit})" if commit else "")


def _print_version(value: bool) -> None:
    if value:
        console.print(version_text(), highlight=False)
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="the installed version (and the commit, from a git checkout)")) -> None:
    """The `clap` command: one sub-command per stage, each a thin wrapper around `stages/<name>.run`."""


app.add_typer(human_app, name="human")
app.add_typer(canary_app, name="canary")
