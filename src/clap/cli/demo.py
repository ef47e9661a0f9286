"""The demo's commands: the simulated annotator and raters, `clap demo` (rounds and the drill). Its corpus,
`clap demo-data`, is a data stage (`clap.stages.demo_data`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from clap import paths
from clap.cli.common import _fail, _params, app, console
from clap.cli.feedback import _print_analysis, _print_traffic
from clap.config import check, compose
from clap.demo import annotator, corpus, rounds
from clap.demo import raters as simulated_raters
from clap.demo.rounds import demo_overrides
from clap.evaluate import summary
from clap.feedback.canary_analysis import joint
from clap.io import read_json, read_jsonl, write_jsonl
from clap.release import registry
from clap.release import timeline as tl
from clap.release.bundle import agent_source
from clap.serve.canary import simulated_canary
from clap.stages import trainers


@app.command("demo-annotate")
def demo_annotate(queue: Path = typer.Option(paths.REPAIR_QUEUE),
                  out: Path = typer.Option(paths.SIMULATED_FIXES),
                  share: float = typer.Option(0.5, min=0.0, max=1.0, help="share of the fixable queue to correct")) -> None:
    """SIMULATED annotator for the demo: corrects a share of the repair queue from the demo generator's truth."""
    if not queue.exists():
        _fail(FileNotFoundError(f"{queue}: no repair queue (run `dvc repro` first)"))
    demo = _params().demo
    if demo is None:
        _fail(ValueError("params.yaml: no demo section; the simulated annotator corrects the demo corpus only"))
    truth = corpus.generate(seed=demo.seed, scale=demo.scale)["truth"]
    rows = annotator.annotate(read_jsonl(queue), truth, share, seed=demo.seed)
    write_jsonl(out, rows)
    console.print(f"simulated annotator: {len(rows)} corrected fact rows → {out} (from the generator's ground truth)")


@app.command("demo-label")
def demo_label(tasks: Path = typer.Option(paths.HUMAN_EXPORT / "tasks.json"),
               out: Path = typer.Option(..., help="where to write the Label Studio JSON export"),
               raters: int = typer.Option(3, min=1), noise: float = typer.Option(0.15, min=0.0, max=1.0),
               seed: int = 0) -> None:
    """SIMULATED raters for the demo: label exported tasks against the generator's gold answers, in Label Studio's export format."""

    if not tasks.exists():
        _fail(FileNotFoundError(f"{tasks}: no exported tasks (run `clap human export`)"))
    gold = simulated_raters.gold_answers(Path("."), _params().data.batches)
    export = simulated_raters.label(read_json(tasks), gold, raters, noise, seed)
    out.write_text(json.dumps(export, ensure_ascii=False, indent=1), encoding="utf-8")
    console.print(f"simulated raters: {raters} × {len(export)} tasks → {out} (Label Studio export format)")


@app.command()
def demo(override: list[str] = typer.Option(None, "--set", "-S", help="Hydra override on top of conf/, every round")
         ) -> None:
    """The closed loop on the demo corpus, round after round (`demo.rounds` in conf/), each round a commit;
    then a rollback drill and the timeline. Every round composes conf/ with `demo.overrides`, then -S. See
    `clap.demo.rounds`."""
    overrides = demo_overrides(check(compose([]), "conf/ (composed)")["demo"]["overrides"], override or [])
    schedule = check(compose(overrides), f"conf/ with {' '.join(overrides)}")["demo"]["rounds"]
    console.print(f"demo overrides: {' '.join(overrides) or '(none)'}", soft_wrap=True)

    def after_round(k: int) -> None:
        summary.print_summary(console, Path("."))
        summary.print_loop_summary(console, Path("."), _params().data.batches, list(trainers.REGISTRY))

    def run_canary(k: int) -> dict:
        """Both canaries of the version in canary, then one conclusion: the extraction canary always, the agent
        canary when the version ships an agent adapter of its own (its gate passed the agent); either failing,
        or running out of traffic undecided, rolls the version back (`canary_analysis.joint`)."""
        cfg = _params()
        version = registry.current(Path("."), "canary")["version"]
        console.rule(f"round {k}: canary {version} on SIMULATED traffic (held-out replay questions, paired)")
        counts, analysis = simulated_canary(Path("."), cfg, paths.CANARY_LOGS / version, 100,
                                            fail_when_exhausted=True)
        _print_traffic(cfg, counts)
        _print_analysis(analysis, paths.CANARY_METRICS)
        others = []
        source = agent_source(Path("."), version) if cfg.agent.enabled else None
        if source is not None and source[0] == version:  # its own agent adapter, not one carried from prod
            console.rule(f"round {k}: agent canary {version} on SIMULATED traffic (held-out agent tasks, paired "
                         "episodes, task success)")
            counts, agent_analysis = simulated_canary(Path("."), cfg, paths.CANARY_AGENT_LOGS / version, 100,
                                                      fail_when_exhausted=True, agent=True)
            _print_traffic(cfg, counts, "task success")
            _print_analysis(agent_analysis, paths.CANARY_AGENT_METRICS)
            others.append(agent_analysis)
        return registry.conclude_canary(Path("."), joint(analysis, others))

    result = rounds.run(schedule, overrides, lambda line: console.rule(escape(line)), after_round, run_canary)
    for r in result["rounds"]:
        released = r.get("release")
        console.print(f"round {r['round']} ({r['commit']}): gate [bold]{r['decision']}[/]"
                      + (f" → released {released['version']} to {released['stage']} ({released['tag']})" if released else "")
                      + (f" — release refused: {escape(r['release_refused'])}" if "release_refused" in r else "")
                      + (f"; canary {r['canary']['verdict']} → {r['canary']['action']} ({', '.join(r['canary']['tags'])})"
                         if "canary" in r else ""), soft_wrap=True)
        if r["repair_effect"]:
            e = r["repair_effect"]
            console.print(f"  repair (SIMULATED annotator): {e['fixed_rows']} rows fixed, {e['now_verifiable']} now "
                          f"verifiable, {e['in_training']} in training, {e['in_holdout']} in holdouts; overall score on "
                          f"those {e['scored']}: {e['before_model']} {e['overall_before']} → candidate {e['overall_after']}",
                          soft_wrap=True)
    print_drill(result["drill"])
    console.print(tl.table(tl.rounds(Path("."), since=result["since"])))


def print_drill(d: dict) -> None:
    """The rollback drill's line of `clap demo` (`clap.demo.rounds.drill`'s result)."""
    if "skipped" in d:
        console.print(f"rollback drill skipped: {escape(d['skipped'])}", soft_wrap=True)
    elif "restored" in d:
        console.print(f"rollback drill: prod {d['from']} → the base model ({', '.join(d['withdrawn_tags'])}; no earlier "
                      f"version was ever in prod); then {d['restored']}'s {d['deleted_files']} adapter files, deleted, "
                      f"restored from the DVC cache and prod again ({d['restore_tag']}), bundle verified, adapter bytes "
                      f"identical to {d['restored']}'s: {d['adapter_files_identical']}", soft_wrap=True)
    else:
        console.print(f"rollback drill: prod {d['from']} → {d['to']} ({d['tag']}); restored from the DVC cache, bundle "
                      f"verified, adapter bytes identical to {d['to']}'s: {d['adapter_files_identical']}", soft_wrap=True)
