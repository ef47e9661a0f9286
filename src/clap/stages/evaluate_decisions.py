"""evaluate-decisions: the decision task on held-out cases, for every step of the chain (docs/design.md §4, the paper's second task).

    clap evaluate-decisions    (DVC stage `evaluate_decisions`, writes data/eval_decisions/ and metrics/decisions.json)

Cases are the `decision_eval.jsonl` of every batch (split by case in materialize: no case trains any
step). Each model — the base model, the adapter in prod when there is one, SFT, SFT→DPO, SFT→GRPO —
answers every case (under the decision schema with `generate.constrained`, as serving decodes; with
`evaluate_decisions.action_playbook` the action is one of the training cases' actions), scored and ranked as
`clap.train.decision_eval` says. Deltas (paired bootstrap over cases, pooled and per batch): every step against
the base model and against prod, and DPO / GRPO against SFT — what the step added to its start.
`regressed.jsonl` lists cases a step failed where its reference passed (SFT vs prod or base; DPO and
GRPO vs SFT). `extraction` in metrics/decisions.json holds DPO's and GRPO's scores on every batch's extraction
holdout and their − SFT deltas (pooled and per batch), so the gate holds a step that buys decision quality with
extraction quality (`max_chain_extraction_regression`).
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
from clap.evaluate.decoding import decision_schema
from clap.evaluate.engines import chain_engine, prod_baseline, reuse_lines
from clap.evaluate.summary import decision_table
from clap.io import atomic_dir, check_output_dir, read_jsonl, require_inputs, write_json, write_jsonl
from clap.stages import trainers
from clap.stages.spec import StageSpec
from clap.train import decision_eval as task
from clap.train.spec import EXTRACTION


def run(e: EvaluateDecisions, case_files: dict[str, Path], engine, models: list[str], out: Path, metrics_file: Path,
        extraction_files: dict[str, tuple[Path, Path]] | None = None, *, evaluate: Evaluate, rewards: Rewards,
        constrained: bool) -> dict:
    """`case_files`: batch → decision_eval.jsonl; `models`: the names the engine answers as ("base" is
    the adapters switched off; the others are adapters it holds); `extraction_files`: see `clap.train.decision_eval.extraction`.
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
    per_model = {name: task.answers(engine, name, cases, convs, graded, schemas, e, rewards) for name in models}
    batches = list(case_files)
    result = {"n": len(cases), "models": {m: task.aggregate(rows) for m, rows in per_model.items()},
              "per_batch": {b: {"n": sum(c["batch"] == b for c in cases),
                                **{m: task.aggregate([r for r in rows if r["batch"] == b])
                                   for m, rows in per_model.items()}}
                            for b in batches},
              "deltas": {}, "per_batch_deltas": {b: {} for b in batches}}
    failed = []
    for new, ref in task.comparisons(models):
        key = f"{new}-{ref}"
        result["deltas"][key] = task.deltas(per_model[ref], per_model[new], task.METRICS, evaluate)
        for b in batches:
            sel = [i for i, c in enumerate(cases) if c["batch"] == b]
            result["per_batch_deltas"][b][key] = task.deltas([per_model[ref][i] for i in sel],
                                                             [per_model[new][i] for i in sel],
                                                             task.BATCH_DELTA_METRICS, evaluate)
        if ref == ("sft" if new != "sft" else ("prod" if "prod" in models else "base")):
            failed += task.regressed(cases, per_model[ref], per_model[new], new, ref)
    result["regressed_cases"] = {m: sum(r["model"] == m for r in failed) for m in models if m in CHAIN}
    result["constrained"] = schemas is not None
    result["action_playbook"] = actions
    later = [m for m in models if m in CHAIN and m != "sft"]
    extraction_records = []
    if extraction_files is not None and later:
        result["extraction"], extraction_records = task.extraction(evaluate, constrained, extraction_files, engine, later)
    with atomic_dir(out, inputs) as tmp:
        write_jsonl(tmp / "records.jsonl", [r for rows in per_model.values() for r in rows])
        write_jsonl(tmp / "regressed.jsonl", failed)
        write_jsonl(tmp / "extraction_records.jsonl", extraction_records)
    write_json(metrics_file, result)
    return result


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
