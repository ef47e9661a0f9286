"""The demo's printed summary: what the loop found, per stage, read from the files it wrote."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clap import paths
from clap.domain.names import ARM_LABELS, REPLAY_ANSWER_METRICS
from clap.evaluate.intervals import ci_bounds, ci_text
from clap.io import read_json_if_exists as _load


def print_summary(console: Console, root: Path) -> None:
    report = _load(root / paths.ASSETS / "report.json")
    if report:
        t = Table(title="assetize")
        for col in ("input", "rows in", "kept", "quarantined"):
            t.add_column(col)
        for name, e in report["inputs"].items():
            t.add_row(name, str(e["rows_in"]), str(e["kept"]), str(e["quarantined"]))
        console.print(t)
        console.print("noise found/fixed: " + ", ".join(f"{k}={v}" for k, v in report["noise"].items() if v))
    batches = sorted(p.name for p in (root / paths.MATERIALIZED).glob("*") if p.is_dir())
    if batches:
        t = Table(title="materialize (overlap before → after cleaning)")
        for col in ("batch", "train", "holdout", "near-dup overlap", "exact overlap", "repair"):
            t.add_column(col)
        for b in batches:
            q = _load(root / paths.MATERIALIZED / b / "data_quality.json")
            t.add_row(b, str(q["train_size"]), str(q["holdout_size"]),
                      f"{q['before']['near_duplicate_overlap']} → {q['after']['near_duplicate_overlap']}",
                      f"{q['before']['exact_input_overlap']} → {q['after']['exact_input_overlap']}",
                      str(q["repair_queue"]))
        console.print(t)


REPLAY_COLS = [*REPLAY_ANSWER_METRICS, "retrieved_target_chunk", "p95_latency_ms"]


def abcd_table(arms: dict) -> Table:
    t = Table(title="application-chain replay (ABCD)")
    t.add_column("arm")
    for c in REPLAY_COLS:
        t.add_column(c.replace("_", " "))
    for arm, m in arms.items():
        t.add_row(f"{arm}: {ARM_LABELS[arm]}", *[f"{m[c]:.2f}" if c != "p95_latency_ms" else f"{m[c]:.0f}" for c in REPLAY_COLS])
    return t


def contrast_lines(replay: dict) -> dict[str, str]:
    """`B-A: core fields +0.12 [+0.05, +0.19], …` per contrast in metrics/replay.json (pure)."""
    out = {}
    for name, per_metric in replay.get("contrasts", {}).items():
        out[name] = ", ".join(f"{m.replace('_', ' ')} {ci_text(d, digits=2)}"
                              for m, d in per_metric.items() if d["delta"] is not None)
    return out


def latency_line(latency: dict) -> str:
    """`latency vs prod: candidate p95 2,310 ms / 2,240 ms = 1.03 (4 requests, interleaved)` (pure)."""
    ref, t = next(iter(latency.items()))
    if "abstained" in t:
        return f"latency vs {ref}: not timed ({t['abstained']})"
    return (f"latency vs {ref}: candidate p95 {t['candidate_p95_ms']:,.0f} ms / {t['reference_p95_ms']:,.0f} ms = "
            f"{t['p95_ratio']:.2f} ({t['n']} requests, interleaved)")


DECISION_COLS = ["decision_score", "decision_pass", "action_accuracy", "cause_accuracy", "risk_focus_accuracy",
                 "rank_accuracy", "margin_chosen_rejected"]


def decision_table(result: dict) -> Table:
    """metrics/decisions.json as a table: one row per model, then each step's delta with its CI, and the
    later steps' extraction overall score against SFT on the extraction holdouts."""
    t = Table(title=f"decision evaluation ({result['n']} held-out cases; Δ decision score [95% CI])")
    t.add_column("model")
    for c in DECISION_COLS:
        t.add_column(c.replace("_", " "))
    t.add_column("Δ vs start")
    ext = result.get("extraction") or {"models": {}, "deltas": {}}
    t.add_column(f"extraction overall ({ext.get('n', 0)} samples; Δ vs SFT)")
    start = {"sft": "prod" if "prod" in result["models"] else "base", "dpo": "sft", "grpo": "sft"}
    for name, m in result["models"].items():
        d = result["deltas"].get(f"{name}-{start.get(name)}", {}).get("decision_score")
        e = ext["deltas"].get(f"{name}-sft", {}).get("overall_score")
        score = ext["models"].get(name, {}).get("overall_score")
        t.add_row(name, *[f"{m[c]:.2f}" for c in DECISION_COLS],
                  f"{ci_text(d, digits=2)} vs {start[name]}" if d else "",
                  "" if score is None else f"{score:.2f}" + (
                      f" ({ci_text(e, digits=2)})" if e else ""))
    return t


