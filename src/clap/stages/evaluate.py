"""evaluate: the candidate against the adapter in prod and against the base model, on one batch's holdout (docs/design.md §4).

    clap evaluate b1           (DVC stage `evaluate@b1`, writes data/eval/b1/)

Writes per-sample records (input hash, output, parsed answer, every metric, latency) and
`regressed_samples.jsonl` (candidate failed the pass rule where the baseline passed) under
data/eval/<batch>/, and metrics/eval/<batch>.json (git-tracked DVC metrics: per model, plus the
candidate − baseline deltas with paired-bootstrap CIs).
With `generate.constrained` every model decodes under the answer's JSON schema (`clap.evaluate.decoding`), as
serving does; `candidate.schema_valid_unconstrained` is the share of free-decoded candidate answers
that meet the contract — whether training taught the format, which the grammar would otherwise hide.
`baseline` is the base model; `prod` (when the engine holds one) is the adapter the registry's prod
stage points at; the candidate is base + its adapter; each adapter is loaded through the serving
check. Deltas: candidate − base (`deltas`), candidate − prod (`deltas_vs_prod`) and prod − base
(`prod_vs_base`, the evidence for a rollback), each with a paired-bootstrap CI. The per-sample latencies are
reported, never compared (reused answers were timed at other times); the paired timing the gate compares is the
replay's (`clap replay`, `clap.evaluate.latency`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from clap import paths
from clap.config import Evaluate, Params
from clap.domain import prompts
from clap.evaluate.decoding import contract_valid
from clap.evaluate.engines import reuse_lines, said_extraction_engine
from clap.evaluate.extraction import answer, extraction_schemas
from clap.evaluate.intervals import ci_bounds
from clap.evaluate.metrics import HIGHER_IS_BETTER, parse_answer
from clap.evaluate.stats import p50, p95, paired_bootstrap
from clap.io import atomic_dir, check_output_dir, read_jsonl, require_inputs, write_json, write_jsonl
from clap.stages.spec import StageSpec

if TYPE_CHECKING:  # the engine is built in `main` (torch is imported there, not when `clap --help` lists commands)
    from clap.evaluate.generate import Engine

METRICS = [k for k in HIGHER_IS_BETTER if k != "p95_latency_ms"]


def run(e: Evaluate, samples_file: Path, engine: Engine, out: Path, batch: str, metrics_file: Path, *,
        constrained: bool) -> dict:
    """`e`: the `evaluate` section; `constrained`: answers decoded under the answer schema (`generate.constrained`)."""
    check_output_dir(out, (samples_file,))
    samples = read_jsonl(samples_file)
    convs = [prompts.messages(s["system"], s["prompt"]) for s in samples]
    schemas = extraction_schemas(constrained, samples)
    records, per_model = [], {}
    models = [("baseline", False)] + ([("prod", "prod")] if "prod" in getattr(engine, "adapters", []) else []) \
        + [("candidate", True)]
    for name, use_adapter in models:
        per_model[name] = answer(e, samples, engine, use_adapter, name, batch, schemas)
        records += per_model[name]
    metrics = {name: _aggregate(rows) for name, rows in per_model.items()}
    if constrained and e.unconstrained_format_check:
        free = engine.generate(convs, use_adapter=True, max_new_tokens=e.max_new_tokens, batch_size=e.batch_size)
        metrics["candidate"]["schema_valid_unconstrained"] = round(
            sum(contract_valid(parse_answer(g.text)) for g in free) / (len(free) or 1), 4)
    result = {"deltas": _deltas(per_model, metrics, "baseline", "candidate", e)}
    if "prod" in per_model:
        result["deltas_vs_prod"] = _deltas(per_model, metrics, "prod", "candidate", e)
        result["prod_vs_base"] = _deltas(per_model, metrics, "baseline", "prod", e)
        result["candidate_is_prod"] = engine.same_adapter("candidate", "prod")  # promoting it would change nothing
    reference = "prod" if "prod" in per_model else "baseline"
    regressed = [{"batch": batch, "sample_id": c["sample_id"], "reason": f"candidate_failed_where_{reference}_passed",
                  "baseline_output": b["output"], "candidate_output": c["output"],
                  "target": s["target"], "prompt": s["prompt"], "record_id": s["record_id"]}
                 for s, b, c in zip(samples, per_model[reference], per_model["candidate"])
                 if b["pass_rate"] == 1.0 and c["pass_rate"] == 0.0]
    with atomic_dir(out, (samples_file,)) as tmp:
        write_jsonl(tmp / "records.jsonl", records)
        write_jsonl(tmp / "regressed_samples.jsonl", regressed)
    write_json(metrics_file, {"batch": batch, "n": len(samples), **metrics, **result})
    return {"metrics": metrics, **result, "regressed": len(regressed)}


def _deltas(per_model: dict, metrics: dict, ref: str, new: str, e: Evaluate) -> dict:
    """`new` − `ref` per metric, paired by sample, with bootstrap CIs (latency is timed apart: `latency`)."""
    return {m: paired_bootstrap([r[m] for r in per_model[ref]], [r[m] for r in per_model[new]],
                                n=e.bootstrap, ci=e.ci, seed=17) for m in METRICS}


def _aggregate(rows: list[dict]) -> dict:
    n = len(rows) or 1
    out = {m: round(sum(r[m] for r in rows) / n, 4) for m in METRICS}
    lat = [r["latency_ms"] for r in rows]
    out.update(p50_latency_ms=p50(lat), p95_latency_ms=p95(lat))
    return out


def main(params: Params, batch: str, adapter: Path = paths.adapter("sft"), prod: Path | None = None,
         materialized: Path = paths.MATERIALIZED, out: Path | None = None,
         metrics: Path = paths.EVAL_METRICS) -> Iterator[str]:
    """Candidate vs prod and vs base on one batch's holdout: records, metrics, deltas with CIs, regressions."""
    samples = materialized / batch / "sft_eval.jsonl"
    require_inputs([(samples, f"dvc repro materialize@{batch}"), (adapter, "dvc repro train_sft")])
    engine = yield from said_extraction_engine(params.generate, params.model, adapter, prod)
    r = run(params.evaluate, samples, engine, out or paths.EVAL / batch, batch, metrics / f"{batch}.json",
            constrained=params.generate.constrained)
    yield from reuse_lines(engine)
    d = r["deltas"]["overall_score"]
    yield (f"{batch}: overall base {r['metrics']['baseline']['overall_score']:.4f} → candidate "
           f"{r['metrics']['candidate']['overall_score']:.4f} (Δ {d['delta']:+.4f}, "
           f"CI {ci_bounds(d, digits=4)}), regressed samples {r['regressed']}")
    if "deltas_vs_prod" in r:
        p = r["deltas_vs_prod"]["overall_score"]
        yield (f"{batch}: vs prod {r['metrics']['prod']['overall_score']:.4f}: Δ {p['delta']:+.4f} "
               f"CI {ci_bounds(p, digits=4)}")


STAGE = StageSpec(name="evaluate", group="evaluate", main=main, helps={
    "prod": "restored prod adapter folder (clap prod-adapter); baseline = base if absent"})
