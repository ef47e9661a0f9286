"""Release-gate policy (DESIGN §5): a pure function from evidence to a decision with reasons.

promote(M') ⇐ quality(M') ≥ quality(M) ∧ risk(M') ≤ τ, per batch and overall. Outcomes, from worst:
M is the adapter in prod when there is one (the base model before the first release).
- rollback: the adapter in prod regressed against the base model on the evidence (a batch below
            `min_prod_delta_vs_base`, prod − base) and the candidate cannot replace it (policy key
            `rollback_on_prod_regression`): it is not promoted, or it is prod's own adapter re-gated
            (`candidate_is_prod` in the evaluation); when another candidate is promoted, the regression is
            recorded only;
- reject:   the candidate is broken (cannot answer parseable JSON);
- hold:     a guard of the candidate's trainer tripped (a probe's trip holds that probe only), admission did not allow training, a critical per-batch regression,
            too many regressed batches, or risk increases beyond τ;
- canary:   quality did not drop but the evidence is not conclusive (CI crosses zero, or replay
            shows no gain, or latency rises beyond the ratio);
- promote:  everything above passed.
Each rule that fires is one Reason(rule, observed, threshold, batch, outcome).

The chain (`decide_chain_step`, `choose`): SFT→DPO and SFT→GRPO are candidates too, judged on the
decision evaluation against prod (base before the first release) with the guards of their own runs;
they start from the SFT adapter and inherit its extraction verdict, which their training did not
re-measure. `choose` ships the least severe promotable candidate (the higher decision score, then the
later step, on a tie); when none is promotable the SFT verdict (hold, reject or rollback) stands. A held
GRPO never holds a good SFT.
"""

from __future__ import annotations

import statistics

from clap.schemas import GateDecision, Reason

SEVERITY = ["promote", "canary", "hold", "rollback", "reject"]
CHAIN = ("sft", "dpo", "grpo")  # the steps in order; DPO and GRPO both continue SFT


def _decision_rules(fire, policy: dict, decisions: dict | None, step: str) -> None:
    """The decision task's rules for `step`, on its decision_score against prod (else base): hold when
    the whole CI is below `min_decision_delta` (significantly worse); canary when only the point
    estimate is (a drop the held-out cases cannot tell from noise), or when the CI lower bound is not
    above `decision_ci_lower_must_exceed`. The decision holdout is small (≈ 20 cases in the demo), so
    the rule is on the interval, not the point."""
    if decisions is None or not decisions["n"]:
        fire("decision_eval_missing", None, "≥1 held-out case", "hold")
        return
    ref, d = _vs_reference(decisions, step)
    if d is None or d["delta"] is None:
        fire(f"decision_eval_missing:{step}", None, "present", "hold")
    elif d["ci_high"] < policy["min_decision_delta"]:
        fire(f"decision_score_{step}_minus_{ref}", _with_ci(d), policy["min_decision_delta"], "hold")
    elif d["delta"] < policy["min_decision_delta"]:
        fire(f"decision_score_{step}_minus_{ref}_not_significant", _with_ci(d), policy["min_decision_delta"], "canary")
    elif d["ci_low"] <= policy["decision_ci_lower_must_exceed"]:
        fire(f"decision_score_{step}_minus_{ref}_ci_low", _with_ci(d), policy["decision_ci_lower_must_exceed"], "canary")


def _vs_reference(decisions: dict, step: str) -> tuple[str, dict | None]:
    """The reference (prod when it was evaluated, else base) and `step`'s decision_score delta against it."""
    ref = "prod" if "prod" in decisions["models"] else "base"
    return ref, decisions["deltas"].get(f"{step}-{ref}", {}).get("decision_score")


def _decision_delta(decisions: dict | None, step: str) -> float | None:
    """`step`'s decision_score delta against prod (else base), or None without a decision evaluation."""
    if not decisions or not decisions.get("n"):
        return None
    return (_vs_reference(decisions, step)[1] or {}).get("delta")


