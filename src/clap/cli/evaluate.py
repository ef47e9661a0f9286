"""Evaluation commands: the extraction holdout, the decision chain, the ABCD replay, the report."""

from __future__ import annotations

from pathlib import Path

import typer

from clap import paths
from clap.cli.common import _engine, _need, _params, _prod, _say_reused, app, console
from clap.evaluate.engines import chain_engine
from clap.evaluate.intervals import ci_bounds
from clap.evaluate.report import write_reports
from clap.evaluate.summary import abcd_table, contrast_lines, decision_table
from clap.stages import evaluate_decisions as evaluate_decisions_stage
from clap.stages import trainers
from clap.train.spec import EXTRACTION


@app.command()
def evaluate(batch: str, adapter: Path = typer.Option(paths.adapter("sft")),
             prod: Path = typer.Option(None, help="restored prod adapter folder (clap prod-adapter); baseline = base if absent"),
             materialized: Path = typer.Option(paths.MATERIALIZED),
             out: Path = typer.Option(None), metrics: Path = typer.Option(paths.EVAL_METRICS)) -> None:
    """Candidate vs prod and vs base on one batch's holdout: records, metrics, deltas with CIs, regressions."""
    from clap.stages import evaluate as evaluate_stage

    cfg = _params()
    _need((materialized / batch / "sft_eval.jsonl", f"dvc repro materialize@{batch}"), (adapter, "dvc repro train_sft"))
    engine = _engine(cfg, adapter, prod)
    r = evaluate_stage.run(cfg.evaluate, materialized / batch / "sft_eval.jsonl", engine, out or paths.EVAL / batch, batch,
                  metrics / f"{batch}.json", constrained=cfg.generate.constrained)
    _say_reused(engine)
    d = r["deltas"]["overall_score"]
    console.print(f"{batch}: overall base {r['metrics']['baseline']['overall_score']:.4f} → candidate "
                  f"{r['metrics']['candidate']['overall_score']:.4f} (Δ {d['delta']:+.4f}, "
                  f"CI {ci_bounds(d, digits=4)}), regressed samples {r['regressed']}")
    if "deltas_vs_prod" in r:
        p = r["deltas_vs_prod"]["overall_score"]
        console.print(f"{batch}: vs prod {r['metrics']['prod']['overall_score']:.4f}: Δ {p['delta']:+.4f} "
                      f"CI {ci_bounds(p, digits=4)}")


@app.command("evaluate-decisions")
def evaluate_decisions(prod: Path = typer.Option(None, help="restored prod adapter folder (clap prod-adapter)"),
                       materialized: Path = typer.Option(paths.MATERIALIZED),
                       out: Path = typer.Option(paths.EVAL_DECISIONS),
                       metrics: Path = typer.Option(paths.DECISION_METRICS)) -> None:
    """The decision task on held-out cases: base, prod, SFT, SFT→DPO, SFT→GRPO, with deltas and CIs."""
    cfg = _params()
    steps = trainers.switched_on(EXTRACTION, cfg)
    _need(*[(materialized / b / f, f"dvc repro materialize@{b}") for b in cfg.data.batches
            for f in ("decision_eval.jsonl", "sft_eval.jsonl")],
          *[(paths.EVAL / b / "records.jsonl", f"dvc repro evaluate@{b}") for b in cfg.data.batches],
          *[(paths.adapter(s), f"dvc repro train_{s}") for s in steps])
    prod_dir, prod_expected = _prod(prod)
    engine = chain_engine(cfg.generate, cfg.model, steps, prod_dir, prod_expected)
    models = ["base"] + (["prod"] if prod_dir else []) + steps
    result = evaluate_decisions_stage.run(cfg.evaluate_decisions, {b: materialized / b / "decision_eval.jsonl" for b in cfg.data.batches},
                       engine, models, out, metrics,
                       {b: (materialized / b / "sft_eval.jsonl", paths.EVAL / b / "records.jsonl")
                        for b in cfg.data.batches},
                       evaluate=cfg.evaluate, rewards=cfg.rewards, constrained=cfg.generate.constrained)
    _say_reused(engine)
    console.print(decision_table(result))


@app.command()
def replay(adapter: Path = typer.Option(paths.adapter("sft")),
           prod: Path = typer.Option(None, help="restored prod adapter folder (clap prod-adapter): adds arm P, prod + RAG"),
           assets: Path = typer.Option(paths.ASSETS),
           materialized: Path = typer.Option(paths.MATERIALIZED),
           index_dir: Path = typer.Option(paths.INDEX), out: Path = typer.Option(paths.REPLAY),
           metrics: Path = typer.Option(paths.REPLAY_METRICS)) -> None:
    """The ABCD application-chain replay: base/adapter × with/without retrieval (and prod + RAG when in prod)."""
    from clap.stages import replay as replay_stage

    cfg = _params()
    _need((assets, "dvc repro assetize"), (index_dir, "dvc repro index"), (adapter, "dvc repro train_sft"),
          *[(materialized / b, f"dvc repro materialize@{b}") for b in cfg.data.batches])
    engine = _engine(cfg, adapter, prod)
    result = replay_stage.run(cfg.replay, assets, materialized, index_dir, engine, out, metrics, retrieval=cfg.retrieval,
                       evaluate=cfg.evaluate, batches=cfg.data.batches, constrained=cfg.generate.constrained)
    _say_reused(engine)
    console.print(abcd_table(result["arms"]))
    for name, line in contrast_lines(result).items():
        console.print(f"{name}: {line}")


@app.command()
def report(base: str = typer.Option(None, help="git revision to diff metrics against (default: HEAD)"),
           out: Path = typer.Option(Path("reports"))) -> None:
    """Write reports/report.md (for the pull request) and reports/report.html (with plots)."""
    md, page = write_reports(Path("."), out, _params().data.batches, base, trainers.curves())
    console.print(f"report → {md}, {page}")
