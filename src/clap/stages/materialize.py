"""materialize: assets → per-batch training, holdout, preference, GRPO and replay sets.

    clap materialize --batch b1          (DVC stage `materialize@b1`, one folder per batch)

The holdout is split by document (so no page sits on both sides); train rows that still overlap
the holdout — by record ID, by exact normalised input, or by MinHash near-duplicate input — are
removed, and `data_quality.json` reports each count for a naive record-level split (before) and for
the written split (after, always zero). Unverifiable facts go to `repair.jsonl`, never to training.
Decision cases are split by case (`materialize.decision_eval_fraction`): held-out cases go to
`decision_eval.jsonl`; the others become DPO pairs, GRPO prompts and SFT rows (the chain's cold start).
`materialize.app_share` of the train samples use the application's prompt — the chunks the
application's retriever (BM25, `retrieval.k`) returns for the question, the gold chunk among them,
so the distractors are the same company's neighbouring years and pages — so the adapter learns the
task that replay sends. Distractors never come from a holdout document.
The caps (`materialize.max_*_per_batch`) keep the rows ranked first by a fixed per-record hash, repaired
rows (`repair/fixed/`, the flywheel) ahead of the rest: a batch's training sample and holdout stay the same
round after round, and what was repaired is what the next candidate trains and is judged on.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from clap import paths
from clap.config import Materialize, Params, Rewards
from clap.data import rows as build
from clap.data.split import capped, in_eval, split
from clap.domain import prompts
from clap.domain import quantities as nz
from clap.domain.contracts import DecisionCase, GrpoGroup, PreferencePair, ReplayCase, SftSample
from clap.io import InputFileError, atomic_dir, check_output_dir, write_json, write_jsonl
from clap.stages.spec import StageSpec
from clap.train.preferences import decision_rows


def run(m: Materialize, assets: Path, batch: str, out: Path, *, rewards: Rewards, retrieval_k: int) -> dict:
    """Materialize one batch under the `materialize` section; `rewards` scores the decision preferences and
    `retrieval_k` (`retrieval.k`) is how many chunks an application-style prompt shows. Returns the data-quality
    report."""
    check_output_dir(out, (assets,))
    facts, chunks, decisions = _load(Path(assets), batch)
    chunk_by_id = {r["chunk_id"]: r for r in chunks.to_dict("records")}
    facts["input_norm"] = [nz.fold(f"{q} {chunk_by_id.get(c, {}).get('text', '')}").lower()
                           for q, c in zip(facts["question"], facts["chunk_id"])]
    seed, frac = m.seed, m.eval_fraction
    work = Path(out).parent  # beside the output: the near-duplicate units' files, on storage every Ray node sees
    work.mkdir(parents=True, exist_ok=True)
    parts = split(facts, m, work)
    train = capped(parts["train"], m.max_train_per_batch, seed, "train")
    holdout = capped(parts["holdout"], m.max_eval_per_batch, seed, "holdout")
    contexts = build.retrieved(train, chunks[~chunks["doc_id"].map(lambda d: in_eval(d, frac, seed))], retrieval_k)
    system = prompts.system_extract(build.project_units(Path(assets)))
    sft_train = build.sft_rows(train, "train", chunk_by_id, contexts, seed, m.app_share, system)
    sft_eval = build.sft_rows(holdout, "eval", chunk_by_id, {}, seed, 0.0, system)
    replay = build.replay_rows(capped(parts["replay_pool"], m.max_replay_per_batch, seed, "replay"))
    pairs, groups, decision_eval = decision_rows(decisions, batch, m, rewards)
    sft_train += build.decision_sft_rows(groups, batch)
    repair = parts["repair"]
    quality = {"batch": batch, "train_size": len(sft_train), "holdout_size": len(sft_eval),
               "replay_cases": len(replay), "dpo_pairs": len(pairs), "grpo_groups": len(groups),
               "decision_sft_rows": len(groups), "decision_eval_cases": len(decision_eval),
               "repair_queue": len(repair), "exact_duplicates_removed": parts["exact_duplicates"],
               "overlap_removed_from_train": parts["overlap_removed"], "before": parts["before"],
               "after": parts["after"]}
    rows = {"sft_train": sft_train, "sft_eval": sft_eval, "dpo_pairs": pairs, "grpo_groups": groups,
            "replay_cases": replay, "decision_eval": decision_eval}
    _write(out, assets, rows, repair, quality)
    return quality


def _load(assets: Path, batch: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The batch's facts (one Parquet file per batch: the filter reads this batch's rows only), every chunk and
    every decision; a batch with no facts is one line naming the batches present."""
    if not (assets / "facts.parquet").exists():
        raise InputFileError(f"{assets}/facts.parquet: no such file (run `clap assetize` first)")
    present = sorted(pd.read_parquet(assets / "facts.parquet", columns=["batch"])["batch"].unique())
    facts = pd.read_parquet(assets / "facts.parquet", filters=[("batch", "==", batch)]).reset_index(drop=True)
    if facts.empty:
        raise InputFileError(f"{assets}/facts.parquet: batch {batch!r} has no facts (batches present: "
                             f"{', '.join(present) or 'none'}); check data.batches")
    return facts, pd.read_parquet(assets / "chunks.parquet"), pd.read_parquet(assets / "decisions.parquet")


_CONTRACTS = {"sft_train": SftSample, "sft_eval": SftSample, "dpo_pairs": PreferencePair, "grpo_groups": GrpoGroup,
              "replay_cases": ReplayCase, "decision_eval": DecisionCase}


def _write(out: Path, assets: Path, rows: dict[str, list], repair: pd.DataFrame, quality: dict) -> None:
    """Every file of the batch, each checked against its contract, written together or not at all."""
    with atomic_dir(out, (assets,)) as tmp:
        for name, model in _CONTRACTS.items():
            df = pd.DataFrame.from_records(rows[name], columns=list(model.to_schema().columns))
            if len(df):
                model.validate(df, lazy=True)
            write_jsonl(tmp / f"{name}.jsonl", rows[name])
        write_jsonl(tmp / "repair.jsonl", [{"stage": "materialize", "reason": r["unverifiable_reason"],
                                            "record": {k: v for k, v in r.items() if k != "input_norm"}}
                                           for r in repair.to_dict("records")])
        write_json(tmp / "data_quality.json", quality)


def main(params: Params, batch: str, assets: Path = paths.ASSETS, out: Path | None = None) -> list[str]:
    """Build one batch's SFT/holdout/DPO/GRPO/replay sets and its data-quality report."""
    q = run(params.materialize, assets, batch, out or paths.MATERIALIZED / batch, rewards=params.rewards,
            retrieval_k=params.retrieval.k)
    return [f"{batch}: train {q['train_size']}, holdout {q['holdout_size']}, replay {q['replay_cases']}, "
            f"dpo {q['dpo_pairs']}, grpo {q['grpo_groups']}, repair {q['repair_queue']}; overlap before "
            f"{q['before']['exact_input_overlap']}/{q['before']['near_duplicate_overlap']} after "
            f"{q['after']['exact_input_overlap']}/{q['after']['near_duplicate_overlap']} (exact/near)"]


STAGE = StageSpec(name="materialize", group="data", main=main)
