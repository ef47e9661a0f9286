"""The `clap` command: one sub-command per stage, each a thin wrapper around `stages/<name>.run`.

    clap --help
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402
from rich.console import Console  # noqa: E402

from clap.io import InputFileError  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(code=2)


@app.command("demo-data")
def demo_data(out: Path = typer.Option(Path("data/raw")), seed: int = 7, scale: float = 1.0) -> None:
    """Write the deterministic demo corpus (chunks, facts, decisions) to OUT."""
    from clap import demo_data as dd

    counts = dd.write(out, seed=seed, scale=scale)
    console.print(f"demo corpus → {out}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))


@app.command()
def assetize(raw: Path = typer.Option(Path("data/raw")), out: Path = typer.Option(Path("data/assets")),
             repaired: Path = typer.Option(None, help="repaired rows from the repair queue")) -> None:
    """Validate and normalise raw inputs into assets; quarantine what cannot be used."""
    from clap.stages import assetize as stage

    try:
        report = stage.run(raw, out, repaired)
    except (InputFileError, ValueError) as exc:
        _fail(exc)
    for name, e in report["inputs"].items():
        console.print(f"{name:10s} rows in {e['rows_in']:6d}  kept {e['kept']:6d}  quarantined {e['quarantined']:5d}")
    console.print(f"facts verifiable {report['verifiable_facts']}, unverifiable {report['unverifiable_facts']}")
    console.print("noise found/fixed: " + ", ".join(f"{k}={v}" for k, v in report["noise"].items() if v))


def _params() -> dict:
    from clap.config import load

    return load(Path("params.yaml"))


@app.command()
def params(check: bool = typer.Option(False, help="fail when params.yaml differs from conf/")) -> None:
    """Compose conf/ into params.yaml (what DVC's Hydra integration does for `dvc exp run`)."""
    from clap.config import compose, dump

    text = dump(compose())
    if check:
        if Path("params.yaml").read_text(encoding="utf-8") != text:
            _fail(ValueError("params.yaml differs from the composition of conf/: run `clap params`"))
        return
    Path("params.yaml").write_text(text, encoding="utf-8")


@app.command()
def materialize(batch: str, assets: Path = typer.Option(Path("data/assets")),
                out: Path = typer.Option(None)) -> None:
    """Build one batch's SFT/holdout/DPO/GRPO/replay sets and its data-quality report."""
    from clap.stages import materialize as stage

    q = stage.run(_params(), assets, batch, out or Path("data/materialized") / batch)
    console.print(f"{batch}: train {q['train_size']}, holdout {q['holdout_size']}, replay {q['replay_cases']}, "
                  f"dpo {q['dpo_pairs']}, grpo {q['grpo_groups']}, repair {q['repair_queue']}; overlap before "
                  f"{q['before']['exact_input_overlap']}/{q['before']['near_duplicate_overlap']} after "
                  f"{q['after']['exact_input_overlap']}/{q['after']['near_duplicate_overlap']} (exact/near)")


@app.command()
def demo() -> None:
    """Run the whole loop on the demo corpus (`dvc repro`), then print what it decided and why."""
    import subprocess

    from clap import summary

    if subprocess.run(["dvc", "repro"]).returncode != 0:
        _fail(RuntimeError("dvc repro failed (see the stage output above)"))
    summary.print_summary(console, Path("."))


if __name__ == "__main__":
    app()
