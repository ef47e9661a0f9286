"""The `clap` command: one sub-command per stage, each a thin wrapper around `stages/<name>.run`.

    clap --help
"""

from __future__ import annotations

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

from clap import paths  # noqa: E402
from clap.errors import UserError  # noqa: E402
from clap.evaluate.intervals import ci_bounds, ci_text

console = Console(width=max(140, Console().width))  # tables stay readable in logs and CI


def _need(*needed: tuple[Path, str]) -> None:
    """The command's inputs, checked before its work (`clap.io.require_inputs`): one line naming the first missing
    path and the command that makes it."""
    from clap.io import require_inputs

    require_inputs(list(needed))


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(code=2)


class _UserErrorsInOneLine(TyperGroup):
    """Every sub-command: a mistake the user can fix (`UserError`) is one line and exit 2, no traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            _fail(exc)


app = typer.Typer(cls=_UserErrorsInOneLine, add_completion=False, no_args_is_help=True, help=__doc__)


@app.command("demo-data")
def demo_data(out: Path = typer.Option(paths.RAW), seed: int = 7, scale: float = 1.0,
              poison: str = typer.Option("none", help="batch whose currency units are shifted by 10⁴ (a poisoned export)")) -> None:
    """Write the deterministic demo corpus (chunks, facts, decisions) to OUT."""
    from clap.stages import demo_data as stage

    counts = stage.run(out, seed, scale, None if poison == "none" else poison)
    console.print(f"demo corpus → {out}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))


@app.command()
def reference(out: Path = typer.Option(Path("docs/reference"), help="folder of the generated pages"),
              check: bool = typer.Option(False, help="fail when a page differs from what the code generates")) -> None:
    """Reference pages generated from the code (the raw contract from its Pandera models)."""
    from clap.reference import PAGES, render

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
    from clap.project import DOCS
    from clap.project import init as make

    written = make(directory, demo=demo, force=force)
    console.print(f"CLAP project → {directory} ({len(written)} files; git and DVC initialised)")
    if demo:
        console.print(f"next: cd {directory} && dvc repro    (or clap demo: the three rounds)")
    else:
        console.print(f"next: cd {directory}; put documents in {DOCS}/ (tables: conf/ingest/default.yaml); "
                      "dvc repro; clap release")


@app.command()
def ingest(docs: Path = typer.Option(None, help="folder of documents (default: ingest.docs in params.yaml)"),
           out: Path = typer.Option(paths.RAW)) -> None:
    """Your documents and mapped tables into the raw contract: chunks, facts (inline XBRL, tables), decisions."""
    from clap.config import ConfigError, Ingest
    from clap.stages import ingest as stage

    params = _params()
    if params.get("ingest") is None:
        raise ConfigError("params.yaml: no ingest section; a project made by `clap init` has conf/ingest/default.yaml")
    section = Ingest.model_validate(params["ingest"])
    report = stage.run(section, Path(docs or section.docs), out, list(params["data"]["batches"]))
    d = report["documents"]
    console.print(f"documents {d['seen']}: ingested {d['ingested']} ({', '.join(f'{v} {k}' for k, v in d['by_format'].items())}"
                  f"; {d['pages']} pages, {d['ixbrl']} inline XBRL), not readable {len(d['bad'])}")
    for bad in d["bad"]:
        console.print(f"  [bold yellow]{escape(bad['file'])}[/]: {bad['reason']} ({escape(bad['detail'])})")
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
    from clap.data.engine import ENGINES
    from clap.stages import assetize as stage

    if engine is not None and engine not in ENGINES:
        raise typer.BadParameter(f"{engine!r}: choose from {', '.join(ENGINES)}", param_hint="--engine")
    report = stage.run(_params(), raw, out, repaired, engine)
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


def _params() -> dict:
    from clap.config import load

    return load(Path("params.yaml"))


@app.command()
def params(check: bool = typer.Option(False, help="fail when params.yaml differs from ./conf or breaks the schema"),
           override: list[str] = typer.Option(None, "--set", "-S", help="Hydra override, e.g. train.sft.epochs=3")) -> None:
    """Compose ./conf into params.yaml (what DVC's Hydra integration does for `dvc exp run`), checked by the schema."""
    from clap.config import check as check_params
    from clap.config import compose, dump, load

    composed = check_params(compose(override or []), "conf/ (composed)")
    text = dump(composed)
    if check:
        load(Path("params.yaml"))
        if Path("params.yaml").read_text(encoding="utf-8") != text:
            _fail(ValueError("params.yaml differs from the composition of conf/: run `clap params`"))
        console.print("params.yaml: matches conf/ and the schema")
        return
    from clap.io import atomic_write_text

    atomic_write_text(Path("params.yaml"), text)


@app.command("exp", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exp(ctx: typer.Context,
        override: list[str] = typer.Option(None, "--set-param", "-S", help="Hydra override, e.g. train.sft.epochs=3")) -> None:
    """`dvc exp run … -S k=v` with the overrides composed and checked first: an invalid value is never queued.

        clap exp run --queue -S train.sft.learning_rate=1e-4
    """
    import subprocess

    from clap.config import check as check_params
    from clap.config import compose

    args = list(ctx.args)
    if not args or args[0] != "run":
        _fail(ValueError("usage: clap exp run [dvc exp run options] -S key=value ..."))
    check_params(compose(override or []), f"overrides {' '.join(override or [])}")
    cmd = ["dvc", "exp", *args] + [a for o in override or [] for a in ("-S", o)]
    raise typer.Exit(subprocess.run(cmd).returncode)


@app.command()
def materialize(batch: str, assets: Path = typer.Option(paths.ASSETS),
                out: Path = typer.Option(None)) -> None:
    """Build one batch's SFT/holdout/DPO/GRPO/replay sets and its data-quality report."""
    from clap.stages import materialize as stage

    q = stage.run(_params(), assets, batch, out or paths.MATERIALIZED / batch)
    console.print(f"{batch}: train {q['train_size']}, holdout {q['holdout_size']}, replay {q['replay_cases']}, "
                  f"dpo {q['dpo_pairs']}, grpo {q['grpo_groups']}, repair {q['repair_queue']}; overlap before "
                  f"{q['before']['exact_input_overlap']}/{q['before']['near_duplicate_overlap']} after "
                  f"{q['after']['exact_input_overlap']}/{q['after']['near_duplicate_overlap']} (exact/near)")


@app.command()
def admit(batch: str, materialized: Path = typer.Option(paths.MATERIALIZED),
          out: Path = typer.Option(None)) -> None:
    """Admission gate for one batch: admit / sft_only / repair / block, with every check."""
    from clap.stages import admit as stage

    rec = stage.run(_params(), materialized / batch, out or paths.admission(batch))
    console.print(f"{batch}: {rec.decision}" + (f" ({'; '.join(rec.reasons)})" if rec.reasons else ""))


@app.command("base-model")
def base_model_cmd() -> None:
    """Resolve and pin the base model `model.base` names: a packaged or file GGUF dequantised once into
    `model.cache_dir`; a local folder or Hub snapshot used in place, its files' hashes pinned there."""
    from clap.stages import base_model as stage

    path, ident = stage.run(_params()["model"])
    console.print(f"base model ready: {ident['hub_id']} at {path} {ident['weights_sha256']}")


@app.command()
def train(kind: str = typer.Argument(..., help="sft | dpo | grpo | agent-sft | agent-dpo | agent-rm | agent-grpo"),
          batches: list[str] = typer.Option(None, "--batch", help="default: all batches in params"),
          materialized: Path = typer.Option(paths.MATERIALIZED),
          admission: Path = typer.Option(paths.ADMISSION),
          out: Path = typer.Option(None), checkpoints: Path = typer.Option(None),
          start: Path = typer.Option(None, help="dpo/grpo: the adapter the step continues (default models/sft/adapter)")
          ) -> None:
    """Train a LoRA adapter on the admitted batches, under the runtime guards. sft starts from the base
    model; dpo and grpo continue the SFT adapter (--start, checked against the hashes dvc.lock pins);
    agent-sft trains the tool-calling agent on the gold trajectories of data/agent (`clap agent-tasks`);
    agent-dpo continues it on its own mistakes (`clap agent-pairs`); agent-rm fits a reward model on those
    pairs and checks it against the rule rewards; agent-grpo continues agent SFT with GRPO on whole
    episodes in the environment (the reward model one of its rewards when its check passed)."""
    from clap.domain.names import CHAIN, TRAINERS, command_name, trainer_name

    if kind not in map(command_name, TRAINERS):
        _fail(ValueError(f"unknown trainer {kind!r}: use {', '.join(map(command_name, TRAINERS[:-1]))} or "
                         f"{command_name(TRAINERS[-1])}"))
    cfg = _params()
    from clap.train.common import switched_off, write_disabled

    if switch := switched_off(cfg, trainer_name(kind)):
        write_disabled(trainer_name(kind), switch, out or paths.MODELS / trainer_name(kind))
        return console.print(f"{kind}: disabled ({switch} is false)")
    _training_inputs(kind, (batches or cfg["data"]["batches"]) if kind in CHAIN else [],
                     materialized, admission, start)
    # torch, transformers, PEFT and TRL take ≈ 13 s to import here: a switched-off trainer does not pay it
    from clap import model
    from clap.integrity import pinned_expectation
    from clap.io import check_output_dir
    from clap.stages import train_dpo, train_grpo, train_sft

    base = model.resolve(cfg["model"])
    if kind.startswith("agent-"):
        name = kind.replace("-", "_")
        return _train_agent(cfg, kind, base, out or paths.MODELS / name, checkpoints or paths.CHECKPOINTS / name)
    out = out or paths.MODELS / kind
    check_output_dir(out, (materialized, admission, base))
    tracking = _tracking(cfg, kind)
    args = (cfg, materialized, admission, batches or cfg["data"]["batches"], base, out,
            checkpoints or paths.CHECKPOINTS / kind)
    if kind == "sft":
        m = train_sft.run(*args, callbacks=tracking.callbacks())
    else:
        start = start or paths.adapter("sft")
        chain_step = train_dpo if kind == "dpo" else train_grpo
        m = chain_step.run(*args, start_adapter=start, start_expected=pinned_expectation(Path("."), start),
                           callbacks=tracking.callbacks())
    _record_trained(kind, m, tracking, out)


def _tracking(cfg: dict, kind: str):
    """The trackers of `train.report_to` for this run (`clap.train.tracking`); under `accelerate launch` rank 0's."""
    import os

    from clap.train.tracking import Tracking

    rank_zero = os.environ.get("RANK", "0") == "0"
    return Tracking(kind.replace("-", "_"), {"report_to": cfg["train"]["report_to"] if rank_zero else [],
                                             "mlflow": cfg["train"]["mlflow"]})


def _record_trained(kind: str, m: dict, tracking, out: Path) -> None:
    """After a trainer ran: its trackers closed (the run's record added to its metrics), metrics/train_<kind>.json."""
    from clap.io import read_json_if_exists, write_json

    manifest = read_json_if_exists(Path(out) / "adapter" / "manifest.json") or {}
    m |= tracking.close(m, manifest.get("base_model"), (manifest.get("files") or {}).get("adapter_model.safetensors"))
    write_json(paths.train_metrics(kind.replace("-", "_")), m)
    _say_trained(kind, m)


def _training_inputs(kind: str, batches: list[str], materialized: Path, admission: Path, start: Path | None) -> None:
    """What `kind` reads, checked before the base model is converted or loaded: one line names the first missing
    input and the stage that makes it."""
    from clap.domain.names import CHAIN

    if kind in CHAIN:
        needed = [(Path(admission) / f"{b}.json", f"dvc repro admit@{b}") for b in batches]
        needed += [(Path(materialized) / b, f"dvc repro materialize@{b}") for b in batches]
        if kind != "sft":
            needed.append((start or paths.adapter("sft"), "dvc repro train_sft"))
    else:
        needed = {"agent-sft": [(paths.AGENT_TASKS, "dvc repro agent_tasks")],
                  "agent-dpo": [(paths.AGENT_PAIRS, "dvc repro agent_pairs"),
                                (paths.adapter("agent_sft"), "dvc repro train_agent_sft")],
                  "agent-rm": [(paths.AGENT_PAIRS, "dvc repro agent_pairs")],
                  "agent-grpo": [(paths.AGENT_TASKS, "dvc repro agent_tasks"), (paths.ASSETS, "dvc repro assetize"),
                                 (paths.adapter("agent_sft"), "dvc repro train_agent_sft")]}[kind]
    _need(*needed)


def _train_agent(cfg: dict, kind: str, base: Path, out: Path, checkpoints: Path) -> None:
    from clap.integrity import pinned_expectation
    from clap.io import check_output_dir
    from clap.stages import train_agent_dpo, train_agent_grpo, train_agent_rm, train_agent_sft

    tracking = _tracking(cfg, kind)
    if kind == "agent-sft":
        check_output_dir(out, (paths.AGENT_TASKS, base))
        m = train_agent_sft.run(cfg, paths.AGENT_TASKS, base, out, checkpoints, callbacks=tracking.callbacks())
    elif kind == "agent-rm":
        check_output_dir(out, (paths.AGENT_PAIRS, base))
        m = train_agent_rm.run(cfg, paths.AGENT_PAIRS, base, out, checkpoints, callbacks=tracking.callbacks())
    elif kind == "agent-grpo":
        check_output_dir(out, (paths.AGENT_TASKS, paths.ASSETS, base))
        start, rm = paths.adapter("agent_sft"), paths.adapter("agent_rm")
        m = train_agent_grpo.run(cfg, paths.AGENT_TASKS, paths.ASSETS, base, out, checkpoints, start,
                                 pinned_expectation(Path("."), start), rm_dir=rm.parent,
                                 rm_expected=pinned_expectation(Path("."), rm) if rm.exists() else None,
                                 callbacks=tracking.callbacks())
    else:
        check_output_dir(out, (paths.AGENT_PAIRS, base))
        start = paths.adapter("agent_sft")
        m = train_agent_dpo.run(cfg, paths.AGENT_PAIRS, base, out, checkpoints, start, pinned_expectation(Path("."), start),
                                callbacks=tracking.callbacks())
    _record_trained(kind, m, tracking, out)


def _say_trained(kind: str, m: dict) -> None:
    speed = "taken from its finished checkpoint" if m["tokens_per_s"] is None else f"{m['tokens_per_s']} tokens/s"
    console.print(f"{kind}: {m['status']} after {m['steps']} steps, loss {m['train_loss']}, {speed}")


@app.command("agent-pairs")
def agent_pairs(tasks: Path = typer.Option(paths.AGENT_TASKS), assets: Path = typer.Option(paths.ASSETS),
                out: Path = typer.Option(paths.AGENT_PAIRS)) -> None:
    """On-policy hard negatives: the agent SFT adapter's own wrong next actions on the train
    trajectories, each paired with the gold action (the agent DPO step's data)."""
    from clap.agent.engine import agent_engine

    cfg = _params()
    if not cfg["agent"]["enabled"]:
        return _agent_off("agent-pairs", out, ("pairs.jsonl",))
    from clap.agent.tools import ReportTools
    from clap.stages import agent_pairs as stage

    _need((tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"),
          (paths.adapter("agent_sft"), "dvc repro train_agent_sft"))
    tools = ReportTools.over_batches(assets, cfg["data"]["batches"])
    engine = agent_engine(cfg, ["agent_sft"])
    report = stage.run(cfg, tasks, engine, tools, out)
    _say_reused(engine)
    console.print(f"agent pairs → {out}: {report['pairs']} from {report['states']} states × {report['draws']} draws; "
                  f"by reason {report['by_reason']}")


def _agent_off(command: str, out: Path, empty_files: tuple[str, ...], metrics: Path | None = None) -> None:
    """`agent.enabled: false`: an agent stage writes its outputs empty, each saying why (and its metrics file,
    when it has one), so the pipeline runs on and the gate judges no agent adapter."""
    from clap.io import write_json, write_switched_off

    report = {"status": "disabled", "note": "agent.enabled is false: the agent track did not run"}
    write_switched_off(out, empty_files, report)
    if metrics is not None:
        write_json(metrics, report)
    console.print(f"{command}: disabled (agent.enabled is false)")


@app.command("agent-tasks")
def agent_tasks(assets: Path = typer.Option(paths.ASSETS), out: Path = typer.Option(paths.AGENT_TASKS)) -> None:
    """Agent tasks with gold trajectories from the verified facts, kept only if they pass the format,
    execution and answer checks."""
    cfg = _params()
    if not cfg["agent"]["enabled"]:
        return _agent_off("agent-tasks", out, ("tasks.jsonl",))
    from clap.stages import agent_tasks as stage

    _need((assets, "dvc repro assetize"))
    report = stage.run(cfg, assets, cfg["data"]["batches"], out)
    console.print(f"agent tasks → {out}: {report['tasks']} kept; dropped by check: {report['dropped_by_check']}")
    console.print(", ".join(f"{k}={v}" for k, v in report["by_split_kind"].items()))


@app.command("evaluate-agent")
def evaluate_agent(tasks: Path = typer.Option(paths.AGENT_TASKS), assets: Path = typer.Option(paths.ASSETS),
                   out: Path = typer.Option(paths.AGENT_EVAL), metrics: Path = typer.Option(paths.AGENT_METRICS),
                   prod: Path = typer.Option(paths.PROD_ADAPTER, help="restored prod (clap prod-adapter)")) -> None:
    """The agent chain (agent SFT, then SFT→DPO and SFT→GRPO when enabled) against the base model and the
    agent adapter in prod on the held-out agent tasks: task success, tool-call accuracy (when / how), pass^k,
    hallucination, abstention, with paired-bootstrap CIs."""
    from clap.agent.engine import agent_engine

    cfg = _params()
    if not cfg["agent"]["enabled"]:
        return _agent_off("evaluate-agent", out, ("episodes.jsonl", "next_calls.jsonl", "failed_episodes.jsonl"), metrics)
    from clap.evaluate.summary import agent_table
    from clap.release.gate import agent_chain
    from clap.stages import evaluate_agent as stage

    adapters = agent_chain(cfg)
    _need((tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"),
          *[(paths.adapter(a), f"dvc repro train_{a}") for a in adapters])
    prod_dir, prod_expected = _prod(prod, "agent_adapter")
    in_prod = [("prod", prod_dir, prod_expected)] if prod_dir else []
    engine = agent_engine(cfg, adapters, in_prod)
    result = stage.run(cfg, tasks, assets, engine, [("base", False), *[(a, a) for a in adapters]], out, metrics,
                       prod=bool(in_prod))
    _say_reused(engine)
    console.print(agent_table(result))


def _say_reused(engine) -> None:
    store = getattr(engine, "store", None)
    if store is not None and store.hits + store.misses:
        console.print(f"answers reused from {store.root}: {store.hits} of {store.hits + store.misses} greedy requests")
    if store is not None and store.scores_reused + store.scores_missed:
        console.print(f"log-probabilities reused from {store.root}: {store.scores_reused} of "
                      f"{store.scores_reused + store.scores_missed} scored completions")


def _prod(prod: Path | None, role: str = "adapter") -> tuple[Path | None, dict | None]:
    """The prod baseline (`clap.evaluate.engines.prod_baseline`), said on the console."""
    from clap.evaluate.engines import prod_baseline

    folder, expected, line = prod_baseline(prod, role)
    if line:
        console.print(line)
    return folder, expected


def _engine(cfg: dict, adapter: Path | None, prod: Path | None = None):
    """The extraction engine (`clap.evaluate.engines.extraction_engine`) with prod as its baseline."""
    from clap.evaluate.engines import extraction_engine

    prod_dir, prod_expected = _prod(prod)
    engine, backend = extraction_engine(cfg, adapter, prod_dir, prod_expected)
    console.print(f"generation backend: {backend}")
    return engine


@app.command("prod-adapter")
def prod_adapter(out: Path = typer.Option(paths.PROD_ADAPTER)) -> None:
    """Restore the adapter the registry's prod stage points at (the baseline of evaluate and the gate)."""
    from clap.stages import prod_adapter as stage

    ptr = stage.run(Path("."), out)
    console.print(f"prod: {ptr.get('version') or 'none (baseline = base model)'} → {out}")


@app.command("agent-adapter")
def agent_adapter(version: str = typer.Argument(None, help="a registered version (default: the one in prod)"),
                  out: Path = typer.Option(paths.MODELS / "serving" / "agent")) -> None:
    """Restore the tool-calling agent adapter a release shipped (from the DVC cache, checked byte for byte
    against the bundle at its tag), ready for `Engine` / vLLM to serve."""
    from clap.release import prod
    from clap.release.registry import current

    version = version or (current(Path("."), "prod") or {}).get("version")
    if not version:
        _fail(ValueError("nothing is in prod: name a registered version (`clap registry` lists them)"))
    folder, expected = prod.restore_version_adapter(Path("."), version, out / version / "adapter", role="agent_adapter")
    console.print(f"agent adapter of {version} → {folder} (sha256 {expected['files']['adapter_model.safetensors'][:12]}, "
                  "verified against its release bundle)")


@app.command()
def evaluate(batch: str, adapter: Path = typer.Option(paths.adapter("sft")),
             prod: Path = typer.Option(None, help="restored prod adapter folder (clap prod-adapter); baseline = base if absent"),
             materialized: Path = typer.Option(paths.MATERIALIZED),
             out: Path = typer.Option(None), metrics: Path = typer.Option(paths.EVAL_METRICS)) -> None:
    """Candidate vs prod and vs base on one batch's holdout: records, metrics, deltas with CIs, regressions."""
    from clap.stages import evaluate as stage

    cfg = _params()
    _need((materialized / batch / "sft_eval.jsonl", f"dvc repro materialize@{batch}"), (adapter, "dvc repro train_sft"))
    engine = _engine(cfg, adapter, prod)
    r = stage.run(cfg, materialized / batch / "sft_eval.jsonl", engine, out or paths.EVAL / batch, batch,
                  metrics / f"{batch}.json")
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
    from clap.domain.names import CHAIN
    from clap.evaluate.engines import chain_engine
    from clap.evaluate.summary import decision_table
    from clap.stages import evaluate_decisions as stage

    cfg = _params()
    steps = [s for s in CHAIN if s == "sft" or cfg["train"][s]["enabled"]]
    _need(*[(materialized / b / f, f"dvc repro materialize@{b}") for b in cfg["data"]["batches"]
            for f in ("decision_eval.jsonl", "sft_eval.jsonl")],
          *[(paths.EVAL / b / "records.jsonl", f"dvc repro evaluate@{b}") for b in cfg["data"]["batches"]],
          *[(paths.adapter(s), f"dvc repro train_{s}") for s in steps])
    prod_dir, prod_expected = _prod(prod)
    engine = chain_engine(cfg, steps, prod_dir, prod_expected)
    models = ["base"] + (["prod"] if prod_dir else []) + steps
    result = stage.run(cfg, {b: materialized / b / "decision_eval.jsonl" for b in cfg["data"]["batches"]},
                       engine, models, out, metrics,
                       {b: (materialized / b / "sft_eval.jsonl", paths.EVAL / b / "records.jsonl")
                        for b in cfg["data"]["batches"]})
    _say_reused(engine)
    console.print(decision_table(result))


@app.command()
def index(assets: Path = typer.Option(paths.ASSETS),
          materialized: Path = typer.Option(paths.MATERIALIZED),
          out: Path = typer.Option(paths.INDEX)) -> None:
    """Build the retrieval index over all chunks; report recall@k of the gold chunk per batch."""
    from clap.stages import index as stage

    cfg = _params()
    _need((assets, "dvc repro assetize"), *[(materialized / b, f"dvc repro materialize@{b}") for b in cfg["data"]["batches"]])
    for b, r in stage.run(cfg, assets, materialized, out).items():
        console.print(f"{b}: " + ", ".join(f"{k}={v}" for k, v in r.items()))


@app.command()
def replay(adapter: Path = typer.Option(paths.adapter("sft")),
           prod: Path = typer.Option(None, help="restored prod adapter folder (clap prod-adapter): adds arm P, prod + RAG"),
           assets: Path = typer.Option(paths.ASSETS),
           materialized: Path = typer.Option(paths.MATERIALIZED),
           index_dir: Path = typer.Option(paths.INDEX), out: Path = typer.Option(paths.REPLAY),
           metrics: Path = typer.Option(paths.REPLAY_METRICS)) -> None:
    """The ABCD application-chain replay: base/adapter × with/without retrieval (and prod + RAG when in prod)."""
    from clap.evaluate.summary import abcd_table, contrast_lines
    from clap.stages import replay as stage

    cfg = _params()
    _need((assets, "dvc repro assetize"), (index_dir, "dvc repro index"), (adapter, "dvc repro train_sft"),
          *[(materialized / b, f"dvc repro materialize@{b}") for b in cfg["data"]["batches"]])
    engine = _engine(cfg, adapter, prod)
    result = stage.run(cfg, assets, materialized, index_dir, engine, out, metrics)
    _say_reused(engine)
    console.print(abcd_table(result["arms"]))
    for name, line in contrast_lines(result).items():
        console.print(f"{name}: {line}")


@app.command()
def gate(out: Path = typer.Option(paths.GATE)) -> None:
    """Release gate: promote / canary / hold / reject / rollback with machine-readable reasons."""
    from clap.stages import gate as stage

    d = stage.run(_params(), Path("."), out)
    console.print(f"gate decision: [bold]{d.decision}[/]")
    for r in d.reasons:
        console.print(escape(f"  - {r.rule}: {r.observed} vs {r.threshold} → {r.outcome}" + (f" [{r.batch}]" if r.batch else "")))


@app.command()
def bundle(out: Path = typer.Option(paths.BUNDLE, help="the bundle of the candidate the gate ships"),
           each: Path = typer.Option(paths.BUNDLES, help="one bundle per candidate the gate judged: <candidate>.json")
           ) -> None:
    """Write an evidence bundle per candidate (hashes of everything its verdict rests on); `out` = the shipped one's."""
    from clap.stages import bundle as stage

    result = stage.run(Path("."), _params(), out, each)
    for c, res in result["written"].items():
        console.print(f"bundle {c} → {each / (c + '.json')}: {len(res.files)} files pinned, "
                      f"verdict {result['verdicts'].get(c, res.decision['decision'])}")
    for c in result["missing"]:
        console.print(f"bundle {c}: none — the gate judged it but models/{c}/adapter holds no adapter")
    console.print(f"bundle → {out}: the shipped candidate {result['shipped']}, decision "
                  f"{result['decision']['decision']}; its adapter → {paths.SHIPPED}/adapter (the `clap-adapter` artifact)")
    for c, run_id in result["mlflow_runs"].items():
        console.print(f"mlflow run {run_id} ({c}): tagged with its verdict and the bundle's sha256")


@app.command()
def serve(version: str = typer.Option(None, help="a registered version (default: the one in prod)"),
          adapter: Path = typer.Option(None, help="an unreleased adapter folder dvc.lock pins (served as `candidate`)"),
          host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
          max_batch: int = typer.Option(16, min=1, help="requests decoded together at most (1: one at a time)"),
          batch_wait_ms: float = typer.Option(5.0, min=0.0, help="how long a request waits for others to join it"),
          max_tokens: int = typer.Option(256, min=1, help="a request's max_tokens when it sets none"),
          max_tokens_cap: int = typer.Option(2048, min=1, help="the largest max_tokens a request may ask for"),
          engine: str = typer.Option("hf", help="hf (this machine's CPU/GPU) | vllm (CUDA: runs vLLM's OpenAI "
                                                "server with the verified adapter as its LoRA module)")) -> None:
    """Serve the adapter in prod (or --version, or --adapter) behind an OpenAI-compatible API: /v1/chat/completions,
    /v1/completions, /v1/models. The adapter is restored and checked against its release bundle before it loads;
    requests that arrive together decode in one batch."""
    import os
    import shlex

    from clap.serve import engine as served

    if engine not in ("hf", "vllm"):
        _fail(ValueError(f"--engine {engine!r}: use hf or vllm"))
    cfg = _params()
    name, folder, expected = served.adapter_to_serve(Path("."), version, adapter)
    if engine == "vllm":
        command = served.vllm_command(cfg, name, folder, expected, host, port)
        console.print(f"{name}: passed the serving check; exec {shlex.join(command)}")
        os.execvp(command[0], command)
    import uvicorn

    from clap.serve.app import create_app

    application = create_app(served.cpu_engine(cfg, folder, expected), {name: True, "base": False},
                             default_max_tokens=max_tokens, max_tokens_cap=max_tokens_cap, max_batch=max_batch,
                             wait_ms=batch_wait_ms)
    console.print(f"serving {name} (verified) and base on http://{host}:{port}/v1 (batches of up to {max_batch})")
    uvicorn.run(application, host=host, port=port, log_level="warning")


@app.command()
def export(version: str = typer.Argument(None, help="the registered version (default: the one in prod)"),
           merged: Path = typer.Option(None, help="write the base with the adapter merged here (safetensors)"),
           gguf: Path = typer.Option(None, help="write the merged model as an F32 GGUF file, round-trip checked")) -> None:
    """Export a released adapter, checked against its release bundle first: merged into the base (plain
    transformers loads it) and/or as a GGUF for llama.cpp / Ollama, each with a model card and export.json."""
    from clap.release import export as ex

    if merged is None and gguf is None:
        _fail(ValueError("name an export: --merged DIR and/or --gguf FILE"))
    cfg = _params()
    if gguf is not None:
        scratch = merged or gguf.with_name(gguf.name.removesuffix(".gguf") + "-merged")
        r = ex.export_gguf(Path("."), cfg, version, gguf, scratch)
        check = r["round_trip"]
        console.print(f"{r['tag']} → {gguf} (F32, sha256 {r['gguf_sha256'][:12]}…): round trip "
                      f"{check['answers_equal']}/{check['prompts']} greedy answers equal, max |Δlogit| "
                      f"{check['max_abs_logit_diff']:.1e}; merged folder {scratch}")
    else:
        r = ex.export_merged(Path("."), cfg, version, merged)
        console.print(f"{r['tag']} → {merged}: merged safetensors, model card, export.json")


@app.command()
def verify(path: Path = typer.Argument(paths.BUNDLE)) -> None:
    """Recompute every hash in a bundle; exit 1 naming the first file that differs."""
    from clap.release.bundle import BundleMismatch
    from clap.release.bundle import verify as do_verify

    try:
        b = do_verify(path, Path("."))
    except BundleMismatch as exc:
        console.print(f"[bold red]verify failed:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(code=1) from None
    console.print(f"{path}: {len(b.files)} files verified")


@app.command()
def release() -> None:
    """Tag the committed candidate (GTO format) when the gate allows it and the bundle verifies."""
    from clap.release import registry as rel

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
    from clap.release import registry as rel

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
    from clap.release import registry as rel

    if sync:
        ptr = rel.write_prod_pointer(Path("."))
        console.print(f"{paths.PROD_POINTER}: prod = {ptr['version']}")
    for row in rel.registry(Path(".")):
        console.print(f"{row['version']}  {row['commit']}  current={','.join(row['current']) or '-'}  "
                      f"{' '.join(row['assignments'])}")


@app.command()
def timeline(since: str = typer.Option(None, help="only the rounds committed after this revision")) -> None:
    """The loop round by round from the committed evidence: data, refusals, Δ vs prod, decision, tags."""
    from clap.release import timeline as tl

    console.print(tl.table(tl.rounds(Path("."), since)))


@app.command("demo-annotate")
def demo_annotate(queue: Path = typer.Option(paths.REPAIR_QUEUE),
                  out: Path = typer.Option(paths.SIMULATED_FIXES),
                  share: float = typer.Option(0.5, min=0.0, max=1.0, help="share of the fixable queue to correct")) -> None:
    """SIMULATED annotator for the demo: corrects a share of the repair queue from the demo generator's truth."""
    from clap.demo import annotator, corpus
    from clap.io import read_jsonl, write_jsonl

    if not queue.exists():
        _fail(FileNotFoundError(f"{queue}: no repair queue (run `dvc repro` first)"))
    demo = _params()["demo"]
    truth = corpus.generate(seed=demo["seed"], scale=demo["scale"])["truth"]
    rows = annotator.annotate(read_jsonl(queue), truth, share, seed=demo["seed"])
    write_jsonl(out, rows)
    console.print(f"simulated annotator: {len(rows)} corrected fact rows → {out} (from the generator's ground truth)")


human_app = typer.Typer(no_args_is_help=True, help="Human evaluation round trip through Label Studio.")
canary_app = typer.Typer(no_args_is_help=True, help="The canary: serve, replay traffic, analyse, conclude.")
app.add_typer(human_app, name="human")
app.add_typer(canary_app, name="canary")


@human_app.command("export")
def human_export(out: Path = typer.Option(paths.HUMAN_EXPORT), keys: Path = typer.Option(paths.HUMAN_KEYS)) -> None:
    """Blind Label Studio tasks (and its labelling config) from the evaluation and replay answers."""
    from clap.feedback import human

    cfg = _params()
    _need(*[(paths.eval_metrics(b), f"dvc repro evaluate@{b}") for b in cfg["data"]["batches"]],
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
    from clap.feedback import human

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
                                                         "engine; prints the `vllm serve` line it must run")) -> None:
    """Serve prod and the canary (OpenAI-compatible, 127.0.0.1) and log every request and outcome."""
    import shlex

    from clap.feedback import canary
    from clap.serve.canary import server

    cfg = _params()
    service = canary.from_registry(Path("."), cfg, logs, candidate, upstream)
    if upstream:
        console.print("the adapters passed the serving check; vLLM must serve exactly these folders:\n  "
                      + shlex.join(service.engine.command))
    srv = server(service, port or cfg["canary"]["port"])
    arms = ", ".join(f"{n}={a.version or 'base model'}" for n, a in service.arms.items())
    console.print(f"serving {arms} "
                  f"on http://127.0.0.1:{srv.server_address[1]} (canary share {service.share}); logs → {logs}")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        srv.server_close()


def _print_traffic(cfg: dict, counts: dict) -> None:
    console.print("traffic: " + ", ".join(f"{a} {c['success']}/{c['requests']} {cfg['canary']['outcome']}"
                                          for a, c in counts.items()))


@canary_app.command("traffic")
def canary_traffic(url: str = typer.Option(None, help="default: http://127.0.0.1:<canary.port>"),
                   paired: bool = typer.Option(False, help="send every question to both arms"),
                   limit: int = typer.Option(None, min=1, help="first N held-out replay questions"),
                   until_decided: Path = typer.Option(None, help="the server's log folder (same machine): stop "
                                                                 "sending once its analysis is conclusive")) -> None:
    """The demo's traffic: held-out replay questions, each answer scored against gold, outcomes posted back."""
    from clap.feedback import canary_analysis, traffic

    cfg = _params()
    stop = (lambda: canary_analysis.decided(until_decided, cfg)) if until_decided else None
    counts = traffic.send(cfg, Path("."), url or f"http://127.0.0.1:{cfg['canary']['port']}", paired, limit, stop)
    _print_traffic(cfg, counts)


@canary_app.command("analyze")
def canary_analyze(logs: Path = typer.Argument(paths.CANARY_LOGS), out: Path = typer.Option(paths.CANARY_METRICS),
                   inbox: Path = typer.Option(paths.INBOX),
                   outcome: str = typer.Option(None, help="re-score the logged feedback by another logged score "
                                                          "(e.g. value_exact) instead of its outcome")) -> None:
    """Canary vs prod on the logged outcomes: SPRT, McNemar, bootstrap CI → successful / failed / inconclusive."""
    from clap.data.repair import replace_in_inbox
    from clap.feedback import canary_analysis
    from clap.io import write_json

    requests, feedback = canary_analysis.load_logs(logs)
    if outcome is not None:
        feedback = canary_analysis.rescore(feedback, outcome)
    r = canary_analysis.analyze(requests, feedback, _params()) | {"outcome": outcome or "logged"}
    write_json(out, r)
    failed = canary_analysis.failed_cases(requests, feedback)
    replace_in_inbox(inbox, failed, f"canary:{r['versions']['canary']}")
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
                logs: Path = typer.Option(paths.CANARY_LOGS)) -> None:
    """One canary end to end: serve (in this process), replay the held-out questions as paired traffic,
    analyse, and — for a registered canary — conclude with the promote or rollback tag."""
    from clap.serve.canary import simulated_canary

    cfg = _params()
    counts, r = simulated_canary(Path("."), cfg, logs, limit, candidate)
    _print_traffic(cfg, counts)
    _print_analysis(r, paths.CANARY_METRICS)
    if candidate is None and r["verdict"] in ("successful", "failed"):
        canary_conclude(paths.CANARY_METRICS)


@canary_app.command("conclude")
def canary_conclude(analysis: Path = typer.Option(paths.CANARY_METRICS)) -> None:
    """Act on the analysis: promote the canary to prod (`#prod#K`) or roll it back (`#canary!#K`)."""
    from clap.io import read_json
    from clap.release import registry as rel

    if not analysis.exists():
        _fail(FileNotFoundError(f"{analysis}: no canary analysis (run `clap canary analyze`)"))
    r = rel.conclude_canary(Path("."), read_json(analysis))
    console.print(f"canary {r['version']}: {r['verdict']} → {r['action']} ({', '.join(r['tags'])})")


@app.command("demo-label")
def demo_label(tasks: Path = typer.Option(paths.HUMAN_EXPORT / "tasks.json"),
               out: Path = typer.Option(..., help="where to write the Label Studio JSON export"),
               raters: int = typer.Option(3, min=1), noise: float = typer.Option(0.15, min=0.0, max=1.0),
               seed: int = 0) -> None:
    """SIMULATED raters for the demo: label exported tasks against the generator's gold answers, in Label Studio's export format."""
    import json

    from clap.demo import raters as simulated_raters

    if not tasks.exists():
        _fail(FileNotFoundError(f"{tasks}: no exported tasks (run `clap human export`)"))
    gold = simulated_raters.gold_answers(Path("."), _params()["data"]["batches"])
    export = simulated_raters.label(json.loads(tasks.read_text(encoding="utf-8")), gold, raters, noise, seed)
    out.write_text(json.dumps(export, ensure_ascii=False, indent=1), encoding="utf-8")
    console.print(f"simulated raters: {raters} × {len(export)} tasks → {out} (Label Studio export format)")


@app.command("repair-queue")
def repair_queue(out: Path = typer.Option(paths.REPAIR_QUEUE)) -> None:
    """Collect quarantined, unverifiable, regressed and failed items into the repair queue."""
    from clap.stages import repair_queue as stage

    counts = stage.run(Path("."), out)
    console.print(f"repair queue → {out}: " + (", ".join(f"{k}={v}" for k, v in counts.items()) or "empty"))
    from_production = sum(counts.get(s, 0) for s in stage.PRODUCTION_SOURCES)
    console.print(f"from production (human-flagged answers, failed canary requests): {from_production}")


@app.command()
def report(base: str = typer.Option(None, help="git revision to diff metrics against (default: HEAD)"),
           out: Path = typer.Option(Path("reports"))) -> None:
    """Write reports/report.md (for the pull request) and reports/report.html (with plots)."""
    from clap.evaluate.report import write_reports

    md, page = write_reports(Path("."), out, _params()["data"]["batches"], base)
    console.print(f"report → {md}, {page}")


@app.command()
def demo(override: list[str] = typer.Option(None, "--set", "-S", help="Hydra override on top of conf/, every round")
         ) -> None:
    """The closed loop on the demo corpus, round after round (`demo.rounds` in conf/), each round a commit;
    then a rollback drill and the timeline. Every round composes conf/ with `demo.overrides`, then -S. See
    `clap.demo.rounds`."""
    from clap.config import check, compose
    from clap.demo import rounds
    from clap.demo.rounds import demo_overrides
    from clap.evaluate import summary
    from clap.release import timeline as tl

    overrides = demo_overrides(check(compose([]), "conf/ (composed)")["demo"]["overrides"], override or [])
    schedule = check(compose(overrides), f"conf/ with {' '.join(overrides)}")["demo"]["rounds"]
    console.print(f"demo overrides: {' '.join(overrides) or '(none)'}", soft_wrap=True)

    def after_round(k: int) -> None:
        summary.print_summary(console, Path("."))
        summary.print_loop_summary(console, Path("."), _params()["data"]["batches"])

    def run_canary(k: int) -> dict:
        from clap.release import registry as rel
        from clap.serve.canary import simulated_canary

        cfg = _params()
        version = rel.current(Path("."), "canary")["version"]
        console.rule(f"round {k}: canary {version} on SIMULATED traffic (held-out replay questions, paired)")
        counts, analysis = simulated_canary(Path("."), cfg, paths.CANARY_LOGS / version, 100,
                                                   fail_when_exhausted=True)
        _print_traffic(cfg, counts)
        _print_analysis(analysis, paths.CANARY_METRICS)
        return rel.conclude_canary(Path("."), analysis)

    result = rounds.run(schedule, overrides, lambda line: console.rule(escape(line)), after_round, run_canary)
    for r in result["rounds"]:
        rel = r.get("release")
        console.print(f"round {r['round']} ({r['commit']}): gate [bold]{r['decision']}[/]"
                      + (f" → released {rel['version']} to {rel['stage']} ({rel['tag']})" if rel else "")
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


if __name__ == "__main__":
    app()
