"""The agent track's commands: tasks, on-policy pairs, the agent evaluation, the shipped agent adapter."""

from __future__ import annotations

from pathlib import Path

import typer

from clap import model, paths
from clap.agent.engine import agent_engine
from clap.agent.tools import ReportTools
from clap.cli.common import _fail, _need, _params, _prod, _say_reused, app, console
from clap.evaluate.intervals import ci_text
from clap.evaluate.summary import agent_table
from clap.integrity import pinned_expectation
from clap.io import read_json, write_json, write_switched_off
from clap.release.bundle import SHIPPABLE
from clap.release.prod import restore_version_adapter
from clap.release.registry import current
from clap.stages import agent_rm_check as agent_rm_check_stage
from clap.stages import agent_tasks as agent_tasks_stage
from clap.stages import evaluate_agent as evaluate_agent_stage
from clap.stages import trainers
from clap.train.spec import AGENT


@app.command("agent-pairs")
def agent_pairs(tasks: Path = typer.Option(paths.AGENT_TASKS), assets: Path = typer.Option(paths.ASSETS),
                out: Path = typer.Option(paths.AGENT_PAIRS)) -> None:
    """On-policy hard negatives: the agent SFT adapter's own wrong next actions on the train
    trajectories, each paired with the gold action (the agent DPO step's data)."""
    cfg = _params()
    if not cfg.agent.enabled:
        return _agent_off("agent-pairs", out, ("pairs.jsonl",))
    from clap.stages import agent_pairs as agent_pairs_stage

    _need((tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"),
          (paths.adapter("agent_sft"), "dvc repro train_agent_sft"))
    tools = ReportTools.over_batches(assets, cfg.data.batches)
    engine = agent_engine(cfg.generate, cfg.model, ["agent_sft"])
    report = agent_pairs_stage.run(cfg.agent, tasks, engine, tools, out, constrained=cfg.generate.constrained)
    _say_reused(engine)
    console.print(f"agent pairs → {out}: {report['pairs']} from {report['states']} states × {report['draws']} draws; "
                  f"by reason {report['by_reason']}")


def _agent_off(command: str, out: Path, empty_files: tuple[str, ...], metrics: Path | None = None) -> None:
    """`agent.enabled: false`: an agent stage writes its outputs empty, each saying why (and its metrics file,
    when it has one), so the pipeline runs on and the gate judges no agent adapter."""
    report = {"status": "disabled", "note": "agent.enabled is false: the agent track did not run"}
    write_switched_off(out, empty_files, report)
    if metrics is not None:
        write_json(metrics, report)
    console.print(f"{command}: disabled (agent.enabled is false)")


@app.command("agent-rm-check")
def agent_rm_check(out: Path = typer.Option(paths.AGENT_RM_CHECK), metrics: Path = typer.Option(paths.AGENT_RM_CHECK_METRICS),
                   labels: Path = typer.Option(paths.AGENT_HUMAN_LABELS)) -> None:
    """The agent reward model against people's labels on agent episodes (Spearman, calibration), and its verdict:
    may agent GRPO and RLOO use it (both its checks passed)?"""
    cfg = _params()
    if not cfg.agent.enabled:
        return _agent_off("agent-rm-check", out, ("verdict.json",), metrics)

    rm = paths.adapter("agent_rm")
    _need((rm.parent / paths.TRAIN_METRICS_FILE, "dvc repro train_agent_rm"))
    m = agent_rm_check_stage.run(cfg.agent.rm.human, rm.parent, model.resolve(cfg.model), labels, out, metrics,
                  pinned_expectation(Path("."), rm) if rm.exists() else None)
    people = m["against_people"] or {}
    console.print(f"agent reward model: {'usable' if m['usable_as_reward'] else 'not usable'} as a reward"
                  + (f" ({m['failed']} check failed)" if m["failed"] else "")
                  + (f"; against {people['n']} labelled episodes Spearman {people['spearman']}, ECE {people['ece']}"
                     if people else ""))


@app.command("agent-tasks")
def agent_tasks(assets: Path = typer.Option(paths.ASSETS), out: Path = typer.Option(paths.AGENT_TASKS),
                corrections: Path = typer.Option(paths.AGENT_CORRECTIONS,
                                                 help="trajectories people corrected (*.jsonl), for training")) -> None:
    """Agent tasks with gold trajectories from the verified facts, kept only if they pass the format,
    execution and answer checks, and the corrected trajectories in repair/agent/ that pass them too."""
    cfg = _params()
    if not cfg.agent.enabled:
        return _agent_off("agent-tasks", out, ("tasks.jsonl",))

    _need((assets, "dvc repro assetize"))
    report = agent_tasks_stage.run(cfg.agent.tasks, assets, cfg.data.batches, out, corrections)
    console.print(f"agent tasks → {out}: {report['tasks']} kept; dropped by check: {report['dropped_by_check']}")
    fixes = report["corrections"]
    if fixes["kept"] or fixes["refused"]:
        console.print(f"corrected trajectories: {len(fixes['kept'])} kept for training, {len(fixes['refused'])} refused")
        for r in fixes["refused"]:
            console.print(f"  {r['file']}:{r['line']} ({r['correction_id']}): {r['reason']}")
    console.print(", ".join(f"{k}={v}" for k, v in report["by_split_kind"].items()))


@app.command("evaluate-agent")
def evaluate_agent(tasks: Path = typer.Option(paths.AGENT_TASKS), assets: Path = typer.Option(paths.ASSETS),
                   out: Path = typer.Option(paths.AGENT_EVAL), metrics: Path = typer.Option(paths.AGENT_METRICS),
                   prod: Path = typer.Option(paths.PROD_ADAPTER, help="restored prod (clap prod-adapter)")) -> None:
    """The agent chain (agent SFT, then SFT→DPO and SFT→GRPO when enabled) against the base model and the
    agent adapter in prod on the held-out agent tasks: task success, tool-call accuracy (when / how), pass^k,
    hallucination, abstention, with paired-bootstrap CIs."""
    cfg = _params()
    if not cfg.agent.enabled:
        return _agent_off("evaluate-agent", out, ("episodes.jsonl", "next_calls.jsonl", "failed_episodes.jsonl"), metrics)

    adapters = trainers.switched_on(AGENT, cfg)
    _need((tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"),
          *[(paths.adapter(a), f"dvc repro train_{a}") for a in adapters])
    prod_dir, prod_expected = _prod(prod, "agent_adapter")
    in_prod = [("prod", prod_dir, prod_expected)] if prod_dir else []
    engine = agent_engine(cfg.generate, cfg.model, adapters, in_prod)
    result = evaluate_agent_stage.run(cfg.agent, tasks, assets, engine, [("base", False), *[(a, a) for a in adapters]], out, metrics,
                       prod=bool(in_prod), evaluate=cfg.evaluate, batches=cfg.data.batches,
                       constrained=cfg.generate.constrained)
    _say_reused(engine)
    console.print(agent_table(result))


@app.command("agent-pass-k")
def agent_pass_k(tasks: Path = typer.Option(paths.AGENT_TASKS), assets: Path = typer.Option(paths.ASSETS),
                 gate: Path = typer.Option(paths.GATE_AGENT, help="the gate's agent verdict (which agent adapter ships)"),
                 out: Path = typer.Option(paths.AGENT_PASS_K), metrics: Path = typer.Option(paths.AGENT_PASS_K_METRICS),
                 prod: Path = typer.Option(paths.PROD_ADAPTER, help="restored prod (clap prod-adapter)")) -> None:
    """pass^k (sampled runs on the held-out agent tasks) of the agent adapter the gate ships and of prod's, with
    CIs and their paired difference."""
    cfg = _params()
    if not cfg.agent.enabled:
        return _agent_off("agent-pass-k", out, ("episodes.jsonl",), metrics)
    from clap.stages import agent_pass_k as agent_pass_k_stage

    _need((tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"), (gate, "dvc repro gate"))
    shipped = read_json(gate)
    ships = shipped.get("candidate") if shipped.get("decision") in SHIPPABLE else None
    if ships:
        _need((paths.adapter(ships), f"dvc repro train_{ships}"))
    prod_dir, prod_expected = _prod(prod, "agent_adapter")
    in_prod = [("prod", prod_dir, prod_expected)] if prod_dir else []
    models = [*([(ships, ships)] if ships else []), *([("prod", "prod")] if in_prod else [])]
    engine = agent_engine(cfg.generate, cfg.model, [ships] if ships else [], in_prod)
    result = agent_pass_k_stage.run(cfg.agent, tasks, assets, engine, models, out, metrics, shipped, evaluate=cfg.evaluate,
                       batches=cfg.data.batches, constrained=cfg.generate.constrained)
    _say_reused(engine)
    for name, m in result["models"].items():
        console.print(f"{name}: " + "  ".join(f"pass^{k} {v:.3f}" for k, v in m["pass_hat_k"].items() if v is not None))
    for k, d in (result.get("delta_vs_prod") or {}).items():
        console.print(f"{ships} − prod {k}: {ci_text(d)}")
    if result.get("note"):
        console.print(result["note"])


@app.command("agent-adapter")
def agent_adapter(version: str = typer.Argument(None, help="a registered version (default: the one in prod)"),
                  out: Path = typer.Option(paths.MODELS / "serving" / "agent")) -> None:
    """Restore the tool-calling agent adapter a release shipped (from the DVC cache, checked byte for byte
    against the bundle at its tag), ready for `Engine` / vLLM to serve."""
    version = version or (current(Path("."), "prod") or {}).get("version")
    if not version:
        _fail(ValueError("nothing is in prod: name a registered version (`clap registry` lists them)"))
    folder, expected = restore_version_adapter(Path("."), version, out / version / "adapter", role="agent_adapter")
    console.print(f"agent adapter of {version} → {folder} (sha256 {expected['files']['adapter_model.safetensors'][:12]}, "
                  "verified against its release bundle)")
