"""evaluate-decisions: the decision task on held-out cases, for every step of the chain (docs/design.md §4, the paper's second task).

    clap evaluate-decisions    (DVC stage `evaluate_decisions`, writes data/eval_decisions/ and metrics/decisions.json)

Cases are the `decision_eval.jsonl` of every batch (split by case in materialize: no case trains any
step). Each model — the base model, the adapter in prod when there is one, SFT, SFT→DPO, SFT→GRPO —
answers every case (under the decision schema with `generate.constrained`, as serving decodes; with
`evaluate_decisions.action_playbook` the action is one of the training cases' actions), scored
by the decision reward's parts: action, cause and risk focus right, format, the weighted
`decision_score`, and `decision_pass` (all three right). Ranking asks what the policy prefers, not
what it samples: the summed log-probability of the chosen, near-miss and rejected answers;
`rank_accuracy` is the share of cases ordered chosen > near-miss > rejected, `margin_*` the mean
log-probability gaps. Deltas (paired bootstrap over cases, pooled and per batch): every step against
the base model and against prod, and DPO / GRPO against SFT — what the step added to its start.
`regressed.jsonl` lists cases a step failed where its reference passed (SFT vs prod or base; DPO and
GRPO vs SFT).

Extraction, the task the chain starts from: DPO and GRPO answer every batch's extraction holdout as
`evaluate` asks it (same samples, prompts, decoding and scores, `evaluate.answer`), paired with the SFT
adapter's answers that `evaluate@<batch>` recorded (`data/eval/<batch>/records.jsonl`, its candidate):
`extraction` in metrics/decisions.json holds each step's scores and its − SFT deltas (pooled and per
batch), so a preference or RL step that buys decision quality with extraction quality is seen, and the
gate holds it (`max_chain_extraction_regression`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from clap import paths
from clap.config import Evaluate, EvaluateDecisions, Params, Rewards
from clap.data.playbook import playbook
from clap.domain import prompts
from clap.domain.names import CHAIN  # the steps, in order; DPO and GRPO both continue SFT
from clap.errors import UserError
from clap.evaluate.decoding import decision_schema
from clap.evaluate.engines import chain_engine, prod_baseline, reuse_lines
from clap.evaluate.extraction import answer as answer_extraction
from clap.evaluate.extraction import extraction_schemas
from clap.evaluate.metrics import parse_answer
from clap.evaluate.stats import paired_bootstrap
from clap.evaluate.summary import decision_table
from clap.io import atomic_dir, check_output_dir, read_jsonl, require_inputs, write_json, write_jsonl
from clap.stages import trainers
from clap.stages.spec import StageSpec
from clap.train.rewards import decision_hits, decision_parts, decision_reward
from clap.train.spec import EXTRACTION

METRICS = ("decision_score", "decision_pass", "action_accuracy", "cause_accuracy", "risk_focus_accuracy",
           "format_ok", "rank_accuracy", "margin_chosen_near_miss", "margin_chosen_rejected")
BATCH_DELTA_METRICS = ("decision_score", "rank_accuracy")
EXTRACTION_METRICS = ("overall_score", "pass_rate", "value_accuracy", "evidence_accuracy", "hallucination_rate",
                      "wrong_fact_rate", "parse_ok")


class ExtractionRecordsMissing(UserError, FileNotFoundError):
    pass


def extraction(evaluate: Evaluate, constrained: bool, files: dict[str, tuple[Path, Path]], engine, steps: list[str]
               ) -> tuple[dict, list[dict]]:
    """The later chain `steps` on the extraction holdouts against SFT, asked and scored as `evaluate` does.
    `files`: batch → (sft_eval.jsonl, the records `evaluate@<batch>` wrote, whose `candidate` rows are the SFT
    adapter's answers)."""
    per_model: dict[str, list[dict]] = {"sft": []}
    for b, (samples_file, records_file) in files.items():
        samples = read_jsonl(samples_file)
        if not samples:
            continue
        if not Path(records_file).exists():
            raise ExtractionRecordsMissing(f"{records_file}: no evaluation records for batch {b} "
                                           f"(`dvc repro evaluate@{b}` writes them)")
        sft = {r["sample_id"]: r | {"model": "sft"} for r in read_jsonl(records_file) if r["model"] == "candidate"}
        missing = [s["sample_id"] for s in samples if s["sample_id"] not in sft]
        if missing:
            raise ExtractionRecordsMissing(f"{records_file}: the SFT adapter's answer to {missing[0]} is missing "
                                           f"({len(missing)} of {len(samples)}); `dvc repro evaluate@{b}`")
        per_model["sft"] += [sft[s["sample_id"]] for s in samples]
        schemas = extraction_schemas(constrained, samples)
        for step in steps:
            per_model.setdefault(step, []).extend(answer_extraction(evaluate, samples, engine, step, step, b, schemas))
    rows = per_model["sft"]
    batches = sorted({r["batch"] for r in rows})
    out = {"n": len(rows), "models": {m: _mean(r, EXTRACTION_METRICS) for m, r in per_model.items()},
           "deltas": {f"{s}-sft": _deltas(rows, per_model[s], EXTRACTION_METRICS, evaluate) for s in steps},
           "per_batch_deltas": {b: {f"{s}-sft": _deltas([r for r in rows if r["batch"] == b],
                                                         [r for r in per_model[s] if r["batch"] == b],
                                                         ("overall_score",), evaluate) for s in steps}
                                for b in batches}}
    return out, [r for s in steps for r in per_model[s]]


def score_case(text: str, case: dict, logprobs: dict[str, float], rewards: Rewards) -> dict:
    """One model's answer and preferences on one case → every metric (pure)."""
    ref = json.loads(case["reference_json"])
    parts = decision_parts(text, ref, rewards.max_chars)
    hits = decision_hits(parse_answer(text), ref)
    c, n, r = logprobs["chosen"], logprobs["near_miss"], logprobs["rejected"]
    return {"decision_score": round(decision_reward(text, ref, rewards.weights.model_dump(), rewards.max_chars), 6),
            "decision_pass": float(all(hits.values())), "action_accuracy": float(hits["action"]),
            "cause_accuracy": float(hits["cause"]), "risk_focus_accuracy": float(hits["risk_focus"]),
            "format_ok": float(parts["format"] == 1.0), "rank_accuracy": float(c > n > r),
            "margin_chosen_near_miss": round(c - n, 4), "margin_chosen_rejected": round(c - r, 4)}


def comparisons(models: list[str]) -> list[tuple[str, str]]:
    """(new, reference) pairs: each step vs base and vs prod; DPO and GRPO vs SFT."""
    steps = [m for m in CHAIN if m in models]
    out = [(m, "base") for m in steps] + [(m, "prod") for m in steps if "prod" in models]
    return out + [(m, "sft") for m in steps if m != "sft" and "sft" in models]


def run(e: EvaluateDecisions, case_files: dict[str, Path], engine, models: list[str], out: Path, metrics_file: Path,
        extraction_files: dict[str, tuple[Path, Path]] | None = None, *, evaluate: Evaluate, rewards: Rewards,
        constrained: bool) -> dict:
    """`case_files`: batch → decision_eval.jsonl; `models`: the names the engine answers as ("base" is
    the adapters switched off; the others are adapters it holds); `extraction_files`: see `extraction`.
    `e`: `evaluate_decisions`; `evaluate`: the intervals and the extraction scoring; `rewards`: the decision score;
    `constrained`: answers decoded under the decision schema (`generate.constrained`)."""
    inputs = tuple(case_files.values()) + tuple(f for pair in (extraction_files or {}).values() for f in pair)
    check_output_dir(out, inputs)
    cases = [c for b in case_files for c in read_jsonl(case_files[b])]
    if not cases:  # nothing to judge DPO / GRPO on: the gate holds them (decision_eval_missing)
        print(f"clap: no held-out decision cases in {', '.join(map(str, case_files.values()))}; "
              "raise materialize.decision_eval_fraction to evaluate the chain")
        models = []
    convs = [prompts.messages(prompts.SYSTEM_DECIDE, c["prompt"]) for c in cases]
    actions = playbook(case_files) if e.action_playbook else None
    schemas = [decision_schema(prompts.decision_cause_fields(c["prompt"]), actions) for c in cases] \
        if constrained else None
    graded = [{g["role"]: g["text"] for g in json.loads(c["candidates_json"])} for c in cases]
    per_model = {name: answers(engine, name, cases, convs, graded, schemas, e, rewards) for name in models}
    batches = list(case_files)
    result = {"n": len(cases), "models": {m: _aggregate(rows) for m, rows in per_model.items()},
              "per_batch": {b: {"n": sum(c["batch"] == b for c in cases),
                                **{m: _aggregate([r for r in rows if r["batch"] == b]) for m, rows in per_model.items()}}
                            for b in batches},
              "deltas": {}, "per_batch_deltas": {b: {} for b in batches}}
    regressed = []
    for new, ref in comparisons(models):
        key = f"{new}-{ref}"
        result["deltas"][key] = _deltas(per_model[ref], per_model[new], METRICS, evaluate)
        for b in batches:
            sel = [i for i, c in enumerate(cases) if c["batch"] == b]
            result["per_batch_deltas"][b][key] = _deltas([per_model[ref][i] for i in sel],
                                                         [per_model[new][i] for i in sel], BATCH_DELTA_METRICS,
                                                         evaluate)
        if ref == ("sft" if new != "sft" else ("prod" if "prod" in models else "base")):
            regressed += _regressed(cases, per_model[ref], per_model[new], new, ref)
    result["regressed_cases"] = {m: sum(r["model"] == m for r in regressed) for m in models if m in CHAIN}
    result["constrained"] = schemas is not None
    result["action_playbook"] = actions
    later = [m for m in models if m in CHAIN and m != "sft"]
    extraction_records = []
    if extraction_files is not None and later:
        result["extraction"], extraction_records = extraction(evaluate, constrained, extraction_files, engine, later)
    with atomic_dir(out, inputs) as tmp:
        write_jsonl(tmp / "records.jsonl", [r for rows in per_model.values() for r in rows])
        write_jsonl(tmp / "regressed.jsonl", regressed)
        write_jsonl(tmp / "extraction_records.jsonl", extraction_records)
    write_json(metrics_file, result)
    return result


def answers(engine, name: str, cases: list[dict], convs: list, graded: list[dict], schemas: list | None,
            e: EvaluateDecisions, rewards: Rewards) -> list[dict]:
    """Model `name`'s scored answer to every case ("base": the adapters switched off), with the summed
    log-probability it gives each graded answer (`graded`: role → text per case: chosen, near miss, rejected)."""
    use = False if name == "base" else name
    gens = engine.generate(convs, use_adapter=use, max_new_tokens=e.max_new_tokens,
                           batch_size=e.batch_size, schemas=schemas)
    lps = {role: engine.completion_logprobs(convs, [g[role] for g in graded], use)
           for role in ("chosen", "near_miss", "rejected")}
    return [{"case_id": c["case_id"], "record_id": c["record_id"], "batch": c["batch"], "model": name,
             "output": g.text, "parsed": parse_answer(g.text), "latency_ms": round(g.latency_ms, 2), "reused": g.reused,
             "logprob": {role: round(lps[role][i], 4) for role in lps},
             **score_case(g.text, c, {role: lps[role][i] for role in lps}, rewards)}
            for i, (c, g) in enumerate(zip(cases, gens))]


def _regressed(cases: list[dict], ref_rows: list[dict], new_rows: list[dict], new: str, ref: str) -> list[dict]:
    """The cases `new` failed where its reference `ref` passed."""
    return [{"case_id": c["case_id"], "batch": c["batch"], "record_id": c["record_id"], "model": new,
             "reference_model": ref, "reason": f"{new}_failed_where_{ref}_passed",
             "reference_output": a["output"], "output": z["output"],
             "reference_json": c["reference_json"], "prompt": c["prompt"]}
            for c, a, z in zip(cases, ref_rows, new_rows) if a["decision_pass"] == 1.0 and z["decision_pass"] == 0.0]


def _deltas(ref_rows: list[dict], new_rows: list[dict], metrics, e: Evaluate) -> dict:
    return {m: paired_bootstrap([r[m] for r in ref_rows], [r[m] for r in new_rows], n=e.bootstrap, ci=e.ci,
                                seed=17) for m in metrics}


def _mean(rows: list[dict], metrics) -> dict:
    n = len(rows) or 1
    return {m: round(sum(r[m] for r in rows) / n, 4) for m in metrics}


def _aggregate(rows: list[dict]) -> dict:
    return _mean(rows, METRICS)


def main(params: Params, prod: Path | None = None, materialized: Path = paths.MATERIALIZED,
         out: Path = paths.EVAL_DECISIONS, metrics: Path = paths.DECISION_METRICS) -> Iterator:
    """The decision task on held-out cases: base, prod, SFT, SFT→DPO, SFT→GRPO, with deltas and CIs."""
    batches, steps = params.data.batches, trainers.switched_on(EXTRACTION, params)
    require_inputs([*[(materialized / b / f, f"dvc repro materialize@{b}") for b in batches
                      for f in ("decision_eval.jsonl", "sft_eval.jsonl")],
                    *[(paths.EVAL / b / "records.jsonl", f"dvc repro evaluate@{b}") for b in batches],
                    *[(paths.adapter(s), f"dvc repro train_{s}") for s in steps]])
    prod_dir, prod_expected, line = prod_baseline(prod)
    if line:
        yield line
    engine = chain_engine(params.generate, params.model, steps, prod_dir, prod_expected)
    result = run(params.evaluate_decisions, {b: materialized / b / "decision_eval.jsonl" for b in batches}, engine,
                 ["base"] + (["prod"] if prod_dir else []) + steps, out, metrics,
                 {b: (materialized / b / "sft_eval.jsonl", paths.EVAL / b / "records.jsonl") for b in batches},
                 evaluate=params.evaluate, rewards=params.rewards, constrained=params.generate.constrained)
    yield from reuse_lines(engine)
    yield decision_table(result)


STAGE = StageSpec(name="evaluate_decisions", group="evaluate", main=main, helps={
    "prod": "restored prod adapter folder (clap prod-adapter)"})
