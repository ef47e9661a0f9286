"""The decision task's training data: preference pairs and GRPO groups from a batch's decision cases, each answer
scored by the decision reward, and the held-out cases split off by case.

    clap materialize --batch b1          (the stage, `clap.stages.materialize`, that writes them)
"""

from __future__ import annotations

import json

import pandas as pd

from clap.config import Materialize, Rewards
from clap.data.split import in_eval
from clap.domain import prompts
from clap.train.rewards import decision_reward


def decision_rows(decisions: pd.DataFrame, batch: str, m: Materialize, rewards: Rewards) -> tuple[list, list, list]:
    """The batch's decision cases split by case: preference pairs and GRPO groups from the training cases, the
    held-out cases for `evaluate_decisions`."""
    batch_dec = decisions[decisions["batch"] == batch]
    dec_eval = batch_dec["record_id"].map(lambda r: in_eval(r, m.decision_eval_fraction, m.seed)).astype(bool)
    pairs, groups = preferences(batch_dec[~dec_eval], decisions, rewards)
    decision_eval = [{"case_id": f"dc-{g['record_id']}", "batch": batch, **{k: v for k, v in g.items() if k != "group_id"}}
                     for g in preferences(batch_dec[dec_eval], decisions, rewards)[1]]
    return pairs, groups, decision_eval


def preferences(batch_dec: pd.DataFrame, all_dec: pd.DataFrame, rcfg: Rewards) -> tuple[list[dict], list[dict]]:
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
