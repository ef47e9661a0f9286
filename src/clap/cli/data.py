"""Data commands: ingest, assetize, materialize, admit, the retrieval index, the repair queue."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from clap import paths
from clap.cli.common import _need, _params, app, console
from clap.config import ConfigError
from clap.data.engine import ENGINES
from clap.data.repair import PRODUCTION_SOURCES
from clap.stages import admit as admit_stage
from clap.stages import assetize as assetize_stage
from clap.stages import index as index_stage
from clap.stages import ingest as stage
from clap.stages import materialize as materialize_stage
from clap.stages import repair_queue as repair_queue_stage


@app.command()
def ingest(docs: Path = typer.Option(None, help="folder of documents (default: ingest.docs in params.yaml)"),
           out: Path = typer.Option(paths.RAW)) -> None:
    """Your documents and mapped tables into the raw contract: chunks, facts (inline XBRL, tables), decisions."""
    params = _params()
    if params.ingest is None:
        raise ConfigError("params.yaml: no ingest section; a project made by `clap init` has conf/ingest/default.yaml")
    section = params.ingest
    report = stage.run(section, Path(docs or section.docs), out, list(params.data.batches))
    d = report["documents"]
    console.print(f"documents {d['seen']}: ingested {d['ingested']} ({', '.join(f'{v} {k}' for k, v in d['by_format'].items())}"
                  f"; {d['pages']} pages, {d['ixbrl']} inline XBRL), not readable {len(d['bad'])}, skipped "
                  f"{sum(d['skipped'].values())}{' (' + ', '.join(f'{k}={v}' for k, v in d['skipped'].items()) + ')' if d['skipped'] else ''}")
    for bad in d["bad"]:
        console.print(f"  [bold yellow]{escape(bad['file'])}[/]: {bad['reason']} ({escape(bad['detail'])})")
    for note in d["notes"]:
        console.print(f"  [bold yellow]{escape(note['file'])}[/]: {escape(note['note'])}")
    for t in report["tables"]:
        console.print(f"table {t['path']} → {t['kind']}: rows {t.get('rows', 0)}, mapped {t.get('mapped', 0)}, "
                      f"quarantined {t.get('quarantined', 0)}")
    w = report["written"]
    console.print(f"→ {out}: {w['chunks']} chunks, {w['facts']} facts ({report['ixbrl_facts']} inline XBRL), "
                  f"{w['decisions']} decisions; {report['quarantined']} quarantined "
                  f"({', '.join(f'{k}={v}' for k, v in report['quarantine_rules'].items()) or 'none'})")
    for batch in report["empty_batches"]:
        console.print(f"[bold yellow]warning:[/] batch {batch} of data.batches has no rows")


@app.command()
def assetize(raw: Path = typer.Option(paths.RAW), out: Path = typer.Option(paths.ASSETS),
             repaired: Path = typer.Option(None, help="folder (or file) of repaired fact rows from the repair queue"),
             engine: str = typer.Option(None, help="local | ray (default: assetize.engine in params.yaml)")) -> None:
    """Validate and normalise raw inputs into assets, streaming; quarantine what cannot be used."""
    if engine is not None and engine not in ENGINES:
        raise typer.BadParameter(f"{engine!r}: choose from {', '.join(ENGINES)}", param_hint="--engine")
    report = assetize_stage.run(_params().assetize, raw, out, repaired, engine)
    for name, e in report["inputs"].items():
        console.print(f"{name:10s} rows in {e['rows_in']:6d}  kept {e['kept']:6d}  quarantined {e['quarantined']:5d}")
    console.print(f"facts verifiable {report['verifiable_facts']}, unverifiable {report['unverifiable_facts']}; "
                  f"{report['units']} unit(s) of work")
    if "repaired_rows_in" in report:
        console.print(f"repaired rows in {report['repaired_rows_in']}, now verifiable {report['repaired_rows_verifiable']}")
    console.print("noise found/fixed: " + ", ".join(f"{k}={v}" for k, v in report["noise"].items() if v))
    console.print("rows per batch: " + ", ".join(f"{k!r}={v}" for k, v in report["batches"]["rows"].items()))
    for w in report["batches"]["warnings"]:
        console.print(f"[bold yellow]warning:[/] {escape(w)}")


@app.command()
def materialize(batch: str, assets: Path = typer.Option(paths.ASSETS),
                out: Path = typer.Option(None)) -> None:
    """Build one batch's SFT/holdout/DPO/GRPO/replay sets and its data-quality report."""
    cfg = _params()
    q = materialize_stage.run(cfg.materialize, assets, batch, out or paths.MATERIALIZED / batch, rewards=cfg.rewards,
                  retrieval_k=cfg.retrieval.k)
    console.print(f"{batch}: train {q['train_size']}, holdout {q['holdout_size']}, replay {q['replay_cases']}, "
                  f"dpo {q['dpo_pairs']}, grpo {q['grpo_groups']}, repair {q['repair_queue']}; overlap before "
                  f"{q['before']['exact_input_overlap']}/{q['before']['near_duplicate_overlap']} after "
                  f"{q['after']['exact_input_overlap']}/{q['after']['near_duplicate_overlap']} (exact/near)")


@app.command()
def admit(batch: str, materialized: Path = typer.Option(paths.MATERIALIZED),
          out: Path = typer.Option(None)) -> None:
    """Admission gate for one batch: admit / sft_only / repair / block, with every check."""
    rec = admit_stage.run(_params().admit, materialized / batch, out or paths.admission(batch))
    console.print(f"{batch}: {rec.decision}" + (f" ({'; '.join(rec.reasons)})" if rec.reasons else ""))


@app.command()
def index(assets: Path = typer.Option(paths.ASSETS),
          materialized: Path = typer.Option(paths.MATERIALIZED),
          out: Path = typer.Option(paths.INDEX)) -> None:
    """Build the retrieval index over all chunks; report recall@k of the gold chunk per batch."""
    cfg = _params()
    _need((assets, "dvc repro assetize"), *[(materialized / b, f"dvc repro materialize@{b}") for b in cfg.data.batches])
    for b, r in index_stage.run(cfg.retrieval, assets, materialized, out, cfg.data.batches).items():
        console.print(f"{b}: " + ", ".join(f"{k}={v}" for k, v in r.items()))


@app.command("repair-queue")
def repair_queue(out: Path = typer.Option(paths.REPAIR_QUEUE)) -> None:
    """Collect quarantined, unverifiable, regressed and failed items into the repair queue."""
    counts = repair_queue_stage.run(Path("."), out)
    console.print(f"repair queue → {out}: " + (", ".join(f"{k}={v}" for k, v in counts.items()) or "empty"))
    from_production = sum(counts.get(s, 0) for s in PRODUCTION_SOURCES)
    console.print(f"from production (human-flagged answers, failed canary requests): {from_production}")
