"""Evaluation commands: the extraction holdout, the decision chain and the ABCD replay — each registered from its
stage's spec (`clap.stages.registry`), whose `main` does the command's work — and the report."""

from __future__ import annotations

from pathlib import Path

import typer

from clap.cli.common import _params, app, console, register
from clap.evaluate.report import write_reports
from clap.stages import registry, trainers

for spec in registry.group("evaluate"):
    register(spec)


@app.command()
def report(base: str = typer.Option(None, help="git revision to diff metrics against (default: HEAD)"),
           out: Path = typer.Option(Path("reports"))) -> None:
    """Write reports/report.md (for the pull request) and reports/report.html (with plots)."""
    md, page = write_reports(Path("."), out, _params().data.batches, base, trainers.curves())
    console.print(f"report → {md}, {page}")