def _worst(reasons: list[Reason]) -> str:
    """The most severe outcome among the rules that fired; promote when none did."""
    return max([r.outcome for r in reasons if r.outcome in SEVERITY] + ["promote"], key=SEVERITY.index)


def _counted(reasons: list[Reason]) -> int:
    return len([r for r in reasons if r.outcome in SEVERITY])


def _with_ci(d: dict) -> str:
    return f"{d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"


def _human_rules(fire, policy: dict, human: dict | None, candidate_manifest: str | None) -> None:
    """The human verdict (metrics/human.json) on the candidate it rated: its usefulness delta against
    the reference (hold when the whole CI is below `min_human_usefulness_delta`, canary when the point
    is), trusted only when the raters agree (Krippendorff's α ≥ `min_human_agreement`). A verdict on
    another adapter is stale. With `require_human`, a missing, stale or untrusted verdict keeps the
    candidate from promote; without it, those are recorded as info."""
    required = policy["require_human"]
    missing = "hold" if required else "info"
    if not human or not human.get("imported"):
        fire("human_eval_missing", None, "metrics/human.json imported", missing)
        return
    if human.get("candidate_manifest_sha256") != candidate_manifest:
        fire("human_eval_stale", (human.get("candidate_manifest_sha256") or "none")[:12],
             (candidate_manifest or "none")[:12], missing)
        return
    alpha = (human.get("agreement", {}).get("usefulness") or {}).get("krippendorff_alpha")
    if alpha is None or alpha < policy["min_human_agreement"]:
        fire("human_agreement_usefulness", alpha, policy["min_human_agreement"], "canary" if required else "info")
        return
    ref = human.get("reference", "base")
    d = (human.get("deltas", {}).get(f"candidate-{ref}") or {}).get("usefulness")
    if d is None or d["delta"] is None:
        fire(f"human_usefulness_candidate_minus_{ref}", None, "rated", missing)
    elif d["ci_high"] < policy["min_human_usefulness_delta"]:
        fire(f"human_usefulness_candidate_minus_{ref}", _with_ci(d), policy["min_human_usefulness_delta"], "hold")
    elif d["delta"] < policy["min_human_usefulness_delta"]:
        fire(f"human_usefulness_candidate_minus_{ref}", _with_ci(d), policy["min_human_usefulness_delta"], "canary")


def via_canary(policy: dict, decision: GateDecision) -> GateDecision:
    """With `release_via_canary`, a promote ships to canary first; `clap canary analyze` / `conclude` decide
    on prod from the logged traffic."""
    if not policy["release_via_canary"] or decision.decision != "promote":
        return decision
    reason = Reason(rule="release_via_canary", observed=True, threshold="policy", batch=None, outcome="canary")
    return decision.model_copy(update={"decision": "canary", "reasons": [*decision.reasons, reason],
                                       "summary": {**decision.summary, "decision_code": SEVERITY.index("canary")}})


