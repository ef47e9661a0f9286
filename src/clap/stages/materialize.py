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

import json
import random
from pathlib import Path

import pandas as pd

from clap import paths
from clap.config import Materialize, Params, Rewards
from clap.data.near_dup import near_duplicates
from clap.domain import prompts
from clap.domain import quantities as nz
from clap.domain.contracts import DecisionCase, GrpoGroup, PreferencePair, ReplayCase, SftSample
from clap.io import InputFileError, atomic_dir, check_output_dir, content_hash, write_json, write_jsonl
from clap.retrieval import BM25Index
from clap.stages.spec import StageSpec
from clap.train.rewards import decision_reward


def _in_eval(key: str, fraction: float, seed: int) -> bool:
    return int(content_hash(seed, key)[:8], 16) / 0xFFFFFFFF < fraction


def overlap_counts(train: pd.DataFrame, holdout: pd.DataFrame, m: Materialize, work: Path) -> dict:
    """Train rows overlapping the holdout: by ID, by exact normalised input, by near-duplicate input
    (m: the `materialize` params; `work`: where the near-duplicate search keeps its files while it runs)."""
    ids = set(holdout["record_id"])
    exact = set(holdout["input_norm"])
    near = near_duplicates(train["input_norm"], holdout["input_norm"], m.near_dup_threshold, m.num_perm,
                           m.engine, m.workers, work)
    return {"id_overlap": int(train["record_id"].isin(ids).sum()),
            "exact_input_overlap": int(train["input_norm"].isin(exact).sum()),
            "near_duplicate_overlap": int(sum(near)), "_near_mask": near}


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
    split = _split(facts, m, work)
    train = capped(split["train"], m.max_train_per_batch, seed, "train")
    holdout = capped(split["holdout"], m.max_eval_per_batch, seed, "holdout")
    contexts = _retrieved(train, chunks[~chunks["doc_id"].map(lambda d: _in_eval(d, frac, seed))],
                          retrieval_k)
    system = prompts.system_extract(project_units(Path(assets)))
    sft_train = _sft_rows(train, "train", chunk_by_id, contexts, seed, m.app_share, system)
    sft_eval = _sft_rows(holdout, "eval", chunk_by_id, {}, seed, 0.0, system)
    replay = _replay_rows(capped(split["replay_pool"], m.max_replay_per_batch, seed, "replay"))
    pairs, groups, decision_eval = _decision_rows(decisions, batch, m, rewards)
    sft_train += _decision_sft_rows(groups, batch)
    repair = split["repair"]
    quality = {"batch": batch, "train_size": len(sft_train), "holdout_size": len(sft_eval),
               "replay_cases": len(replay), "dpo_pairs": len(pairs), "grpo_groups": len(groups),
               "decision_sft_rows": len(groups), "decision_eval_cases": len(decision_eval),
               "repair_queue": len(repair), "exact_duplicates_removed": split["exact_duplicates"],
               "overlap_removed_from_train": split["overlap_removed"], "before": split["before"],
               "after": split["after"]}
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


def project_units(assets: Path) -> list[str]:
    """The units the extraction prompt names: every unit of the registry (`clap.domain.quantities.UNITS`, in its
    order) in a dimension the project's facts use, over every batch — so a batch's prompt depends neither on which
    batch it is nor on one batch writing `元` where the others write `万元` (a shifted export); `""` among them when
    a fact has no unit (a count of rights, tonnes written in a header)."""
    used = {nz.canonical_unit(u) for u in pd.read_parquet(assets / "facts.parquet", columns=["unit"])["unit"].dropna()}
    dims = {nz.UNITS[u][0] for u in used if u is not None}
    return [u for u, (dim, _) in nz.UNITS.items() if dim in dims]


