"""`clap human …` (Label Studio round trip) and `clap canary …`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from clap import paths
from clap.cli.common import _fail, _need, _params, canary_app, console, human_app
from clap.config import Params
from clap.data.repair import replace_in_inbox
from clap.evaluate.intervals import ci_text
from clap.feedback import canary, canary_analysis, human, traffic
from clap.feedback.canary_analysis import joint
from clap.io import read_json, write_json
from clap.release import registry as rel
from clap.serve.canary import server, simulated_canary


@human_app.command("export")
def human_export(out: Path = typer.Option(paths.HUMAN_EXPORT), keys: Path = typer.Option(paths.HUMAN_KEYS)) -> None:
    """Blind Label Studio tasks (and its labelling config) from the evaluation and replay answers."""
    cfg = _params()
    _need(*[(paths.eval_metrics(b), f"dvc repro evaluate@{b}") for b in cfg.data.batches],
          (paths.REPLAY_METRICS, "dvc repro replay"))
    r = human.export(cfg, Path("."), out, keys)
    if r["stale_left_out"]:
        console.print(f"[bold yellow]left out:[/] answers of {', '.join(r['stale_left_out'])} (an older candidate gave "
                      "them; `dvc repro` re-runs those stages)")
    console.print(f"{r['tasks']} tasks ({r['items']} questions × models {', '.join(r['models'])}) → {out}/tasks.json, "
                  f"labelling config → {out}/config.xml; the model mapping → {keys}/{r['export_id']}.json (commit it, "
                  "do not send it)")


@human_app.command("import")
def human_import(file: Path = typer.Argument(..., help="Label Studio's JSON export of the project"),
                 keys: Path = typer.Option(paths.HUMAN_KEYS), out: Path = typer.Option(paths.HUMAN_METRICS),
                 inbox: Path = typer.Option(paths.INBOX)) -> None:
    """Check the export against its key; write metrics/human.json; queue low-rated answers for repair."""
    r = human.import_(_params(), Path("."), file, keys, out, inbox)
    console.print(f"{r['labels']} labels by {len(r['annotators'])} annotators on {r['tasks_labelled']} of "
                  f"{r['tasks_exported']} tasks; cancelled {r['cancelled']}; → {out}")
    for m, scales in r["models"].items():
        console.print(f"  {m:10s} " + "  ".join(f"{s} {ci_text(v, 'mean', digits=2, signed=False)}"
                                                  for s, v in scales.items() if v["mean"] is not None))
    for name, d in r["deltas"].items():
        console.print(f"  {name}: " + "  ".join(f"{s} {ci_text(v, digits=2)}"
                                               for s, v in d.items() if v["delta"] is not None))
    console.print("  agreement: " + "  ".join(f"{s} α={a['krippendorff_alpha']}" for s, a in r["agreement"].items()))
    for p in r["problems"]:
        console.print(f"[bold yellow]left out:[/] {escape(p)}")
    console.print(f"flagged to the flywheel inbox ({inbox}): {r['flagged_to_inbox']}")


@canary_app.command("serve")
def canary_serve(port: int = typer.Option(None, help="default: canary.port"),
                 logs: Path = typer.Option(paths.CANARY_LOGS),
                 candidate: Path = typer.Option(None, help="serve this unreleased adapter (pinned by dvc.lock) as "
                                                          "the canary: a dark launch, analysable, not concludable"),
                 upstream: str = typer.Option(None, help="route to this vLLM OpenAI server (CUDA) instead of the CPU "
                                                         "engine; prints the `vllm serve` line it must run"),
                 agent: bool = typer.Option(False, help="serve the tool-calling agent adapters of canary and prod "
                                                        "(OpenAI tools / tool_calls; logs default to "
                                                        f"{paths.CANARY_AGENT_LOGS})")) -> None:
    """Serve prod and the canary (OpenAI-compatible, 127.0.0.1) and log every request and outcome."""
    import shlex

    cfg = _params()
    logs = paths.CANARY_AGENT_LOGS if agent and logs == paths.CANARY_LOGS else logs
    service = canary.from_registry(Path("."), cfg, logs, candidate, upstream, agent=agent)
    if upstream:
        console.print("the adapters passed the serving check; vLLM must serve exactly these folders:\n  "
                      + shlex.join(service.engine.command))
    srv = server(service, port or cfg.canary.port)
    arms = ", ".join(f"{n}={a.version or 'base model'}" for n, a in service.arms.items())
    console.print(f"serving {arms} "
                  f"on http://127.0.0.1:{srv.server_address[1]} (canary share {service.share}); logs → {logs}")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        srv.server_close()


def _print_traffic(cfg: Params, counts: dict, outcome: str | None = None) -> None:
    console.print("traffic: " + ", ".join(f"{a} {c['success']}/{c['requests']} {outcome or cfg.canary.outcome}"
                                          for a, c in counts.items()))


@canary_app.command("traffic")
def canary_traffic(url: str = typer.Option(None, help="default: http://127.0.0.1:<canary.port>"),
                   paired: bool = typer.Option(False, help="send every question to both arms"),
                   limit: int = typer.Option(None, min=1, help="first N held-out replay questions"),
                   until_decided: Path = typer.Option(None, help="the server's log folder (same machine): stop "
                                                                 "sending once its analysis is conclusive"),
                   agent: bool = typer.Option(False, help="held-out agent tasks as episodes (the server runs "
                                                          "`clap canary serve --agent`); outcome: task success")) -> None:
    """The demo's traffic: held-out replay questions (or agent tasks), each scored against gold, outcomes posted back."""
    cfg = _params()
    stop = (lambda: canary_analysis.decided(until_decided, cfg)) if until_decided else None
    send = traffic.send_agent if agent else traffic.send
    counts = send(cfg, Path("."), url or f"http://127.0.0.1:{cfg.canary.port}", paired, limit, stop)
    _print_traffic(cfg, counts, "task success" if agent else None)


