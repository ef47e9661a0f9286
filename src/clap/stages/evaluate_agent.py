"""evaluate agent: the agent adapters against the base model and prod on the held-out agent tasks.

    clap evaluate-agent --prod models/prod   (DVC stage `evaluate_agent`: data/eval_agent/, metrics/agent.json)

The held-out tasks (`agent.evaluate.max_tasks`, the kinds in turn) are those of companies, phrasings and tool
compositions no training task has (`clap.agent.tasks.leakage`). Two measurements per model (base, the agent
adapter in prod when the release in prod shipped one, then each agent adapter of the chain), every turn under
the action grammar when `generate.constrained` is on, as serving would decode:
  1. free-running greedy episodes → task success, the reward parts, hallucination (a final answer no
     tool return supports), abstention both ways (refusing an answerable task, answering an unanswerable
     one), calls and steps per task;
  2. next-call accuracy on the gold prefix (BFCL's AST rules) → "when" (the right tool) apart from
     "how" (its arguments).
Every metric carries its paired-bootstrap CI over tasks, overall and per task kind (`clap.agent.report`), and
so does every difference: every adapter − base, every chain step − prod (the gate's reference when there is
one), the later steps − agent SFT.
Every episode is written with its full trajectory to data/eval_agent/episodes.jsonl; the last model's
failed greedy episodes, with why, to failed_episodes.jsonl (the repair queue takes them). Sampled runs and pass^k
are the `agent_pass_k` stage's, after the gate, on the adapter it ships and prod's only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from clap import paths
from clap.agent import chat, report, scoring
from clap.agent.engine import agent_engine, prod_agent
from clap.agent.episode import engine_policy, next_calls, rollout
from clap.agent.tasks import by_kind_round_robin, load
from clap.agent.tools import ReportTools
from clap.config import Agent, Evaluate, Params
from clap.evaluate.engines import reuse_lines
from clap.evaluate.summary import agent_table
from clap.io import atomic_dir, check_output_dir, require_inputs, write_json, write_jsonl, write_switched_off
from clap.stages import trainers
from clap.stages.spec import StageSpec
from clap.train.spec import AGENT

SCORES = ("success", "reward", "outcome", "format", "process", "efficiency", "hallucinated", "n_calls", "n_steps")


def run(a: Agent, tasks_dir: Path, assets: Path, engine, arms: list[tuple[str, bool | str]], out: Path,
        metrics_file: Path, prod: bool = False, *, evaluate: Evaluate, batches: list[str], constrained: bool) -> dict:
    """`arms`: (name, use_adapter) per model: the base model first (`("base", False)`), then the chain
    in order (agent SFT, then the steps that continue it, each also compared with agent SFT). `prod`: the
    engine also serves the agent adapter in prod (adapter `prod`), every chain step's reference. `a`: the `agent`
    section; `evaluate`: the intervals; `batches`: the tools' data (`data.batches`); `constrained`: actions under the
    action grammar (`generate.constrained`)."""
    check_output_dir(out, (Path(tasks_dir),))
    e, weights = a.evaluate, a.rewards.weights.model_dump()
    tasks = by_kind_round_robin(load(tasks_dir, "eval"), e.max_tasks)
    tools = ReportTools.over_batches(assets, batches)
    schema = chat.action_schema(tools.schemas) if constrained else None
    by_id = {t["task_id"]: t for t in tasks}
    kinds = {t["task_id"]: t["kind"] for t in tasks}
    episodes, calls, per_arm, values = [], [], {}, {}
    chain = arms[1:]
    models = arms[:1] + ([("prod", "prod")] if prod else []) + chain
    for name, use_adapter in models:
        greedy = engine_policy(engine, use_adapter, a.turn_tokens, e.batch_size, schema)
        for ep in rollout(greedy, tools, tasks, a.max_steps, a.max_new_tokens):
            task = by_id[ep["task_id"]]
            episodes.append({"model": name, "run": "greedy", "batch": task["batch"], "kind": task["kind"], **ep,
                             **scoring.episode_scores(ep, task, a.rewards.per_extra_call, weights)})
        calls += [c | {"model": name} for c in next_calls(greedy, tools, tasks)]
        mine, my_calls = [x for x in episodes if x["model"] == name], [c for c in calls if c["model"] == name]
        values[name] = report.task_values(mine, my_calls, kinds)
        per_arm[name] = _summary(mine, my_calls, kinds, values[name], evaluate)
    result = {"n_tasks": len(tasks), "by_kind_tasks": {k: sum(t["kind"] == k for t in tasks)
                                                       for k in sorted({t["kind"] for t in tasks})},
              "models": per_arm, **_deltas(values, kinds, models, chain, prod, evaluate),
              "per_batch": {b: {name: _means([x for x in episodes if x["model"] == name and x["run"] == "greedy"
                                              and x["batch"] == b]) for name, _ in models}
                            for b in sorted({t["batch"] for t in tasks})}}
    failed = [{"task_id": x["task_id"], "batch": x["batch"], "kind": x["kind"], "model": x["model"],
               "reason": failure_reason(x), "question": by_id[x["task_id"]]["question"],
               "gold_answer": by_id[x["task_id"]]["answer"], "answer": x["answer"], "messages": x["messages"]}
              for x in episodes if x["model"] == arms[-1][0] and x["run"] == "greedy" and not x["success"]]
    with atomic_dir(out, (Path(tasks_dir),)) as tmp:
        write_jsonl(tmp / "episodes.jsonl", episodes)
        write_jsonl(tmp / "next_calls.jsonl", calls)
        write_jsonl(tmp / "failed_episodes.jsonl", failed)
    write_json(metrics_file, result)
    return result


def failure_reason(episode: dict) -> str:
    """Why a failed episode failed, for the repair queue: it never finished, or finished with the wrong
    answer (and whether that answer was unsupported by any tool return or came after invalid turns)."""
    if episode["stop"] != "finish":
        return f"no_finish:{episode['stop']}"
    if episode["abstained"]:
        return "wrong_abstention"
    if episode["hallucinated"]:
        return "wrong_answer_unsupported"
    return "wrong_answer_after_invalid_turns" if episode["format"] < 1 else "wrong_answer"


def _deltas(values: dict[str, dict], kinds: dict[str, str], models: list[tuple], chain: list[tuple], prod: bool,
            ev: Evaluate) -> dict:
    """The delta tables (every task metric, paired by task: `values`, model → `report.task_values`) and task success
    per kind for each of them."""
    pairs = {"deltas_vs_base": {n: (models[0][0], n) for n, _ in models[1:]},
             "deltas_chain": {f"{n}-{chain[0][0]}": (chain[0][0], n) for n, _ in chain[1:]},
             **({"deltas_vs_prod": {n: ("prod", n) for n, _ in chain}} if prod else {})}
    out = {table: {key: report.deltas(values[ref], values[new], ev.bootstrap, ev.ci) for key, (ref, new) in rows.items()}
           for table, rows in pairs.items()}
    out["success_by_kind"] = {table: {key: report.kind_deltas(values[ref], values[new], kinds, ev.bootstrap, ev.ci)
                                      for key, (ref, new) in rows.items()} for table, rows in pairs.items()}
    return out


def _means(rows: list[dict]) -> dict:
    n = len(rows) or 1
    return {m: round(sum(x[m] for x in rows) / n, 4) for m in SCORES} | {"n": len(rows)}


def _summary(greedy: list[dict], calls: list[dict], kind: dict[str, str], values: dict[str, dict],
             ev: Evaluate) -> dict:
    """One model's means (the gate's keys), then every figure with its CI (`clap.agent.report.model_figures`, from
    the model's per-task `values`)."""
    unanswerable = [x for x in greedy if kind[x["task_id"]] == "unanswerable"]
    answerable = [x for x in greedy if kind[x["task_id"]] != "unanswerable"]
    n = len(calls) or 1
    right_tool = [c for c in calls if c["tool_ok"]]
    return _means(greedy) | {
        "tool_selection_accuracy": round(len(right_tool) / n, 4),
        "argument_accuracy": round(sum(c["args_ok"] for c in right_tool) / (len(right_tool) or 1), 4),
        "tool_call_accuracy": round(sum(c["args_ok"] for c in calls) / n, 4),
        "abstention_accuracy": round(sum(x["abstained"] for x in unanswerable) / (len(unanswerable) or 1), 4),
        "false_abstention_rate": round(sum(x["abstained"] for x in answerable) / (len(answerable) or 1), 4),
        "finished": round(sum(x["finished"] for x in greedy) / (len(greedy) or 1), 4),
        "by_kind": {k: _means([x for x in greedy if kind[x["task_id"]] == k])["success"]
                    for k in sorted(set(kind.values()))},
        "with_ci": report.model_figures(values, greedy, kind, ev.bootstrap, ev.ci)}


def main(params: Params, tasks: Path = paths.AGENT_TASKS, assets: Path = paths.ASSETS, out: Path = paths.AGENT_EVAL,
         metrics: Path = paths.AGENT_METRICS, prod: Path = paths.PROD_ADAPTER) -> Iterator:
    """The agent chain (agent SFT, then SFT→DPO and SFT→GRPO when enabled) against the base model and the
    agent adapter in prod on the held-out agent tasks: task success, tool-call accuracy (when / how), pass^k,
    hallucination, abstention, with paired-bootstrap CIs."""
    if not params.agent.enabled:
        yield write_switched_off("evaluate-agent", "agent.enabled", out,
                                 ("episodes.jsonl", "next_calls.jsonl", "failed_episodes.jsonl"), metrics)
        return
    adapters = trainers.switched_on(AGENT, params)
    require_inputs([(tasks, "dvc repro agent_tasks"), (assets, "dvc repro assetize"),
                    *[(paths.adapter(a), f"dvc repro train_{a}") for a in adapters]])
    in_prod, line = prod_agent(prod)
    if line:
        yield line
    engine = agent_engine(params.generate, params.model, adapters, in_prod)
    result = run(params.agent, tasks, assets, engine, [("base", False), *[(a, a) for a in adapters]], out, metrics,
                 prod=bool(in_prod), evaluate=params.evaluate, batches=params.data.batches,
                 constrained=params.generate.constrained)
    yield from reuse_lines(engine)
    yield agent_table(result)


STAGE = StageSpec(name="evaluate_agent", group="agent", main=main, helps={"prod": "restored prod (clap prod-adapter)"})
