"""Release control: prod's adapter, the gate and the bundle (registered from their stages' specs,
`clap.stages.registry`), verify, release, rollback, registry, timeline. Serving and export are `clap.cli.serve`'s."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from clap import paths
from clap.cli.common import app, console, register
from clap.release import registry as rel
from clap.release import timeline as tl
from clap.release.bundle import BundleMismatch
from clap.release.bundle import verify as do_verify
from clap.stages import registry as stages

for spec in stages.group("release"):  # prod-adapter, gate, bundle
    register(spec)


@app.command()
def verify(path: Path = typer.Argument(paths.BUNDLE)) -> None:
    """Recompute every hash in a bundle; exit 1 naming the first file that differs."""
    try:
        b = do_verify(path, Path("."))
    except BundleMismatch as exc:
        console.print(f"[bold red]verify failed:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(code=1) from None
    console.print(f"{path}: {len(b.files)} files verified")


@app.command()
def release() -> None:
    """Tag the committed candidate (GTO format) when the gate allows it and the bundle verifies."""
    try:
        r = rel.release(Path("."))
    except rel.ReleaseRefused as exc:
        console.print(f"[bold yellow]release refused:[/] {exc}")
        raise typer.Exit(code=1) from None
    console.print(f"released {r['version']} to {r['stage']} ({r['tag']} on {r['commit'][:10]})")
    console.print(f"{paths.PROD_POINTER} now names the version in prod: commit it, and the next `dvc repro` "
                  "judges candidates against it")


@app.command()
def rollback(to: str = typer.Option(None, help="version to restore, e.g. v0.0.1; default: the previous prod; "
                                               "`base`: withdraw prod, the base model serves")) -> None:
    """Assign prod to an earlier version and restore its adapter and data byte-identically; `--to base` withdraws
    prod (GTO unassign tags), so the base model serves."""
    try:
        r = rel.rollback(Path("."), to)
    except rel.ReleaseRefused as exc:
        console.print(f"[bold red]rollback refused:[/] {exc}")
        raise typer.Exit(code=1) from None
    if r["to"] == rel.BASE:
        console.print(f"prod: {r['from']} → the base model ({', '.join(r['tags'])}); {paths.PROD_POINTER} names no "
                      "version: commit it, and `dvc repro` judges candidates against the base model")
    else:
        console.print(f"prod: {r['from']} → {r['to']} ({r['tag']}); artifacts restored and verified")


@app.command()
def registry(sync: bool = typer.Option(False, help=f"rewrite {paths.PROD_POINTER} from the tags (after `gto assign`)")) -> None:
    """List adapter versions and their stage assignments (git tags in GTO's format)."""
    if sync:
        ptr = rel.write_prod_pointer(Path("."))
        console.print(f"{paths.PROD_POINTER}: prod = {ptr['version']}")
    rows = rel.registry(Path("."))
    for row in rows:
        console.print(f"{row['version']}  {row['commit']}  current={','.join(row['current']) or '-'}  "
                      f"{' '.join(row['assignments'])}")
    if not rows:
        console.print(f"no versions of {paths.ARTIFACT} yet: `clap release` tags the first one the gate passes")


@app.command()
def timeline(since: str = typer.Option(None, help="only the rounds committed after this revision")) -> None:
    """The loop round by round from the committed evidence: data, refusals, Δ vs prod, decision, tags."""
    console.print(tl.table(tl.rounds(Path("."), since)))