def decide(policy: dict, admission: dict[str, dict], guards: dict[str, dict], evaluation: dict[str, dict],
           replay: dict | None, candidate: str = "sft", decisions: dict | None = None, human: dict | None = None,
           candidate_manifest: str | None = None) -> GateDecision:
    """`evaluation[batch]` = {"baseline", "candidate", "deltas"} metrics per batch, plus "prod",
    "deltas_vs_prod" and "prod_vs_base" when an adapter is in prod: then prod is the reference M.
    `decisions` (metrics/decisions.json, when the decision evaluation ran) adds the decision rules;
    `human` (metrics/human.json) the human rules, for the adapter whose manifest sha256 is `candidate_manifest`."""
    reasons: list[Reason] = []

    def fire(rule, observed, threshold, outcome, batch=None):
        reasons.append(Reason(rule=rule, observed=observed, threshold=threshold, batch=batch, outcome=outcome))

    for b, rec in sorted(admission.items()):
        if "sft" not in rec.get("trainable", []):
            fire("admission", rec["decision"], "admit|sft_only", "hold", b)
    trainers: dict[str, str] = {}
    for name, g in sorted(guards.items()):
        scope = "hold" if name == candidate else "info"  # a probe's trip holds the probe, not the candidate
        if g is None:
            trainers[name] = "hold"
            fire(f"guard_report_missing:{name}", None, "present", scope)
        elif g["status"] != "ok":
            trainers[name] = "hold"
            trip = g.get("trip") or {}
            if policy["require_guards_ok"] or name == candidate:
                fire(f"guard:{name}:{trip.get('rule')}", trip.get("value"), trip.get("threshold"), scope)
        else:
            trainers[name] = "ok"
    per_batch: dict[str, str] = {}
    overall = []
    regressed = 0
    for b, ev in sorted(evaluation.items()):
        d, base = (ev["deltas_vs_prod"], ev["prod"]) if "prod" in ev else (ev["deltas"], ev["baseline"])
        cand = ev["candidate"]
        delta = d["overall_score"]["delta"]
        overall.append(delta)
        outcome = "promote"
        if delta < 0:
            regressed += 1
            outcome = "canary"
        if delta < policy["max_batch_regression"]:
            fire("critical_batch_regression", delta, policy["max_batch_regression"], "hold", b)
            outcome = "hold"
        if cand["hallucination_rate"] > policy["max_hallucination_rate"]:
            fire("hallucination_rate", cand["hallucination_rate"], policy["max_hallucination_rate"], "hold", b)
            outcome = "hold"
        if cand["hallucination_rate"] - base["hallucination_rate"] > policy["max_hallucination_increase"]:
            fire("hallucination_increase", round(cand["hallucination_rate"] - base["hallucination_rate"], 4),
                 policy["max_hallucination_increase"], "hold", b)
            outcome = "hold"
        if cand["wrong_fact_rate"] - base["wrong_fact_rate"] > policy["max_wrong_fact_increase"]:
            fire("wrong_fact_increase", round(cand["wrong_fact_rate"] - base["wrong_fact_rate"], 4),
                 policy["max_wrong_fact_increase"], "hold", b)
            outcome = "hold"
        bl, cl = base.get("p95_latency_ms"), cand.get("p95_latency_ms")
        if bl and cl and cl / bl > policy["max_p95_latency_ratio"]:
            fire("p95_latency_ratio", round(cl / bl, 3), policy["max_p95_latency_ratio"], "canary", b)
            outcome = max(outcome, "canary", key=SEVERITY.index)
        per_batch[b] = outcome
    if regressed > policy["max_regressed_batches"]:
        fire("regressed_batches", regressed, policy["max_regressed_batches"], "hold")
    elif regressed:
        fire("regressed_batches", regressed, policy["max_regressed_batches"], "canary")
    mean_delta = round(statistics.fmean(overall), 6) if overall else None
    if mean_delta is None:
        fire("no_evaluation", None, "≥1 batch", "hold")
    elif mean_delta < policy["min_overall_delta"]:
        fire("overall_delta", mean_delta, policy["min_overall_delta"], "hold")
    else:
        lows = [ev.get("deltas_vs_prod", ev["deltas"])["overall_score"]["ci_low"] for ev in evaluation.values()]
        pooled_low = statistics.fmean(lows)
        if pooled_low <= policy["ci_lower_must_exceed"]:
            fire("overall_delta_ci_low", round(pooled_low, 6), policy["ci_lower_must_exceed"], "canary")
    parse = [ev["candidate"]["parse_ok"] for ev in evaluation.values()]
    if parse and statistics.fmean(parse) < policy["min_parse_ok"]:
        fire("parse_ok", round(statistics.fmean(parse), 4), policy["min_parse_ok"], "reject")
    requires_rag = False
    if replay:
        arms = replay["arms"]
        requires_rag = arms["D"]["value_exact"] < 0.5 * max(arms["B"]["value_exact"], 1e-9)
        champion = "P" if "P" in arms else "A"  # the application's current answer: prod + RAG, else base + RAG
        gain = arms["B"]["core_fields_exact"] - arms[champion]["core_fields_exact"]
        ci = replay.get("contrasts", {}).get(f"B-{champion}", {}).get("core_fields_exact")
        if policy["require_replay_gain"] and gain < 0:
            fire(f"replay_core_fields_B_minus_{champion}", round(gain, 4) if ci is None else
                 f"{gain:+.4f} [{ci['ci_low']:+.4f}, {ci['ci_high']:+.4f}]", 0.0, "hold")
    elif policy["require_replay_gain"]:
        fire("replay_missing", None, "present", "hold")
    if decisions is not None and decisions["n"]:
        _decision_rules(fire, policy, decisions, candidate)
    _human_rules(fire, policy, human, candidate_manifest)
    decision = _worst(reasons)
    for b, ev in sorted(evaluation.items()):
        if "prod_vs_base" not in ev:
            continue
        prod_delta = ev["prod_vs_base"]["overall_score"]["delta"]
        if prod_delta < policy["min_prod_delta_vs_base"]:
            # a promote replaces prod only when it ships another adapter: the one in prod, re-gated, is no remedy
            replaced = (decision == "promote" and not ev.get("candidate_is_prod")) \
                or not policy["rollback_on_prod_regression"]
            fire("prod_regressed_vs_base", prod_delta, policy["min_prod_delta_vs_base"],
                 "info" if replaced else "rollback", b)
            if not replaced:
                decision = "rollback"
    summary = {"decision_code": SEVERITY.index(decision), "mean_overall_delta": mean_delta,
               "regressed_batches": regressed, "reasons": _counted(reasons),
               "decision_score_delta": _decision_delta(decisions, candidate)}
    return GateDecision(decision=decision, reasons=reasons, per_batch=per_batch, requires_rag=requires_rag,
                        policy=policy["name"], candidate=candidate, trainers=trainers, summary=summary)


