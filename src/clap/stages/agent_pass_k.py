"""agent pass^k: the agent adapter the gate ships, and the one in prod, sampled on the held-out agent tasks.

    clap agent-pass-k --prod models/prod   (DVC stage `agent_pass_k`, after the gate: data/eval_agent_pass_k/,
                                            metrics/agent_pass_k.json)

τ-bench's pass^k asks whether the agent solves a task every time, not once: `agent.evaluate.samples` sampled runs per
held-out task (temperature `agent.evaluate.temperature`, every turn under the action grammar when
`generate.constrained` is on, each run's draws seeded 1000 + run so a model's sampled episodes are the same in every
round and the answer store keeps them), pass^k = C(c, k) / C(n, k) per task for each k of `agent.evaluate.pass_k`,
with its paired-bootstrap CI overall and per kind, and the shipped adapter − prod difference paired by task.

Sampled runs cost a greedy evaluation each, so they are spent where a release needs them: on the agent adapter the
gate ships (data/gate/agent.json: the gate's agent candidate, when its verdict is promote or canary) and on the agent adapter in
prod — not on every step of the chain, which `evaluate_agent` runs greedy. With neither (the gate held the agent and
no release shipped one) the stage writes that it sampled nothing, and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from clap import paths
from clap.agent import chat, report, scoring
from clap.agent.engine import agent_engine, prod_agent
from clap.agent.episode import engine_policy, rollout
from clap.agent.tasks import by_kind_round_robin, load
from clap.agent.tools import ReportTools
from clap.config import Agent, Evaluate, Params
from clap.evaluate.engines import reuse_lines
from clap.evaluate.intervals import ci_text
from clap.io import atomic_dir, check_output_dir, read_json, require_inputs, write_json, write_jsonl, write_switched_off
from clap.release.bundle import SHIPPABLE
from clap.stages.spec import StageSpec


def run(a: Agent, tasks_dir: Path, assets: Path, engine, models: list[tuple[str, bool | str]], out: Path,
        metrics_file: Path, shipped: dict, *, evaluate: Evaluate, batches: list[str], constrained: bool) -> dict:
    """`models`: (name, the engine's adapter switch) of the models to sample — the shipped agent adapter, then prod's
    (named `prod`) — possibly none; `shipped`: what the gate decided for the agent ({candidate, decision}), recorded
    beside the figures. `a`: the `agent` section; `evaluate`: the intervals; `batches`: the tools' data;
    `constrained`: actions under the action grammar (`generate.constrained`)."""
    import torch

    check_output_dir(out, (Path(tasks_dir),))
    e = a.evaluate
    tasks = by_kind_round_robin(load(tasks_dir, "eval"), e.max_tasks)
    tools = ReportTools.over_batches(assets, batches)
    schema = chat.action_schema(tools.schemas) if constrained else None
    by_id = {t["task_id"]: t for t in tasks}
    kinds = {t["task_id"]: t["kind"] for t in tasks}
    weights = a.rewards.weights.model_dump()
    episodes, successes = [], {}
    for name, use_adapter in models:
        successes[name] = {t["task_id"]: 0 for t in tasks}
        for k in range(e.samples):  # run k draws with seed 1000 + k per request: the same episodes every time
            torch.manual_seed(1000 + k)  # the draws without a grammar (generate.constrained off)
            policy = engine_policy(engine, use_adapter, a.turn_tokens, e.batch_size, schema, e.temperature,
                                   seed=1000 + k)
            for ep in rollout(policy, tools, tasks, a.max_steps, a.max_new_tokens):
                task = by_id[ep["task_id"]]
                scores = scoring.episode_scores(ep, task, a.rewards.per_extra_call, weights)
                successes[name][ep["task_id"]] += int(scores["success"])
                episodes.append({"model": name, "run": f"sample{k}", "batch": task["batch"], "kind": task["kind"],
                                 **ep, **scores})
    result = {"n_tasks": len(tasks), "samples": e.samples, "temperature": e.temperature,
              "shipped": {"candidate": shipped.get("candidate"), "decision": shipped.get("decision")},
              "sampled": [name for name, _ in models] or None,
              "models": {name: {"pass_hat_k": {str(k): scoring.pass_hat_k(list(wins.values()), e.samples, k)
                                               for k in e.pass_k},
                                "with_ci": report.pass_k_figures(wins, e.samples, e.pass_k, kinds, evaluate.bootstrap,
                                                                 evaluate.ci)}
                         for name, wins in successes.items()}}
    if not models:
        result["note"] = (f"nothing sampled: the gate's agent verdict was {shipped.get('decision') or 'none'} and no "
                          "agent adapter is in prod")
    if len(models) == 2:  # the shipped adapter − prod's, paired by task
        (new, _), (ref, _) = models
        result["delta_vs_prod"] = report.pass_k_deltas(successes[ref], successes[new], e.samples, e.pass_k,
                                                       evaluate.bootstrap, evaluate.ci)
    with atomic_dir(out, (Path(tasks_dir),)) as tmp:
        write_jsonl(tmp / "episodes.jsonl", episodes)
    write_json(metrics_file, result)
    return result


def main(params: Params, tasks: Path = paths.AGENT_TASKS, assets: Path = paths.ASSETS, gate: Path = paths.GATE_AGENT,
         out: Path = paths.AGENT_PASS_K, metrics: Path = paths.AGENT_PASS_K_METRICS,
         prod: Path = paths.PROD_ADAPTER) -> Iterator[str]:
    """pass^k (sampled runs on the held-out agent tasks) of the agent adapter the gate ships and of prod's, with
    CIs and their paired difference."""
    if not params.agent.enabled:
        yield write_switched_off("agent-pass-k", "agent.enabled", out, ("episodes.jsonl",), metrics)
        return
    require_inputs([(tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"), (gate, "dvc repro gate")])
    shipped = read_json(gate)
    ships = shipped.get("candidate") if shipped.get("decision") in SHIPPABLE else None
    if ships:
        require_inputs([(paths.adapter(ships), f"dvc repro train_{ships}")])
    in_prod, line = prod_agent(prod)
    if line:
        yield line
    models = [*([(ships, ships)] if ships else []), *([("prod", "prod")] if in_prod else [])]
    engine = agent_engine(params.generate, params.model, [ships] if ships else [], in_prod)
    result = run(params.agent, tasks, assets, engine, models, out, metrics, shipped, evaluate=params.evaluate,
                 batches=params.data.batches, constrained=params.generate.constrained)
    yield from reuse_lines(engine)
    for name, m in result["models"].items():
        yield f"{name}: " + "  ".join(f"pass^{k} {v:.3f}" for k, v in m["pass_hat_k"].items() if v is not None)
    for k, d in (result.get("delta_vs_prod") or {}).items():
        yield f"{ships} − prod {k}: {ci_text(d)}"
    if result.get("note"):
        yield result["note"]


STAGE = StageSpec(name="agent_pass_k", group="agent", main=main, helps={
    "gate": "the gate's agent verdict (which agent adapter ships)", "prod": "restored prod (clap prod-adapter)"})
