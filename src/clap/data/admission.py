"""The admission policy (docs/design.md §5) and what a trainer asks of it: `decide` turns a batch's data-quality
report, preference data and SFT targets into an admission record (pure); `require` refuses a trainer the record
does not allow. The DVC stage `admit` (`clap.stages.admit`) writes the record.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from clap.config import Admit
from clap.domain import quantities as nz
from clap.domain.contracts import AdmissionRecord, Check
from clap.domain.names import CHAIN
from clap.errors import UserError
from clap.io import read_json


def unit_mismatch_share(targets: list[dict]) -> float:
    """Share of targets whose evidence writes their value with another unit (a shifted export)."""
    if not targets:
        return 0.0
    return sum(nz.unit_agrees(t["value"], t["unit"], t["evidence"]) is False for t in targets) / len(targets)


def decide(quality: dict, pairs: list[dict], groups: list[dict], a: Admit,
           targets: list[dict] | None = None) -> AdmissionRecord:
    """Pure admission policy over a batch's data-quality report, preference data and SFT targets."""
    mismatch = unit_mismatch_share(targets or [])
    after = quality["after"]
    overlap = after["id_overlap"] + after["exact_input_overlap"] + after["near_duplicate_overlap"]
    rows = quality["before"]["rows"] or 1
    unverifiable_share = quality["before"]["unverifiable"] / rows
    ranked = [json.loads(g["candidates_json"]) for g in groups]
    rank_ok = [c[0]["reward"] > c[1]["reward"] > c[2]["reward"] for c in ranked]
    margins = [p["reward_chosen"] - p["reward_rejected"] for p in pairs]
    rewards = [c["reward"] for cs in ranked for c in cs]
    rank_rate = sum(rank_ok) / len(rank_ok) if rank_ok else None
    margin = statistics.fmean(margins) if margins else None
    spread = statistics.pstdev(rewards) if len(rewards) > 1 else None
    checks = [
        Check(name="train_eval_overlap", value=overlap, threshold=a.max_overlap, op="<=",
              passed=overlap <= a.max_overlap, consequence="block"),
        Check(name="unverifiable_share", value=round(unverifiable_share, 4), threshold=a.max_unverifiable_share,
              op="<=", passed=unverifiable_share <= a.max_unverifiable_share, consequence="repair"),
        Check(name="unit_mismatch_share", value=round(mismatch, 4), threshold=a.max_unit_mismatch_share,
              op="<=", passed=mismatch <= a.max_unit_mismatch_share, consequence="repair"),
        Check(name="train_samples", value=quality["train_size"], threshold=a.min_train_samples, op=">=",
              passed=quality["train_size"] >= a.min_train_samples, consequence="block"),
        Check(name="ranking_pass_rate", value=rank_rate, threshold=a.min_rank_pass_rate, op=">=",
              passed=rank_rate is not None and rank_rate >= a.min_rank_pass_rate, consequence="sft_only"),
        Check(name="reward_margin_mean", value=margin, threshold=a.min_reward_margin, op=">=",
              passed=margin is not None and margin >= a.min_reward_margin, consequence="sft_only"),
        Check(name="reward_std", value=spread, threshold=a.min_reward_std, op=">=",
              passed=spread is not None and spread >= a.min_reward_std, consequence="sft_only"),
    ]
    failed = [c for c in checks if not c.passed]
    for decision in ("block", "repair", "sft_only"):
        hit = [c for c in failed if c.consequence == decision]
        if hit:
            break
    else:
        decision, hit = "admit", []
    trainable = {"admit": list(CHAIN), "sft_only": [CHAIN[0]], "repair": [], "block": []}[decision]
    reasons = [f"{c.name}={c.value} violates {c.op} {c.threshold} → {c.consequence}" for c in failed]
    return AdmissionRecord(batch=quality["batch"], decision=decision, reasons=reasons, checks=checks,
                           trainable=trainable)


class NotAdmitted(UserError, RuntimeError):
    """Training refused: the batch's admission record does not allow this trainer."""


def require(admission_file: Path, trainer: str) -> dict:
    """Raise NotAdmitted (with the admission reasons) unless the record allows `trainer`."""
    rec = read_json(admission_file)
    if trainer not in rec["trainable"]:
        why = "; ".join(rec["reasons"]) or "no reason recorded"
        raise NotAdmitted(f"{admission_file}: batch {rec['batch']} is '{rec['decision']}', {trainer} refused ({why})")
    return rec