def decide_chain_step(policy: dict, step: str, guard: dict | None, start: GateDecision,
                      decisions: dict | None) -> GateDecision:
    """SFT→`step` (dpo or grpo) as a candidate: its own guards, the verdict of the SFT adapter it
    continues (`start`), its decision_score against prod / base, and — with
    `chain_step_must_beat_start` — a CI above zero against SFT, without which it adds nothing to ship.
    On extraction, the task it starts from, it must not fall below SFT: its overall_score − SFT (paired
    over every batch's holdout) holds when the whole CI is below `max_chain_extraction_regression`,
    canary when the point is; its hallucination rate stays under `max_hallucination_rate`."""
    reasons: list[Reason] = []

    def fire(rule, observed, threshold, outcome, batch=None):
        reasons.append(Reason(rule=rule, observed=observed, threshold=threshold, batch=batch, outcome=outcome))

    if guard is None:
        fire(f"guard_report_missing:{step}", None, "present", "hold")
    elif guard["status"] != "ok":
        trip = guard.get("trip") or {}
        fire(f"guard:{step}:{trip.get('rule')}", trip.get("value"), trip.get("threshold"), "hold",
             None if trip.get("step") is None else f"step {trip['step']}")
    if start.decision != "promote":
        fire("starts_from_sft", start.decision, "promote", "canary" if start.decision == "canary" else "hold")
    _decision_rules(fire, policy, decisions, step)
    _chain_extraction_rules(fire, policy, (decisions or {}).get("extraction"), step)
    if policy["chain_step_must_beat_start"] and decisions is not None and decisions["n"]:
        d = decisions["deltas"].get(f"{step}-sft", {}).get("decision_score")
        if d is None or d["delta"] is None:
            fire(f"decision_eval_missing:{step}-sft", None, "present", "hold")
        elif d["ci_low"] <= 0:
            fire(f"decision_score_{step}_minus_sft", _with_ci(d), "CI above 0", "hold")
    decision = _worst(reasons)
    summary = {"decision_code": SEVERITY.index(decision), "decision_score_delta": _decision_delta(decisions, step),
               "reasons": _counted(reasons)}
    return GateDecision(decision=decision, reasons=reasons, per_batch={}, requires_rag=start.requires_rag,
                        policy=policy["name"], candidate=step, trainers={step: "ok" if guard and guard["status"] == "ok"
                                                                          else "hold"}, summary=summary)