AGENT_COLS = ("success", "tool_selection_accuracy", "argument_accuracy", "tool_call_accuracy", "abstention_accuracy",
              "false_abstention_rate", "hallucinated", "reward", "n_calls", "n_steps")


def agent_table(result: dict) -> Table:
    """metrics/agent.json as a table: one row per model and the Δ success vs base (and vs the agent adapter in prod,
    when there is one) with its CI."""
    refs = ["base"] + (["prod"] if "deltas_vs_prod" in result else [])
    t = Table(title=f"agent evaluation ({result['n_tasks']} held-out tasks; Δ task success [95% CI])")
    t.add_column("model")
    for c in AGENT_COLS:
        t.add_column(c.replace("_accuracy", " acc").replace("_", " "))
    for ref in refs:
        t.add_column(f"Δ success vs {ref}")
    for name, m in result["models"].items():
        deltas = [result[f"deltas_vs_{ref}"].get(name, {}).get("success") for ref in refs]
        success = (m.get("with_ci") or {}).get("metrics", {}).get("success") or {}
        cells = [f"{m[c]:.2f}" + (f" {ci_bounds(success, digits=2, signed=False)}"
                                  if c == "success" and success.get("n") else "") for c in AGENT_COLS]
        t.add_row(name, *cells, *[f"{ci_text(d, digits=2)}" if d else "" for d in deltas])
    return t


def batch_table(root: Path, batches: list[str]) -> Table | None:
    rows = [(b, _load(root / paths.eval_metrics(b))) for b in batches]
    rows = [(b, m) for b, m in rows if m]
    if not rows:
        return None
    t = Table(title="evaluate: candidate vs base per batch (Δ with 95% paired-bootstrap CI)")
    for c in ("batch", "n", "overall base → cand", "Δ overall [CI]", "value acc", "evidence acc", "parse ok",
              "halluc.", "p95 ms"):
        t.add_column(c)
    for b, m in rows:
        d = m["deltas"]["overall_score"]
        base, cand = m["baseline"], m["candidate"]
        t.add_row(b, str(m["n"]), f"{base['overall_score']:.3f} → {cand['overall_score']:.3f}",
                  f"{ci_text(d, digits=3)}",
                  f"{base['value_accuracy']:.2f} → {cand['value_accuracy']:.2f}",
                  f"{base['evidence_accuracy']:.2f} → {cand['evidence_accuracy']:.2f}",
                  f"{base['parse_ok']:.2f} → {cand['parse_ok']:.2f}",
                  f"{base['hallucination_rate']:.2f} → {cand['hallucination_rate']:.2f}",
                  f"{base['p95_latency_ms']:.0f} → {cand['p95_latency_ms']:.0f}")
    return t


def print_loop_summary(console: Console, root: Path, batches: list[str], trainers: list[str]) -> None:
    """Everything after training: the guards of `trainers` (the registry's), per-batch deltas, ABCD, and the gate's
    decision with reasons."""
    for kind in trainers:
        g = _load(root / paths.guard_report(kind))
        if g:
            trip = g["trip"]
            console.print(f"guard {kind}: {g['status']}" + (f" — {trip['rule']} at step {trip['step']} "
                                                           f"(value {trip['value']}, threshold {trip['threshold']})"
                                                           if trip else f" after {g['steps']} steps")
                          + f"; peaks {g['peaks']}")
    t = batch_table(root, batches)
    if t:
        console.print(t)
    replay = _load(root / paths.REPLAY_METRICS)
    if replay:
        console.print(abcd_table(replay["arms"]))
        for name, line in contrast_lines(replay).items():
            console.print(f"  {name}: {line}")
    decisions = _load(root / paths.DECISION_METRICS)
    if decisions:
        console.print(decision_table(decisions))
    agent = _load(root / paths.AGENT_METRICS)
    if agent and agent.get("status") == "disabled":
        console.print(f"agent track: {agent['note']}")
    elif agent:
        console.print(agent_table(agent))
    gate = _load(root / paths.GATE)
    if gate:
        console.print(f"\n[bold]gate decision: {gate['decision'].upper()}[/] (policy {gate['policy']}, "
                      f"candidate {gate['candidate']}; requires RAG: {gate['requires_rag']}; trainers {gate['trainers']})")
        for r in gate["reasons"]:
            console.print(escape(f"  - {r['rule']}: observed {r['observed']} vs threshold {r['threshold']} → "
                                 f"{r['outcome']}" + (f" [{r['batch']}]" if r.get("batch") else "")))
        if gate.get("agent"):
            a = gate["agent"]
            console.print(f"[bold]agent adapter: {a['decision'].upper()}[/] (candidate {a['candidate']})")
            for r in a["reasons"]:
                console.print(escape(f"  - {r['rule']}: observed {r['observed']} vs threshold {r['threshold']} → "
                                     f"{r['outcome']}"))