@canary_app.command("analyze")
def canary_analyze(logs: Path = typer.Argument(None, help=f"default: {paths.CANARY_LOGS} "
                                                            f"({paths.CANARY_AGENT_LOGS} with --agent)"),
                   out: Path = typer.Option(None, help=f"default: {paths.CANARY_METRICS} "
                                                       f"({paths.CANARY_AGENT_METRICS} with --agent)"),
                   inbox: Path = typer.Option(paths.INBOX),
                   outcome: str = typer.Option(None, help="re-score the logged feedback by another logged score "
                                                          "(e.g. value_exact) instead of its outcome"),
                   agent: bool = typer.Option(False, help="the agent canary's logs: one outcome (task success) per "
                                                          "episode")) -> None:
    """Canary vs prod on the logged outcomes: SPRT, McNemar, bootstrap CI → successful / failed / inconclusive."""
    logs = logs or (paths.CANARY_AGENT_LOGS if agent else paths.CANARY_LOGS)
    out = out or (paths.CANARY_AGENT_METRICS if agent else paths.CANARY_METRICS)
    requests, feedback = canary_analysis.load_logs(logs)
    if outcome is not None:
        feedback = canary_analysis.rescore(feedback, outcome)
    r = canary_analysis.analyze(requests, feedback, _params()) | {"outcome": outcome or "logged"}
    write_json(out, r)
    failed = canary_analysis.failed_cases(requests, feedback)
    replace_in_inbox(inbox, failed, f"canary{'-agent' if agent else ''}:{r['versions']['canary']}")
    _print_analysis(r, out, len(failed))


def _print_analysis(r: dict, out: Path, failed: int | None = None) -> None:
    s = r["sprt"]
    console.print(f"canary {r['versions']['canary']} vs prod {r['versions']['prod']}: requests {r['requests']}, "
                  f"without outcome {r['without_outcome']}, success {r['success_rate']}")
    d = r["delta_canary_minus_prod"]
    if d["delta"] is not None:
        console.print(f"pairs {r['pairs']} ({r['pairing']}): canary − prod {ci_text(d)}, McNemar p={r['mcnemar']['p_value']}; SPRT {s['outcome']} after "
                      f"{s['discordant_seen']} discordant in {s['pairs_read']} pairs (canary won {s['canary_wins']}), llr {s['llr']:+.3f} in "
                      f"({s['lower']:+.3f}, {s['upper']:+.3f})")
    for reason in r["reasons"]:
        console.print(f"  {reason['rule']}: {reason['observed']} vs {reason['threshold']} → {reason['outcome']}")
    console.print(f"[bold]{r['verdict'].upper()}[/] → {out}" + (f"; failed canary requests to the inbox: {failed}"
                                                               if failed is not None else ""))


@canary_app.command("demo")
def canary_demo(limit: int = typer.Option(100, min=1, help="at most this many held-out replay questions, each sent "
                                                          "to both arms; traffic stops once the analysis is conclusive"),
                candidate: Path = typer.Option(None, help="serve this unreleased adapter as the canary (dark launch)"),
                logs: Path = typer.Option(None, help=f"default: {paths.CANARY_LOGS} ({paths.CANARY_AGENT_LOGS} "
                                                     "with --agent)"),
                agent: bool = typer.Option(False, help="the agent canary: the versions' agent adapters on held-out "
                                                       "agent tasks, task success as the outcome"),
                conclude: bool = typer.Option(True, help="end a registered canary by its analysis (promote or roll "
                                                         "back); --no-conclude leaves that to `clap canary conclude`")
                ) -> None:
    """One canary end to end: serve (in this process), replay the held-out questions (or agent tasks) as paired
    traffic, analyse, and — for a registered canary — conclude with the promote or rollback tag."""
    cfg = _params()
    logs = logs or (paths.CANARY_AGENT_LOGS if agent else paths.CANARY_LOGS)
    counts, r = simulated_canary(Path("."), cfg, logs, limit, candidate, agent=agent)
    _print_traffic(cfg, counts, "task success" if agent else None)
    metrics = paths.CANARY_AGENT_METRICS if agent else paths.CANARY_METRICS
    _print_analysis(r, metrics)
    if conclude and candidate is None and r["verdict"] in ("successful", "failed"):
        canary_conclude(metrics)


@canary_app.command("conclude")
def canary_conclude(analysis: Path = typer.Option(paths.CANARY_METRICS)) -> None:
    """Act on the analysis: promote the canary to prod (`#prod#K`) or roll it back (`#canary!#K`). When the agent
    canary of the same version was analysed too, both count (`canary_analysis.joint`): either failing rolls the
    version back, either inconclusive concludes nothing."""
    if not analysis.exists():
        _fail(FileNotFoundError(f"{analysis}: no canary analysis (run `clap canary analyze`)"))
    others = [p for p in (paths.CANARY_METRICS, paths.CANARY_AGENT_METRICS) if p.exists() and p.resolve() !=
              analysis.resolve()]
    r = rel.conclude_canary(Path("."), joint(read_json(analysis), [read_json(p) for p in others]))
    console.print(f"canary {r['version']}: {r['verdict']} → {r['action']} ({', '.join(r['tags'])})")