def _chain_extraction_rules(fire, policy: dict, extraction: dict | None, step: str) -> None:
    """A chain step on the extraction holdouts against the SFT adapter it continues (evaluate_decisions)."""
    d = ((extraction or {}).get("deltas", {}).get(f"{step}-sft") or {}).get("overall_score")
    if d is None or d["delta"] is None:
        fire(f"extraction_eval_missing:{step}-sft", None, "present", "hold")
        return
    floor = policy["max_chain_extraction_regression"]
    if d["ci_high"] < floor:
        fire(f"extraction_overall_{step}_minus_sft", _with_ci(d), floor, "hold")
    elif d["delta"] < floor:
        fire(f"extraction_overall_{step}_minus_sft", _with_ci(d), floor, "canary")
    rate = extraction["models"][step]["hallucination_rate"]
    if rate > policy["max_hallucination_rate"]:
        fire(f"extraction_hallucination_rate:{step}", rate, policy["max_hallucination_rate"], "hold")


AGENT_CHAIN = ("agent_sft", "agent_dpo", "agent_grpo")


def agent_chain(cfg: dict) -> list[str]:
    """The agent adapters this configuration trains and judges: agent SFT, then each enabled step continuing it."""
    return ["agent_sft"] + [s for s in AGENT_CHAIN[1:] if cfg["agent"][s.removeprefix("agent_")]["enabled"]]


def decide_agent(policy: dict, agent: dict | None, guard: dict | None, candidate: str = "agent_sft") -> GateDecision:
    """A tool-calling agent adapter (its own track: `evaluate_agent` → metrics/agent.json) against the agent
    adapter in prod (the base model before a release shipped one) on the held-out agent tasks: its guards;
    task success — hold when the whole CI is below
    `agent_min_success_delta`, canary when the point estimate is or the CI lower bound is not above
    `agent_ci_lower_must_exceed`; its hallucination rate (a final answer no tool return supports) and
    its tool-call accuracy (BFCL's AST rules on the gold prefix) against their thresholds. A later step
    of the agent chain (agent_dpo, agent_grpo), with `chain_step_must_beat_start`, must also beat agent SFT (CI above 0)."""
    reasons: list[Reason] = []

    def fire(rule, observed, threshold, outcome):
        reasons.append(Reason(rule=rule, observed=observed, threshold=threshold, batch=None, outcome=outcome))

    if guard is None:
        fire(f"guard_report_missing:{candidate}", None, "present", "hold")
    elif guard["status"] != "ok":
        trip = guard.get("trip") or {}
        fire(f"guard:{candidate}:{trip.get('rule')}", trip.get("value"), trip.get("threshold"), "hold")
    model = (agent or {}).get("models", {}).get(candidate)
    reference = "prod" if "deltas_vs_prod" in (agent or {}) else "base"
    d = (agent or {}).get(f"deltas_vs_{reference}", {}).get(candidate, {}).get("success")
    if model is None or d is None or d["delta"] is None:
        fire("agent_eval_missing", None, "metrics/agent.json with the candidate", "hold")
    else:
        rule = f"agent_success_minus_{reference}"
        if d["ci_high"] < policy["agent_min_success_delta"]:
            fire(rule, _with_ci(d), policy["agent_min_success_delta"], "hold")
        elif d["delta"] < policy["agent_min_success_delta"]:
            fire(f"{rule}_not_significant", _with_ci(d), policy["agent_min_success_delta"], "canary")
        elif d["ci_low"] <= policy["agent_ci_lower_must_exceed"]:
            fire(f"{rule}_ci_low", _with_ci(d), policy["agent_ci_lower_must_exceed"], "canary")
        if model["hallucinated"] > policy["agent_max_hallucination_rate"]:
            fire("agent_hallucination_rate", model["hallucinated"], policy["agent_max_hallucination_rate"], "hold")
        if model["tool_call_accuracy"] < policy["agent_min_tool_call_accuracy"]:
            fire("agent_tool_call_accuracy", model["tool_call_accuracy"], policy["agent_min_tool_call_accuracy"], "hold")
        if candidate != AGENT_CHAIN[0] and policy["chain_step_must_beat_start"]:
            vs = (agent.get("deltas_chain", {}).get(f"{candidate}-{AGENT_CHAIN[0]}") or {}).get("success")
            if vs is None or vs["delta"] is None:
                fire(f"agent_eval_missing:{candidate}-{AGENT_CHAIN[0]}", None, "present", "hold")
            elif vs["ci_low"] <= 0:
                fire(f"agent_success_{candidate}_minus_{AGENT_CHAIN[0]}", _with_ci(vs), "CI above 0", "hold")
    decision = _worst(reasons)
    summary = {"decision_code": SEVERITY.index(decision), "reasons": _counted(reasons),
               "success_delta": None if d is None else d["delta"],
               "success": None if model is None else model["success"],
               "tool_call_accuracy": None if model is None else model["tool_call_accuracy"]}
    return GateDecision(decision=decision, reasons=reasons, per_batch={}, requires_rag=False, policy=policy["name"],
                        candidate=candidate, trainers={candidate: "ok" if guard and guard["status"] == "ok" else "hold"},
                        summary=summary)


