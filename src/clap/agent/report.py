"""The agent evaluation's figures (pure): per-task values, every metric with its CI, the deltas between models.

    clap evaluate-agent   (DVC stage `evaluate_agent` runs the models; this module turns their episodes into
                           metrics/agent.json)

Every metric is first a value per held-out task, so that one paired bootstrap over tasks gives both a model's
interval and the interval of its difference from another model on the same tasks (`clap.evaluate.stats`):
    success, reward, process   the free-running greedy episode's outcome, composite reward and process reward
    hallucinated               a final answer no tool return supports
    n_calls                    tool calls the episode made (finish excluded)
    tool_selection, arguments  next-call accuracy on the gold prefix, the task's mean over its gold turns:
                               the right tool ("when"), then the right tool with valid allowed arguments ("how")
    abstention_recall          on the unanswerable tasks: the agent said the reports do not hold it
    false_abstention           on the answerable tasks: the agent refused although the reports hold the answer
    pass^k                     on sampled models (`agent_pass_k`): C(c, k) / C(n, k), c of n sampled runs succeeding
Abstention precision — the share of the agent's refusals that were right — is a ratio over the episodes that
refused, so it has a model's interval but no paired delta. Every figure is also given per task kind.
"""

from __future__ import annotations

import math

from clap.evaluate.stats import mean_interval, paired_bootstrap

# Per-task metrics: each has a model interval and a paired delta; the last two are defined on a subset of tasks.
TASK_METRICS = ("success", "reward", "process", "hallucinated", "n_calls", "tool_selection", "arguments",
                "abstention_recall", "false_abstention")


def task_values(greedy: list[dict], calls: list[dict], kinds: dict[str, str]) -> dict[str, dict[str, float]]:
    """metric → {task_id: value} for one model, from its greedy episodes (scored by `scoring.episode_scores`) and
    its next-call checks; a task appears under a metric only when the metric is defined on it."""
    out: dict[str, dict[str, float]] = {m: {} for m in TASK_METRICS}
    for x in greedy:
        t = x["task_id"]
        for m in ("success", "reward", "process", "hallucinated", "n_calls"):
            out[m][t] = float(x[m])
        key = "abstention_recall" if kinds[t] == "unanswerable" else "false_abstention"
        out[key][t] = float(x["abstained"])
    turns: dict[str, list[dict]] = {}
    for c in calls:
        turns.setdefault(c["task_id"], []).append(c)
    for t, cs in turns.items():
        out["tool_selection"][t] = sum(c["tool_ok"] for c in cs) / len(cs)
        out["arguments"][t] = sum(c["args_ok"] for c in cs) / len(cs)
    return out


def pass_hat_k_values(successes: dict[str, int], n: int, k: int) -> dict[str, float]:
    """τ-bench's pass^k per task: C(c, k) / C(n, k), the chance that k of the task's n sampled runs all succeed."""
    if k > n:
        return {}
    return {t: math.comb(c, k) / math.comb(n, k) for t, c in successes.items()}


def interval(values: list[float], n_boot: int, ci: float, seed: int = 17) -> dict:
    """`stats.mean_interval` at the agent evaluation's seed."""
    return mean_interval(values, n=n_boot, ci=ci, seed=seed)


def deltas(reference: dict[str, dict[str, float]], new: dict[str, dict[str, float]], n_boot: int, ci: float,
           seed: int = 17) -> dict[str, dict]:
    """new − reference for every task metric both define on at least one common task, paired by task."""
    out = {}
    for m in TASK_METRICS:
        common = sorted(set(reference.get(m, {})) & set(new.get(m, {})))
        if common:
            out[m] = paired_bootstrap([reference[m][t] for t in common], [new[m][t] for t in common],
                                      n=n_boot, ci=ci, seed=seed)
    return out


def abstention_precision(greedy: list[dict], kinds: dict[str, str], n_boot: int, ci: float) -> dict:
    """Of the episodes that refused, the share whose task was unanswerable, with its interval."""
    refused = [float(kinds[x["task_id"]] == "unanswerable") for x in greedy if x["abstained"]]
    return interval(refused, n_boot, ci)


def model_figures(values: dict[str, dict[str, float]], greedy: list[dict], kinds: dict[str, str], n_boot: int,
                  ci: float) -> dict:
    """One model's intervals: every task metric, abstention precision, and per task kind the success,
    hallucination and calls."""
    figures = {m: interval([values[m][t] for t in sorted(values[m])], n_boot, ci) for m in TASK_METRICS}
    figures["abstention_precision"] = abstention_precision(greedy, kinds, n_boot, ci)
    by_kind = {}
    for kind in sorted(set(kinds.values())):
        ids = {t for t, k in kinds.items() if k == kind}
        by_kind[kind] = {m: interval([values[m][t] for t in sorted(ids & set(values[m]))], n_boot, ci)
                         for m in ("success", "hallucinated", "n_calls", "tool_selection", "arguments")}
    return {"metrics": figures, "by_kind": by_kind}


def pass_k_figures(successes: dict[str, int], n_samples: int, pass_k: list[int], kinds: dict[str, str],
                   n_boot: int, ci: float) -> dict:
    """One sampled model's pass^k for each k (`successes`: task → how many of its `n_samples` sampled runs solved
    it): the mean over tasks with its interval, overall and per task kind; an empty interval when k > n."""
    figures, by_kind = {}, {kind: {} for kind in sorted(set(kinds.values()))}
    for k in pass_k:
        per_task = pass_hat_k_values(successes, n_samples, k)
        figures[f"pass^{k}"] = interval([per_task[t] for t in sorted(per_task)], n_boot, ci)
        for kind in by_kind:
            by_kind[kind][f"pass^{k}"] = interval([per_task[t] for t in sorted(per_task) if kinds[t] == kind],
                                                  n_boot, ci)
    return {"metrics": figures, "by_kind": by_kind}


def pass_k_deltas(reference: dict[str, int], new: dict[str, int], n_samples: int, pass_k: list[int], n_boot: int,
                  ci: float) -> dict[str, dict]:
    """new − reference in pass^k for each k ≤ n, paired by the tasks both were sampled on."""
    common = sorted(set(reference) & set(new))
    out = {}
    for k in (k for k in pass_k if k <= n_samples):
        ref, nw = pass_hat_k_values(reference, n_samples, k), pass_hat_k_values(new, n_samples, k)
        out[f"pass^{k}"] = paired_bootstrap([ref[t] for t in common], [nw[t] for t in common], n=n_boot, ci=ci,
                                            seed=17)
    return out


def kind_deltas(reference: dict[str, dict[str, float]], new: dict[str, dict[str, float]], kinds: dict[str, str],
                n_boot: int, ci: float) -> dict[str, dict]:
    """new − reference in task success, per task kind."""
    out = {}
    for kind in sorted(set(kinds.values())):
        ids = sorted({t for t, k in kinds.items() if k == kind} & set(reference["success"]) & set(new["success"]))
        if ids:
            out[kind] = paired_bootstrap([reference["success"][t] for t in ids], [new["success"][t] for t in ids],
                                         n=n_boot, ci=ci, seed=17)
    return out
