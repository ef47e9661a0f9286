"""One batch's facts split for training and judging: the holdout by document, train rows that overlap it removed, and
the caps that keep a batch's sample the same round after round.

    clap materialize --batch b1          (the stage, `clap.stages.materialize`, that writes the split's sets)

The holdout is split by document (so no page sits on both sides); train rows that still overlap the holdout — by
record ID, by exact normalised input, or by MinHash near-duplicate input — are removed, and the overlap counts are
reported for a naive record-level split (before) and for the split made (after, zero by construction).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from clap.config import Materialize
from clap.data.near_dup import near_duplicates
from clap.domain import quantities as nz
from clap.io import content_hash


def in_eval(key: str, fraction: float, seed: int) -> bool:
    """Whether `key` (a document or record id) is held out: a fixed hash of (seed, key) below `fraction`."""
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


def split(facts: pd.DataFrame, m: Materialize, work: Path) -> dict:
    """Train and holdout split by document, after dropping unverifiable rows (to repair) and exact duplicates, with
    every train row that overlaps the holdout (same record, same normalised input, near duplicate) removed; the
    overlap a naive split by record would have had (`before`) and what is left (`after`, zero by construction)."""
    seed, frac = m.seed, m.eval_fraction
    naive_eval = facts["record_id"].map(lambda r: in_eval(r, frac, seed))  # what the paper started from
    before = overlap_counts(facts[~naive_eval], facts[naive_eval], m, work)
    before.pop("_near_mask")
    before.update(noisy_metric_labels=int((facts["metric"] != facts["metric_raw"].map(nz.fold)).sum()),
                  missing_evidence=int(facts["evidence"].isna().sum()),
                  unverifiable=int((~facts["verifiable"]).sum()), rows=len(facts))
    usable = facts[facts["verifiable"]].drop_duplicates(subset=["content_hash"], keep="first")
    is_eval = usable["doc_id"].map(lambda d: in_eval(d, frac, seed))
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