def choose_agent(judged: dict[str, GateDecision]) -> dict:
    """The agent adapter to ship with the release (`judged`: name → its verdict, agent_sft first): the
    least severe promote/canary, then the higher success delta, then the later step; none → agent_sft's
    verdict stands. Every verdict is kept under `candidates`."""
    order = [c for c in AGENT_CHAIN if c in judged]
    shippable = [c for c in order if judged[c].decision in ("promote", "canary")]

    def rank(c: str):
        delta = judged[c].summary.get("success_delta")
        return SEVERITY.index(judged[c].decision), -(delta if delta is not None else float("-inf")), -order.index(c)
    ship = min(shippable, key=rank) if shippable else order[0]
    chosen = judged[ship]
    return {"candidate": ship, "decision": chosen.decision, "reasons": [r.model_dump() for r in chosen.reasons],
            "summary": chosen.summary, "candidates": {c: {"decision": judged[c].decision,
                                                          "reasons": [r.model_dump() for r in judged[c].reasons],
                                                          "summary": judged[c].summary} for c in order}}


def choose(judged: dict[str, GateDecision]) -> GateDecision:
    """The release decision over the chain's candidates (`judged`: name → its own decision, "sft"
    required): the least severe promote/canary, on a tie the higher decision score against prod/base,
    then the later step; else SFT's verdict stands.
    The result is the shipped candidate's decision, with every candidate's verdict in `candidates`."""
    order = [c for c in CHAIN if c in judged]
    shippable = [c for c in order if judged[c].decision in ("promote", "canary")]

    def rank(c: str):  # least severe first, then the higher decision score, then the later step
        score = judged[c].summary.get("decision_score_delta")
        return SEVERITY.index(judged[c].decision), -(score if score is not None else float("-inf")), -order.index(c)
    ship = min(shippable, key=rank) if shippable else "sft"
    chosen = judged[ship]
    candidates = {c: {"decision": judged[c].decision, "reasons": [r.model_dump() for r in judged[c].reasons],
                      "summary": judged[c].summary} for c in order}
    trainers = {**judged["sft"].trainers, **{c: judged[c].trainers.get(c, "hold") for c in order if c != "sft"}}
    return chosen.model_copy(update={"candidates": candidates, "trainers": trainers,
                                     "summary": {**chosen.summary, "candidate_code": CHAIN.index(ship)}})