def _split(facts: pd.DataFrame, m: Materialize, work: Path) -> dict:
    """Train and holdout split by document, after dropping unverifiable rows (to repair) and exact duplicates, with
    every train row that overlaps the holdout (same record, same normalised input, near duplicate) removed; the
    overlap a naive split by record would have had (`before`) and what is left (`after`, zero by construction)."""
    seed, frac = m.seed, m.eval_fraction
    naive_eval = facts["record_id"].map(lambda r: _in_eval(r, frac, seed))  # what the paper started from
    before = overlap_counts(facts[~naive_eval], facts[naive_eval], m, work)
    before.pop("_near_mask")
    before.update(noisy_metric_labels=int((facts["metric"] != facts["metric_raw"].map(nz.fold)).sum()),
                  missing_evidence=int(facts["evidence"].isna().sum()),
                  unverifiable=int((~facts["verifiable"]).sum()), rows=len(facts))
    usable = facts[facts["verifiable"]].drop_duplicates(subset=["content_hash"], keep="first")
    is_eval = usable["doc_id"].map(lambda d: _in_eval(d, frac, seed))
    holdout, train = usable[is_eval], usable[~is_eval]
    ov = overlap_counts(train, holdout, m, work)
    dropped = train["record_id"].isin(set(holdout["record_id"])) | train["input_norm"].isin(set(holdout["input_norm"])) \
        | pd.Series(ov.pop("_near_mask"), index=train.index, dtype=bool)
    train = train[~dropped]
    after = overlap_counts(train, holdout, m, work)
    after.pop("_near_mask")
    after.update(noisy_metric_labels=0, missing_evidence=int(train["evidence"].isna().sum()
                                                              + holdout["evidence"].isna().sum()),
                 unverifiable=0, rows=len(train) + len(holdout))
    return {"train": train, "holdout": holdout, "replay_pool": usable[is_eval], "repair": facts[~facts["verifiable"]],
            "exact_duplicates": len(facts[facts["verifiable"]]) - len(usable), "overlap_removed": int(dropped.sum()),
            "before": before, "after": after}


def _decision_rows(decisions: pd.DataFrame, batch: str, m: Materialize, rewards: Rewards) -> tuple[list, list, list]:
    """The batch's decision cases split by case: preference pairs and GRPO groups from the training cases, the
    held-out cases for `evaluate_decisions`."""
    batch_dec = decisions[decisions["batch"] == batch]
    dec_eval = batch_dec["record_id"].map(lambda r: _in_eval(r, m.decision_eval_fraction, m.seed)).astype(bool)
    pairs, groups = _preferences(batch_dec[~dec_eval], decisions, rewards)
    decision_eval = [{"case_id": f"dc-{g['record_id']}", "batch": batch, **{k: v for k, v in g.items() if k != "group_id"}}
                     for g in _preferences(batch_dec[dec_eval], decisions, rewards)[1]]
    return pairs, groups, decision_eval


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


def capped(df: pd.DataFrame, n: int | None, seed: int, salt: str) -> pd.DataFrame:
    """At most `n` rows, chosen by a fixed per-record rank: the repaired rows first (what the flywheel brought
    back), then by the hash of (seed, salt, record_id). A row that joins the batch displaces at most one
    row, so a batch's holdout and training sample stay the same round after round unless repairs enter them
    (a seeded draw over the whole pool reshuffled them whenever one repaired row became usable)."""
    if n is None or len(df) <= n:
        return df
    rank = pd.DataFrame({"later": ~df["repaired"].to_numpy(dtype=bool),
                         "hash": [content_hash(seed, salt, r) for r in df["record_id"]]}, index=df.index)
    return df.loc[rank.sort_values(["later", "hash"]).index[:n]].sort_values("record_id")


def _retrieved(facts: pd.DataFrame, pool: pd.DataFrame, k: int) -> dict[str, list[str]]:
    """The chunk ids the application's BM25 retriever returns for each fact's question, from `pool`."""
    if facts.empty or pool.empty:
        return {}
    hits = BM25Index(pool["chunk_id"].tolist(), pool["text"].tolist()).search(facts["question"].tolist(), k)
    return dict(zip(facts["record_id"], hits))


def _sft_rows(df: pd.DataFrame, split: str, chunk_by_id: dict, contexts: dict[str, list[str]], seed: int,
              app_share: float, system_extract: str) -> list[dict]:
    """One sample per fact; with probability `app_share` (drawn per record, so a row's form does not depend on
    which other rows the batch holds) in the application's prompt over its retrieved chunks, else the offline
    extraction task under `system_extract`."""
    rows = []
    for f in df.to_dict("records"):
        rng = random.Random(content_hash(seed, "form", f["record_id"]))
        gold = chunk_by_id[f["chunk_id"]]
        if rng.random() < app_share and f["record_id"] in contexts:
            context = [chunk_by_id[c] for c in contexts[f["record_id"]]]
            if gold["chunk_id"] not in contexts[f["record_id"]]:  # retrieval missed it: the gold takes a random slot, as a better retriever would
                context[rng.randrange(len(context))] = gold
            system, prompt, target = prompts.SYSTEM_APP, prompts.app_prompt(f["question"], context), \
                prompts.target_json(f, with_location=True)
            source = "\n\n".join(c["text"] for c in context)
        else:
            system, prompt, target = system_extract, prompts.extraction_prompt(f["question"], gold), \
                prompts.target_json(f)
            source = gold["text"]
        rows.append({"sample_id": content_hash(system, prompt, target)[:16], "record_id": f["record_id"], "batch": f["batch"],
                     "split": split, "system": system, "prompt": prompt, "source": source, "target": target,
                     "question": f["question"], "chunk_id": f["chunk_id"], "content_hash": content_hash(prompt, target)})
    return rows


