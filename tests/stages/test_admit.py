import json

import pytest
from tests.conftest import ROOT

from clap.config import compose, typed
from clap.data.admission import NotAdmitted, decide, require
from clap.demo import corpus as demo_data
from clap.stages import admit, assetize, materialize

CFG = typed(compose(conf=ROOT / "conf")).admit


def quality(**after):
    base = {"id_overlap": 0, "exact_input_overlap": 0, "near_duplicate_overlap": 0}
    return {"batch": "b1", "train_size": 40, "before": {"rows": 100, "unverifiable": 5}, "after": base | after}


def groups(rewards):
    return [{"candidates_json": json.dumps([{"role": r, "text": "", "reward": v}
                                            for r, v in zip(("chosen", "near_miss", "rejected"), rw)])}
            for rw in rewards]


def pairs(margins):
    return [{"reward_chosen": 1.0, "reward_rejected": 1.0 - m} for m in margins]


GOOD_G, GOOD_P = groups([(1.0, 0.7, 0.2)] * 5), pairs([0.3, 0.8] * 5)


@pytest.mark.parametrize("q, p, g, decision, failed", [
    (quality(), GOOD_P, GOOD_G, "admit", []),
    (quality(near_duplicate_overlap=1), GOOD_P, GOOD_G, "block", ["train_eval_overlap"]),
    (quality() | {"before": {"rows": 100, "unverifiable": 40}}, GOOD_P, GOOD_G, "repair", ["unverifiable_share"]),
    (quality() | {"train_size": 2}, GOOD_P, GOOD_G, "block", ["train_samples"]),
    (quality(), GOOD_P, groups([(1.0, 0.2, 0.7)] * 5), "sft_only", ["ranking_pass_rate"]),
    (quality(), pairs([0.01] * 10), GOOD_G, "sft_only", ["reward_margin_mean"]),
    (quality(), GOOD_P, groups([(0.51, 0.50, 0.49)] * 5), "sft_only", ["reward_std"]),
    (quality(), [], [], "sft_only", ["ranking_pass_rate", "reward_margin_mean", "reward_std"]),
])
def test_admission_policy(q, p, g, decision, failed):
    rec = decide(q, p, g, CFG)
    assert rec.decision == decision
    assert sorted(c.name for c in rec.checks if not c.passed) == sorted(failed)
    assert len(rec.checks) == 7 and all(c.threshold is not None for c in rec.checks)


SHIFTED = {"value": 26309.45, "unit": "元", "evidence": "Net profit for FY2021 was 26,309.45 RMB 10k."}
RIGHT = {"value": 26309.45, "unit": "万元", "evidence": "Net profit for FY2021 was 26,309.45 RMB 10k."}


@pytest.mark.parametrize("targets, decision", [
    ([RIGHT] * 20, "admit"),
    ([RIGHT] * 19 + [SHIFTED], "admit"),       # 5 %: at the threshold
    ([RIGHT] * 18 + [SHIFTED] * 2, "repair"),  # 10 %: a shifted export
    ([], "admit"),
])
def test_unit_mismatch_share_sends_shifted_exports_to_repair(targets, decision):
    rec = decide(quality(), GOOD_P, GOOD_G, CFG, targets)
    assert rec.decision == decision


def test_blocked_batch_is_refused_with_the_reason(tmp_path):
    rec = decide(quality(exact_input_overlap=3), GOOD_P, GOOD_G, CFG)
    path = tmp_path / "b1.json"
    path.write_text(rec.model_dump_json())
    with pytest.raises(NotAdmitted, match=r"b1.*block.*train_eval_overlap=3"):
        require(path, "sft")
    ok = tmp_path / "b2.json"
    ok.write_text(decide(quality(), [], [], CFG).model_dump_json())
    require(ok, "sft")
    with pytest.raises(NotAdmitted, match="grpo refused"):
        require(ok, "grpo")


def test_a_poisoned_export_is_sent_to_repair_naming_the_rule(params, tmp_path):
    """Currency units shifted by 10⁴ on one batch: every number is still in its source, so only the
    unit check can tell; the clean batches are admitted."""
    demo_data.write(tmp_path / "raw", seed=5, scale=0.3, poisoned_batch="b2")
    assetize.run(params.assetize, tmp_path / "raw", tmp_path / "assets")
    decisions = {}
    for b in ("b1", "b2"):
        materialize.run(params.materialize, tmp_path / "assets", b, tmp_path / "mat" / b, rewards=params.rewards, retrieval_k=params.retrieval.k)
        decisions[b] = admit.run(params.admit, tmp_path / "mat" / b, tmp_path / "adm" / f"{b}.json")
    assert decisions["b1"].decision == "admit"
    assert decisions["b2"].decision == "repair" and decisions["b2"].trainable == []
    assert any(r.startswith("unit_mismatch_share=") for r in decisions["b2"].reasons)
