"""Reports for review: Markdown for the pull request, static HTML with the plots.

    clap report [--base main] [--out reports/]

The Markdown holds the metric diff against the base revision (`dvc metrics diff`), the per-batch
table with confidence intervals, the ABCD table, the human verdict and the last canary analysis when
there are ones, the guard summary and the gate decision with its reasons. The HTML adds plots (per-batch deltas with CIs, training loss/KL/reward, ABCD bars)
embedded as PNG, so the file is self-contained and renders anywhere.
"""

from __future__ import annotations

import base64
import csv
import html
import io
from pathlib import Path

from clap import paths, vcs
from clap.domain.names import ARM_LABELS
from clap.evaluate.intervals import ci_bounds, ci_text
from clap.evaluate.summary import DECISION_COLS, REPLAY_COLS, contrast_lines
from clap.io import atomic_write_text
from clap.io import read_json_if_exists as _load


def metrics_diff(root: Path, base: str | None) -> str:
    r = vcs.dvc(root, "metrics", "diff", "--md", *([base] if base else []))
    if r.returncode != 0:
        return f"_`dvc metrics diff` unavailable: {r.stderr.strip()[:300]}_"
    return r.stdout.strip() or "_no metric changed_"


def markdown(root: Path, batches: list[str], base: str | None, trainers: list[str]) -> str:
    """reports/report.md: the gate's decision and reasons, then the evidence section by section; `trainers`: whose
    guard reports to list (the registry's, `clap.stages.trainers`)."""
    out = ["# CLAP candidate report", ""]
    out += _gate_lines(_load(root / paths.GATE))
    out += _batch_lines(root, batches)
    out += _replay_lines(_load(root / paths.REPLAY_METRICS))
    out += _decision_lines(_load(root / paths.DECISION_METRICS))
    out += _human_lines(_load(root / paths.HUMAN_METRICS)) + _canary_lines(_load(root / paths.CANARY_METRICS))
    out += _guard_lines(root, trainers)
    out += ["", f"## Metric diff against `{base or 'HEAD'}`", "", metrics_diff(root, base), ""]
    return "\n".join(out)


def _gate_lines(gate: dict | None) -> list[str]:
    if not gate:
        return []
    out = [f"**Gate decision: `{gate['decision']}`** (policy `{gate['policy']}`, candidate `{gate['candidate']}`, "
           f"requires RAG: {gate['requires_rag']})", ""]
    out += ["| rule | batch | observed | threshold | outcome |", "|---|---|---|---|---|"]
    out += [f"| {r['rule']} | {r.get('batch') or ''} | {r['observed']} | {r['threshold']} | {r['outcome']} |"
            for r in gate["reasons"]] or ["| — | | | | |"]
    out.append("")
    if gate.get("candidates"):
        out += ["| chain candidate | decision | rules that fired |", "|---|---|---|"]
        out += [f"| {c}{' (ships)' if c == gate['candidate'] else ''} | {v['decision']} | "
                + "; ".join(f"{r['rule']} {r['observed']} → {r['outcome']}" for r in v["reasons"]
                            if r["outcome"] != "info") + " |" for c, v in gate["candidates"].items()]
        out.append("")
    return out