def _decision_sft_rows(groups: list[dict], batch: str) -> list[dict]:
    """The SFT cold start of the decision task: each train case's original recommendation as the target,
    so DPO and GRPO start from a policy that already answers the decision format."""
    return [{"sample_id": content_hash(prompts.SYSTEM_DECIDE, g["prompt"], g["reference_json"])[:16],
             "record_id": g["record_id"], "batch": batch, "split": "train", "system": prompts.SYSTEM_DECIDE,
             "prompt": g["prompt"], "source": g["prompt"], "target": g["reference_json"], "question": "",
             "chunk_id": "", "content_hash": content_hash(g["prompt"], g["reference_json"])} for g in groups]


def _replay_rows(df: pd.DataFrame) -> list[dict]:
    return [{"case_id": f"rc-{f['record_id']}", "record_id": f["record_id"], "batch": f["batch"],
             "question": f["question"], "gold_chunk_id": f["chunk_id"], "gold_doc_id": f["doc_id"],
             "gold_page": int(f["page"]), "target": prompts.target_json(f, with_location=True)}
            for f in df.to_dict("records")]


def _preferences(batch_dec: pd.DataFrame, all_dec: pd.DataFrame, rcfg: Rewards) -> tuple[list[dict], list[dict]]:
    """Chosen = the original recommendation citing the real cause; near-miss = right action, wrong cause
    and risk focus; rejected = the action another case of the same type needed."""
    pairs, groups, weights = [], [], rcfg.weights.model_dump()
    actions = {(r["case_type"], r["main_cause"]): (r["action"], r["risk_focus"]) for r in all_dec.to_dict("records")}
    for d in batch_dec.to_dict("records"):
        causes = json.loads(d["causes_json"])
        other = sorted(c for c in causes if c != d["main_cause"])
        wrong = next(((a, rf, c) for (ct, c), (a, rf) in sorted(actions.items())
                      if ct == d["case_type"] and a != d["action"]), None)
        if not other or wrong is None:
            continue
        prompt = prompts.decision_prompt(d["situation"], d["causes_json"])
        ref = {"action": d["action"], "cause": d["main_cause"], "risk_focus": d["risk_focus"]}
        chosen = json.dumps(ref, ensure_ascii=False)
        near = json.dumps({"action": d["action"], "cause": other[0],
                           "risk_focus": next(r for r in prompts.RISK_FOCUS if r != d["risk_focus"])}, ensure_ascii=False)
        rejected = json.dumps({"action": wrong[0], "cause": wrong[2], "risk_focus": wrong[1]}, ensure_ascii=False)
        r_c, r_n, r_r = (decision_reward(t, ref, weights, rcfg.max_chars) for t in (chosen, near, rejected))
        for kind, text, r in (("near_miss", near, r_n), ("rejected", rejected, r_r)):
            pairs.append({"pair_id": f"{d['record_id']}-{kind}", "record_id": d["record_id"], "prompt": prompt,
                          "chosen": chosen, "rejected": text, "kind": kind, "reward_chosen": r_c, "reward_rejected": r})
        groups.append({"group_id": f"g-{d['record_id']}", "record_id": d["record_id"], "prompt": prompt,
                       "reference_json": chosen,
                       "candidates_json": json.dumps([{"role": "chosen", "text": chosen, "reward": r_c},
                                                      {"role": "near_miss", "text": near, "reward": r_n},
                                                      {"role": "rejected", "text": rejected, "reward": r_r}])})
    return pairs, groups


def main(params: Params, batch: str, assets: Path = paths.ASSETS, out: Path | None = None) -> list[str]:
    """Build one batch's SFT/holdout/DPO/GRPO/replay sets and its data-quality report."""
    q = run(params.materialize, assets, batch, out or paths.MATERIALIZED / batch, rewards=params.rewards,
            retrieval_k=params.retrieval.k)
    return [f"{batch}: train {q['train_size']}, holdout {q['holdout_size']}, replay {q['replay_cases']}, "
            f"dpo {q['dpo_pairs']}, grpo {q['grpo_groups']}, repair {q['repair_queue']}; overlap before "
            f"{q['before']['exact_input_overlap']}/{q['before']['near_duplicate_overlap']} after "
            f"{q['after']['exact_input_overlap']}/{q['after']['near_duplicate_overlap']} (exact/near)"]


STAGE = StageSpec(name="materialize", group="data", main=main)
