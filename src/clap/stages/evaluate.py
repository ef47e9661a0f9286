"""evaluate: baseline vs candidate on one batch's holdout (DESIGN §4).

    clap evaluate b1           (DVC stage `evaluate@b1`, writes data/eval/b1/)

Writes per-sample records (input hash, output, parsed answer, every metric, latency) and
`regressed_samples.jsonl` (candidate failed the pass rule where the baseline passed) under
data/eval/<batch>/, and metrics/eval/<batch>.json (git-tracked DVC metrics: per model, plus the
candidate − baseline deltas with paired-bootstrap CIs).
The baseline is the base model; the candidate is base + adapter, loaded through the serving check.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from clap import prompts
from clap.generate import Engine
from clap.io import atomic_dir, read_jsonl, write_json, write_jsonl
from clap.metrics import HIGHER_IS_BETTER, parse_answer, score_sample
from clap.stats import p50, p95, paired_bootstrap

METRICS = [k for k in HIGHER_IS_BETTER if k != "p95_latency_ms"]


def run(cfg: dict, samples_file: Path, engine: Engine, out: Path, batch: str, metrics_file: Path) -> dict:
    e = cfg["evaluate"]
    samples = read_jsonl(samples_file)
    convs = [prompts.messages(s["system"], s["prompt"]) for s in samples]
    records, per_model = [], {}
    for name, use_adapter in (("baseline", False), ("candidate", True)):
        gens = engine.generate(convs, use_adapter=use_adapter, max_new_tokens=e["max_new_tokens"],
                               batch_size=e["batch_size"])
        rows = []
        for s, g in zip(samples, gens):
            pred = parse_answer(g.text)
            scores = score_sample(pred, json.loads(s["target"]), s["source"], e["weights"], e["pass_rule"])
            rows.append({"sample_id": s["sample_id"], "batch": batch, "model": name,
                         "input_hash": hashlib.sha256((s["system"] + s["prompt"]).encode()).hexdigest(),
                         "output": g.text, "parsed": pred, "new_tokens": g.new_tokens,
                         "latency_ms": round(g.latency_ms, 2), **scores})
        per_model[name] = rows
        records += rows
    metrics = {name: _aggregate(rows) for name, rows in per_model.items()}
    deltas = {m: paired_bootstrap([r[m] for r in per_model["baseline"]], [r[m] for r in per_model["candidate"]],
                                  n=e["bootstrap"], ci=e["ci"], seed=17) for m in METRICS}
    lat_b, lat_c = metrics["baseline"]["p95_latency_ms"], metrics["candidate"]["p95_latency_ms"]
    deltas["p95_latency_ms"] = {"delta": None if lat_b is None else round(lat_c - lat_b, 2), "ci_low": None,
                                "ci_high": None, "n": len(samples)}
    regressed = [{"batch": batch, "sample_id": c["sample_id"], "reason": "candidate_failed_where_baseline_passed",
                  "baseline_output": b["output"], "candidate_output": c["output"],
                  "target": s["target"], "prompt": s["prompt"], "record_id": s["record_id"]}
                 for s, b, c in zip(samples, per_model["baseline"], per_model["candidate"])
                 if b["pass_rate"] == 1.0 and c["pass_rate"] == 0.0]
    with atomic_dir(out) as tmp:
        write_jsonl(tmp / "records.jsonl", records)
        write_jsonl(tmp / "regressed_samples.jsonl", regressed)
    write_json(metrics_file, {"batch": batch, "n": len(samples), **metrics, "deltas": deltas})
    return {"metrics": metrics, "deltas": deltas, "regressed": len(regressed)}


def _aggregate(rows: list[dict]) -> dict:
    n = len(rows) or 1
    out = {m: round(sum(r[m] for r in rows) / n, 4) for m in METRICS}
    lat = [r["latency_ms"] for r in rows]
    out.update(p50_latency_ms=p50(lat), p95_latency_ms=p95(lat))
    return out