def _batch_lines(root: Path, batches: list[str]) -> list[str]:
    out = ["## Per batch: candidate vs base (Δ with 95% paired-bootstrap CI)", "",
           "| batch | n | overall base | overall cand | Δ overall | CI | value acc | evidence acc | hallucination | p95 ms |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for b in batches:
        m = _load(root / paths.eval_metrics(b))
        if not m:
            continue
        d, bl, cd = m["deltas"]["overall_score"], m["baseline"], m["candidate"]
        out.append(f"| {b} | {m['n']} | {bl['overall_score']:.3f} | {cd['overall_score']:.3f} | {d['delta']:+.3f} | "
                   f"{ci_bounds(d)} | {bl['value_accuracy']:.2f} → {cd['value_accuracy']:.2f} | "
                   f"{bl['evidence_accuracy']:.2f} → {cd['evidence_accuracy']:.2f} | "
                   f"{bl['hallucination_rate']:.2f} → {cd['hallucination_rate']:.2f} | "
                   f"{bl['p95_latency_ms']:.0f} → {cd['p95_latency_ms']:.0f} |")
    return out


def _replay_lines(replay: dict | None) -> list[str]:
    if not replay:
        return []
    cols = REPLAY_COLS
    out = ["", f"## Application-chain replay (ABCD, {replay['n_cases']} cases)", "",
           "| arm | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for arm, m in replay["arms"].items():
        out.append(f"| {arm}: {ARM_LABELS[arm]} | " + " | ".join(f"{m[c]:.2f}" if c != "p95_latency_ms" else f"{m[c]:.0f}"
                                                        for c in cols) + " |")
    return out + [""] + [f"- {name} (paired bootstrap, {replay['n_cases']} cases): {line}"
                         for name, line in contrast_lines(replay).items()]


def _decision_lines(decisions: dict | None) -> list[str]:
    if not (decisions and decisions["n"]):
        return []
    cols = DECISION_COLS
    out = ["", f"## Decision task ({decisions['n']} held-out cases)", "",
           "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    out += [f"| {m} | " + " | ".join(f"{v[c]:.2f}" for c in cols) + " |" for m, v in decisions["models"].items()]
    out += [""] + [f"- {k}: decision score {ci_text(d['decision_score'])}, rank accuracy "
                   f"{ci_text(d['rank_accuracy'])}" for k, d in decisions["deltas"].items()]
    ext = decisions.get("extraction")
    if ext:
        out += ["", f"Extraction, the later steps against SFT ({ext['n']} holdout samples, every batch):", ""]
        out += [f"- {k}: overall score {ci_text(d['overall_score'])}, hallucination rate "
                f"{ext['models'][k.split('-')[0]]['hallucination_rate']:.2f}" for k, d in ext["deltas"].items()]
    return out


def _guard_lines(root: Path, trainers: list[str]) -> list[str]:
    out = ["", "## Training guards", "", "| trainer | status | tripped rule | step | peaks |", "|---|---|---|---|---|"]
    for kind in trainers:
        g = _load(root / paths.guard_report(kind))
        if g:
            t = g["trip"] or {}
            peaks = ", ".join(f"{k}={v:.4g}" for k, v in g["peaks"].items() if v is not None)
            out.append(f"| {kind} | {g['status']} | {t.get('rule', '')} | {t.get('step', '')} | {peaks} |")
    return out


def _ci(v: dict, key: str = "mean", signed: bool = False) -> str:
    return "—" if v.get(key) is None else ci_text(v, key, digits=2, signed=signed)


def _human_lines(human: dict | None) -> list[str]:
    """The human verdict (metrics/human.json) as the reviewer reads it: means, deltas, agreement, calibration."""
    if not human or not human.get("imported"):
        return []
    scales = list(next(iter(human["models"].values())))
    out = ["", f"## Human evaluation (export {human['export_id']}, {human['labels']} labels by "
               f"{len(human['annotators'])} annotators, {human['cancelled']} cancelled)", "",
           "| model | " + " | ".join(scales) + " |", "|---" * (len(scales) + 1) + "|"]
    out += [f"| {m} | " + " | ".join(_ci(v[s]) for s in scales) + " |" for m, v in human["models"].items()]
    for name, d in human["deltas"].items():
        out.append(f"| {name} | " + " | ".join(_ci(d[s], "delta", True) if s in d else "—" for s in scales) + " |")
    out += ["", "- agreement (Krippendorff's α): " + ", ".join(f"{s} {a['krippendorff_alpha']}"
                                                             for s, a in human["agreement"].items())]
    out += [f"- calibration ({kind}): " + ", ".join(f"{k} ρ {c['spearman']}, agreement {c['agreement_rate']}"
                                                    for k, c in cal.items()) for kind, cal in human["calibration"].items()]
    out += [f"- left out: {p}" for p in human["problems"]]
    return out


def _canary_lines(canary: dict | None) -> list[str]:
    """The last canary analysis (metrics/canary.json): the verdict, the test and why."""
    if not canary:
        return []
    s, d = canary["sprt"], canary["delta_canary_minus_prod"]
    out = ["", f"## Canary {canary['versions']['canary']} vs prod {canary['versions']['prod'] or 'base'}: "
               f"**{canary['verdict']}**", "",
           f"- requests {canary['requests']}, success {canary['success_rate']}, without outcome {canary['without_outcome']}",
           f"- {canary['pairs']} pairs ({canary['pairing']}): canary − prod {_ci(d, 'delta', True)}, "
           f"McNemar p {canary['mcnemar']['p_value']}",
           f"- SPRT {s['outcome']} after {s['discordant_seen']} discordant pairs (canary won {s['canary_wins']}), "
           f"llr {s['llr']:+.3f} in ({s['lower']:+.3f}, {s['upper']:+.3f})"]
    return out + [f"- {r['rule']}: {r['observed']} vs {r['threshold']} → {r['outcome']}" for r in canary["reasons"]]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def plots(root: Path, batches: list[str], curves: dict[str, tuple[str, ...]]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    rows = [(b, _load(root / paths.eval_metrics(b))) for b in batches]
    rows = [(b, m["deltas"]["overall_score"]) for b, m in rows if m]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 3))
        x = range(len(rows))
        deltas = [d["delta"] for _, d in rows]
        err = [[d["delta"] - d["ci_low"] for _, d in rows], [d["ci_high"] - d["delta"] for _, d in rows]]
        ax.bar(x, deltas, color=["#c0392b" if v < 0 else "#27ae60" for v in deltas])
        ax.errorbar(x, deltas, yerr=err, fmt="none", ecolor="black", capsize=4)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(list(x), [b for b, _ in rows])
        ax.set_title("overall score Δ (candidate − base) per batch, 95% CI")
        figs["per-batch deltas"] = _png(fig)
        plt.close(fig)
    series = []
    for kind, keys in curves.items():
        f = root / paths.MODELS / kind / "train_log.csv"
        if f.exists():
            data = list(csv.DictReader(f.open()))
            for k in keys:
                pts = [(int(float(r["step"])), float(r[k])) for r in data if r.get(k) not in (None, "")]
                if pts:
                    series.append((f"{kind} {k}", pts))
    if series:
        ncols = min(4, len(series))
        nrows = -(-len(series) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.8 * nrows), squeeze=False)
        for ax in axes.flat[len(series):]:
            ax.axis("off")
        for ax, (name, pts) in zip(axes.flat, series):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".")
            ax.set_title(name)
            ax.set_xlabel("step")
        figs["training curves"] = _png(fig)
        plt.close(fig)
    replay = _load(root / paths.REPLAY_METRICS)
    if replay:
        cols = ["answer_json_parse", "value_exact", "core_fields_exact", "evidence_chunk_exact"]
        fig, ax = plt.subplots(figsize=(7, 3))
        width = 0.2
        for i, arm in enumerate(replay["arms"]):
            ax.bar([j + i * width for j in range(len(cols))], [replay["arms"][arm][c] for c in cols], width,
                   label=f"{arm}: {ARM_LABELS[arm]}")
        ax.set_xticks([j + 1.5 * width for j in range(len(cols))], [c.replace("_", "\n") for c in cols])
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
        ax.set_title("ABCD application-chain replay")
        figs["ABCD replay"] = _png(fig)
        plt.close(fig)
    return figs


def write_reports(root: Path, out: Path, batches: list[str], base: str | None,
                  curves: dict[str, tuple[str, ...]]) -> tuple[Path, Path]:
    """reports/report.md and report.html; `curves`: each trainer's logged keys to plot (`clap.stages.trainers`)."""
    md = markdown(root, batches, base, list(curves))
    imgs = plots(root, batches, curves)
    body = "".join(f'<section><h2>{html.escape(name)}</h2><img alt="{html.escape(name)}" '
                   f'src="data:image/png;base64,{data}"/></section>' for name, data in imgs.items())
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>CLAP report</title>"
            "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}pre{white-space:pre-wrap;"
            "background:#f6f6f6;padding:1em}img{max-width:100%}</style></head><body><h1>CLAP candidate report</h1>"
            f"{body}<h2>Summary</h2><pre>{html.escape(md)}</pre></body></html>")
    out = Path(out)
    atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", page)
    return out / "report.md", out / "report.html"
