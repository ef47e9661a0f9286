"""The decision task's evaluation: each model's answers to held-out decision cases, scored by the decision reward's
parts, and the later chain steps' answers to the extraction holdouts against SFT's.

    clap evaluate-decisions    (the stage, `clap.stages.evaluate_decisions`, that runs these and writes the files)

A case is scored by the reward GRPO trains on (`clap.train.rewards`): action, cause and risk focus right,
format, the weighted `decision_score`, and `decision_pass` (all three right). Ranking asks what the policy
prefers, not what it samples: the summed log-probability it gives the chosen, near-miss and rejected answers;
`rank_accuracy` is the share of cases ordered chosen > near-miss > rejected, `margin_*` the mean gaps. The
extraction check asks as `evaluate` asks (`clap.evaluate.extraction.answer`), paired with the SFT adapter's answers
that `evaluate@<batch>` recorded, so a preference or RL step that buys decision quality with extraction quality
is seen.
"""

from __future__ import annotations

import json
from pathlib import Path

from clap.config import Evaluate, EvaluateDecisions, Rewards
from clap.domain.names import CHAIN  # the steps, in order; DPO and GRPO both continue SFT
from clap.errors import UserError
from clap.evaluate.extraction import answer as answer_extraction
from clap.evaluate.extraction import extraction_schemas
from clap.evaluate.metrics import parse_answer
from clap.evaluate.stats import paired_bootstrap
from clap.io import read_jsonl
from clap.train.rewards import decision_hits, decision_parts, decision_reward

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
    out = {"n": len(rows), "models": {m: mean(r, EXTRACTION_METRICS) for m, r in per_model.items()},
           "deltas": {f"{s}-sft": deltas(rows, per_model[s], EXTRACTION_METRICS, evaluate) for s in steps},
           "per_batch_deltas": {b: {f"{s}-sft": deltas([r for r in rows if r["batch"] == b],
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


def regressed(cases: list[dict], ref_rows: list[dict], new_rows: list[dict], new: str, ref: str) -> list[dict]:
    """The cases `new` failed where its reference `ref` passed."""
    return [{"case_id": c["case_id"], "batch": c["batch"], "record_id": c["record_id"], "model": new,
             "reference_model": ref, "reason": f"{new}_failed_where_{ref}_passed",
             "reference_output": a["output"], "output": z["output"],
             "reference_json": c["reference_json"], "prompt": c["prompt"]}
            for c, a, z in zip(cases, ref_rows, new_rows) if a["decision_pass"] == 1.0 and z["decision_pass"] == 0.0]


def deltas(ref_rows: list[dict], new_rows: list[dict], metrics, e: Evaluate) -> dict:
    return {m: paired_bootstrap([r[m] for r in ref_rows], [r[m] for r in new_rows], n=e.bootstrap, ci=e.ci,
                                seed=17) for m in metrics}


def mean(rows: list[dict], metrics) -> dict:
    n = len(rows) or 1
    return {m: round(sum(r[m] for r in rows) / n, 4) for m in metrics}


def aggregate(rows: list[dict]) -> dict:
    return mean(rows, METRICS)
