"""Release-gate policy (docs/design.md §5): a pure function from evidence to a decision with reasons.

promote(M') ⇐ quality(M') ≥ quality(M) ∧ risk(M') ≤ τ, per batch and overall. Outcomes, from worst:
M is the adapter in prod when there is one (the base model before the first release).
- rollback: the adapter in prod regressed against the base model on the evidence (a batch below
            `min_prod_delta_vs_base`, prod − base) and the candidate cannot replace it (policy key
            `rollback_on_prod_regression`): it is not promoted, or it is prod's own adapter re-gated
            (`candidate_is_prod` in the evaluation); when another candidate is promoted, the regression is
            recorded only;
- reject:   the candidate is broken (cannot answer parseable JSON);
- hold:     a guard of the candidate's trainer tripped (a probe's trip holds that probe only), admission did not allow training, a critical per-batch regression,
            too many regressed batches, risk increases beyond τ, or risk itself is above its absolute ceiling
            (`max_hallucination_rate`, `max_wrong_fact_rate`: a base that answers nothing right never makes a
            candidate that is often wrong look safe);
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

from clap import paths
from clap.config import Gate
from clap.domain.contracts import GateDecision, Reason
from clap.domain.names import AGENT_CHAIN, CHAIN
from clap.evaluate.intervals import ci_text
from clap.release import evidence

SEVERITY = ["promote", "canary", "hold", "rollback", "reject"]


def _decision_rules(fire, policy: Gate, decisions: dict | None, step: str) -> None:
    """The decision task's rules for `step`, on its decision_score against prod (else base), on the interval or
    the point as `acts_on.decision` says (`_delta_rule`). The decision holdout is small (≈ 20 cases in the
    demo): the default acts on the interval."""
    if decisions is None or not decisions["n"]:
        fire("decision_eval_missing", None, "≥1 held-out case", "hold")
        return
    ref, d = _vs_reference(decisions, step)
    if d is None:
        fire(f"decision_eval_missing:{step}", None, "present", "hold")
        return
    _delta_rule(fire, f"decision_score_{step}_minus_{ref}", d, policy.min_decision_delta,
                policy.decision_ci_lower_must_exceed, policy.acts_on.decision)


def _delta_rule(fire, rule: str, d: dict, floor: float, must_exceed: float | None, acts_on: str) -> None:
    """One paired delta against its policy. On the interval: hold when the whole CI is below `floor` (significantly
    worse); canary when only the point is (`<rule>_not_significant`: a drop the cases cannot tell from noise), or
    when the CI's lower bound is not above `must_exceed` (`<rule>_ci_low`: a gain not yet shown). On the point:
    hold when the point is below `floor`; canary when it is not above `must_exceed` (`<rule>_point`)."""
    if acts_on == "interval":
        if d["ci_high"] < floor:
            fire(rule, ci_text(d, digits=4), floor, "hold")
        elif d["delta"] < floor:
            fire(f"{rule}_not_significant", ci_text(d, digits=4), floor, "canary")
        elif must_exceed is not None and d["ci_low"] <= must_exceed:
            fire(f"{rule}_ci_low", ci_text(d, digits=4), must_exceed, "canary")
    elif d["delta"] < floor:
        fire(rule, ci_text(d, digits=4), floor, "hold")
    elif must_exceed is not None and d["delta"] <= must_exceed:
        fire(f"{rule}_point", ci_text(d, digits=4), must_exceed, "canary")


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


def _human_rules(fire, policy: Gate, human: dict | None, candidate_manifest: str | None) -> None:
    """The human verdict (metrics/human.json) on the candidate it rated: its usefulness delta against
    the reference against `min_human_usefulness_delta` (`_delta_rule`, on what `acts_on.human` says), trusted only when the raters agree (Krippendorff's α ≥ `min_human_agreement`). A verdict on
    another adapter is stale. With `require_human`, a missing, stale or untrusted verdict keeps the
    candidate from promote; without it, those are recorded as info."""
    required = policy.require_human
    missing = "hold" if required else "info"
    if not human or not human.get("imported"):
        fire("human_eval_missing", None, "metrics/human.json imported", missing)
        return
    if human.get("candidate_manifest_sha256") != candidate_manifest:
        fire("human_eval_stale", (human.get("candidate_manifest_sha256") or "none")[:12],
             (candidate_manifest or "none")[:12], missing)
        return
    alpha = (human.get("agreement", {}).get("usefulness") or {}).get("krippendorff_alpha")
    if alpha is None or alpha < policy.min_human_agreement:
        fire("human_agreement_usefulness", alpha, policy.min_human_agreement, "canary" if required else "info")
        return
    ref = human.get("reference", "base")
    d = (human.get("deltas", {}).get(f"candidate-{ref}") or {}).get("usefulness")
    if d is None or d["delta"] is None:
        fire(f"human_usefulness_candidate_minus_{ref}", None, "rated", missing)
    else:
        _delta_rule(fire, f"human_usefulness_candidate_minus_{ref}", d, policy.min_human_usefulness_delta, None,
                    policy.acts_on.human)


def via_canary(policy: Gate, decision: GateDecision) -> GateDecision:
    """With `release_via_canary`, a promote ships to canary first; `clap canary analyze` / `conclude` decide
    on prod from the logged traffic."""
    if not policy.release_via_canary or decision.decision != "promote":
        return decision
    reason = Reason(rule="release_via_canary", observed=True, threshold="policy", batch=None, outcome="canary")
    return decision.model_copy(update={"decision": "canary", "reasons": [*decision.reasons, reason],
                                       "summary": {**decision.summary, "decision_code": SEVERITY.index("canary")}})


def decide(policy: Gate, admission: dict[str, dict], guards: dict[str, dict], evaluation: dict[str, dict],
           replay: dict | None, candidate: str = "sft", decisions: dict | None = None, human: dict | None = None,
           candidate_manifest: str | None = None) -> GateDecision:
    """`evaluation[batch]` = the batch's metrics/eval record: {"n", "baseline", "candidate", "deltas"}, plus "prod",
    "deltas_vs_prod", "prod_vs_base" and "candidate_is_prod" when an adapter is in prod (then prod is the
    reference M). `replay` (metrics/replay.json) adds the replay rules and the latency rule (its "latency", the
    paired timing); `decisions` (metrics/decisions.json, when the decision evaluation ran) adds the decision rules;
    `human` (metrics/human.json) the human rules, for the adapter whose manifest sha256 is `candidate_manifest`.
    Evidence that is not a finite number with its n holds before any rule reads it (`evidence_invalid`, naming the
    file and field)."""
    reasons: list[Reason] = []

    def fire(rule, observed, threshold, outcome, batch=None):
        reasons.append(Reason(rule=rule, observed=observed, threshold=threshold, batch=batch, outcome=outcome))

    _admission_rules(fire, admission)
    trainers = _guard_rules(fire, policy, guards, candidate)
    bad = evidence.problems(evaluation, replay, decisions, human, batches=admission)
    if bad:
        for file, field, problem in bad:
            fire("evidence_invalid", f"{file}: {field} {problem}", "a finite number with its n", "hold",
                 _batch_of(file, evaluation, admission))
        summary = {"decision_code": SEVERITY.index("hold"), "mean_overall_delta": None, "regressed_batches": None,
                   "reasons": _counted(reasons), "decision_score_delta": None}
        return GateDecision(decision="hold", reasons=reasons, per_batch={b: "hold" for b in {*evaluation} | {*admission}},
                            requires_rag=False, policy=policy.name, candidate=candidate, trainers=trainers,
                            summary=summary)
    per_batch, regressed = _batch_rules(fire, policy, evaluation)
    mean_delta = _pooled_rules(fire, policy, evaluation, regressed)
    _wrong_fact_rule(fire, policy, evaluation)
    parse = [ev["candidate"]["parse_ok"] for ev in evaluation.values()]
    if parse and statistics.fmean(parse) < policy.min_parse_ok:
        fire("parse_ok", round(statistics.fmean(parse), 4), policy.min_parse_ok, "reject")
    requires_rag = _replay_rules(fire, policy, replay)
    _latency_rule(fire, policy, replay)
    if decisions is not None and decisions["n"]:
        _decision_rules(fire, policy, decisions, candidate)
    _human_rules(fire, policy, human, candidate_manifest)
    decision = _prod_regression_rules(fire, policy, evaluation, _worst(reasons))
    summary = {"decision_code": SEVERITY.index(decision), "mean_overall_delta": mean_delta,
               "regressed_batches": regressed, "reasons": _counted(reasons),
               "decision_score_delta": _decision_delta(decisions, candidate)}
    return GateDecision(decision=decision, reasons=reasons, per_batch=per_batch, requires_rag=requires_rag,
                        policy=policy.name, candidate=candidate, trainers=trainers, summary=summary)


def _batch_of(file: str, evaluation: dict, admission: dict) -> str | None:
    return next((b for b in {*evaluation} | {*admission} if file == str(paths.eval_metrics(b))), None)


def _admission_rules(fire, admission: dict[str, dict]) -> None:
    """A batch whose admission did not allow SFT holds the candidate trained on it."""
    for b, rec in sorted(admission.items()):
        if "sft" not in (rec or {}).get("trainable", []):
            fire("admission", (rec or {}).get("decision"), "admit|sft_only", "hold", b)


def _guard_rules(fire, policy: Gate, guards: dict[str, dict | None], candidate: str) -> dict[str, str]:
    """Each trainer's guard report: a missing report or a trip holds the candidate; a probe's trip is recorded
    (info) and holds that probe only. Returns trainer → ok | hold."""
    trainers: dict[str, str] = {}
    for name, g in sorted(guards.items()):
        scope = "hold" if name == candidate else "info"
        if g is None or not isinstance(g, dict) or g.get("status") not in ("ok", "stopped", "disabled"):
            trainers[name] = "hold"
            fire(f"guard_report_missing:{name}", None if g is None else str(g)[:80], "present", scope)
        elif g["status"] != "ok":
            trainers[name] = "hold"
            trip = g.get("trip") or {}
            if policy.require_guards_ok or name == candidate:
                fire(f"guard:{name}:{trip.get('rule')}", trip.get("value"), trip.get("threshold"), scope)
        else:
            trainers[name] = "ok"
    return trainers


def _reference(ev: dict) -> tuple[str, dict, dict]:
    """(name, metrics, candidate − reference deltas) of the batch's reference: prod when one is in prod, else base."""
    return ("prod", ev["prod"], ev["deltas_vs_prod"]) if "prod" in ev else ("baseline", ev["baseline"], ev["deltas"])


def _batch_rules(fire, policy: Gate, evaluation: dict) -> tuple[dict[str, str], int]:
    """Per batch, against the reference: the overall_score regression (on the point or on the interval, as
    `acts_on.batch` says), hallucination and wrong facts. Returns each batch's outcome and the number of regressed
    batches."""
    per_batch, regressed = {}, 0
    on_interval = policy.acts_on.batch == "interval"
    for b, ev in sorted(evaluation.items()):
        _, base, d = _reference(ev)
        cand, o = ev["candidate"], d["overall_score"]
        outcome = "promote"
        below_zero = o["ci_high"] < 0 if on_interval else o["delta"] < 0
        critical = (o["ci_high"] if on_interval else o["delta"]) < policy.max_batch_regression
        if below_zero:
            regressed += 1
            outcome = "canary"
        elif on_interval and o["delta"] < 0:
            fire("batch_regression_not_significant", ci_text(o, digits=4), 0.0, "canary", b)
            outcome = "canary"
        if critical:
            fire("critical_batch_regression", ci_text(o, digits=4) if on_interval else o["delta"],
                 policy.max_batch_regression, "hold", b)
            outcome = "hold"
        for rule, observed, limit in (
                ("hallucination_rate", cand["hallucination_rate"], policy.max_hallucination_rate),
                ("hallucination_increase", round(cand["hallucination_rate"] - base["hallucination_rate"], 4),
                 policy.max_hallucination_increase),
                ("wrong_fact_increase", round(cand["wrong_fact_rate"] - base["wrong_fact_rate"], 4),
                 policy.max_wrong_fact_increase)):
            if observed > limit:
                fire(rule, observed, limit, "hold", b)
                outcome = "hold"
        if _wilson(cand["wrong_fact_rate"], ev["n"])[0] > policy.max_wrong_fact_rate:
            fire("wrong_fact_rate", _rate_text(cand["wrong_fact_rate"], ev["n"]), policy.max_wrong_fact_rate, "hold", b)
            outcome = "hold"
        per_batch[b] = outcome
    return per_batch, regressed


def _wilson(rate: float, n: int) -> tuple[float, float]:
    """The Wilson score interval (95 %) of a share `rate` of `n` answers (pure; (0, 1) for n = 0)."""
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0:
        return 0.0, 1.0
    low, high = proportion_confint(round(rate * n), n, alpha=0.05, method="wilson")
    return float(low), float(high)


def _rate_text(rate: float, n: int) -> str:
    low, high = _wilson(rate, n)
    return f"{rate:.4f} [{low:.4f}, {high:.4f}] (n={n})"


def _wrong_fact_rule(fire, policy: Gate, evaluation: dict) -> None:
    """The candidate's wrong-fact rate over every batch's holdout, pooled (answers weighted by n), against the
    absolute ceiling `max_wrong_fact_rate` — whatever the base or prod scored, so a base that answers nothing
    right cannot make a candidate that is often wrong look safe. On the interval: hold when the whole Wilson
    interval is above the ceiling, canary when the point is; on the point: hold when the point is above."""
    n = sum(ev["n"] for ev in evaluation.values())
    if not n:
        return
    rate = sum(ev["candidate"]["wrong_fact_rate"] * ev["n"] for ev in evaluation.values()) / n
    low, _ = _wilson(rate, n)
    if policy.acts_on.pooled == "interval" and low > policy.max_wrong_fact_rate or \
            policy.acts_on.pooled == "point" and rate > policy.max_wrong_fact_rate:
        fire("wrong_fact_rate_pooled", _rate_text(rate, n), policy.max_wrong_fact_rate, "hold")
    elif rate > policy.max_wrong_fact_rate:
        fire("wrong_fact_rate_pooled_not_significant", _rate_text(rate, n), policy.max_wrong_fact_rate, "canary")


def _latency_rule(fire, policy: Gate, replay: dict | None) -> None:
    """The candidate's p95 over its reference's (prod when the replay ran arm P, else the base model), both timed
    in one interleaved run on the replay's requests (`replay.latency_requests`): canary above
    `max_p95_latency_ratio`. Without such a timing the rule abstains (info): stored latencies were measured at
    other times, under other loads, and are never compared."""
    ref = "prod" if "P" in (replay or {}).get("arms", {}) else "baseline"
    timing = ((replay or {}).get("latency") or {}).get(ref)
    if not timing or timing.get("abstained"):
        fire("p95_latency_ratio_abstained", (timing or {}).get("abstained") or f"no paired timing against {ref}",
             "paired timing", "info")
    elif timing["p95_ratio"] > policy.max_p95_latency_ratio:
        fire("p95_latency_ratio", round(timing["p95_ratio"], 3), policy.max_p95_latency_ratio, "canary")


def _pooled_rules(fire, policy: Gate, evaluation: dict, regressed: int) -> float | None:
    """Over all batches: too many regressed batches holds (one or more canaries); the mean overall_score delta
    holds below `min_overall_delta`; on the interval (`acts_on.pooled`), the mean of the batches' CI lower bounds —
    below the pooled mean's own lower bound, so the rule errs towards canary — must exceed
    `ci_lower_must_exceed`, on the point the mean itself must. Returns the mean delta."""
    if regressed > policy.max_regressed_batches:
        fire("regressed_batches", regressed, policy.max_regressed_batches, "hold")
    elif regressed:
        fire("regressed_batches", regressed, policy.max_regressed_batches, "canary")
    overall = [_reference(ev)[2]["overall_score"] for ev in evaluation.values()]
    if not overall:
        fire("no_evaluation", None, "≥1 batch", "hold")
        return None
    mean_delta = round(statistics.fmean(o["delta"] for o in overall), 6)
    if mean_delta < policy.min_overall_delta:
        fire("overall_delta", mean_delta, policy.min_overall_delta, "hold")
    elif policy.acts_on.pooled == "interval":
        pooled_low = statistics.fmean(o["ci_low"] for o in overall)
        if pooled_low <= policy.ci_lower_must_exceed:
            fire("overall_delta_ci_low", round(pooled_low, 6), policy.ci_lower_must_exceed, "canary")
    elif mean_delta <= policy.ci_lower_must_exceed:
        fire("overall_delta_point", mean_delta, policy.ci_lower_must_exceed, "canary")
    return mean_delta


def _replay_rules(fire, policy: Gate, replay: dict | None) -> bool:
    """The ABCD replay: with `require_replay_gain`, B (adapter + RAG) must not lose to the application's current
    answer (P: prod + RAG, else A: base + RAG) on core fields. Returns whether the adapter needs RAG (D recovers
    under half of B's values)."""
    if not replay:
        if policy.require_replay_gain:
            fire("replay_missing", None, "present", "hold")
        return False
    arms = replay["arms"]
    champion = "P" if "P" in arms else "A"
    gain = arms["B"]["core_fields_exact"] - arms[champion]["core_fields_exact"]
    ci = replay.get("contrasts", {}).get(f"B-{champion}", {}).get("core_fields_exact")
    if policy.require_replay_gain and gain < 0:
        fire(f"replay_core_fields_B_minus_{champion}", round(gain, 4) if ci is None else ci_text(ci, digits=4), 0.0, "hold")
    return arms["D"]["value_exact"] < 0.5 * max(arms["B"]["value_exact"], 1e-9)


def _prod_regression_rules(fire, policy: Gate, evaluation: dict, decision: str) -> str:
    """Prod against the base model on every batch of the evidence: below `min_prod_delta_vs_base` prod regressed.
    A promote replaces it (recorded only); otherwise, with `rollback_on_prod_regression`, the decision is rollback
    (prod's own adapter re-gated is no remedy)."""
    for b, ev in sorted(evaluation.items()):
        if "prod_vs_base" not in ev:
            continue
        prod_delta = ev["prod_vs_base"]["overall_score"]["delta"]
        if prod_delta < policy.min_prod_delta_vs_base:
            replaced = (decision == "promote" and not ev.get("candidate_is_prod")) \
                or not policy.rollback_on_prod_regression
            fire("prod_regressed_vs_base", prod_delta, policy.min_prod_delta_vs_base,
                 "info" if replaced else "rollback", b)
            if not replaced:
                decision = "rollback"
    return decision


def decide_chain_step(policy: Gate, step: str, guard: dict | None, start: GateDecision,
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
    bad = evidence.problems({}, decisions=decisions) if decisions is not None else []
    for file, field, problem in bad:
        fire("evidence_invalid", f"{file}: {field} {problem}", "a finite number with its n", "hold")
    if bad:
        decisions = None
    if not bad:
        _decision_rules(fire, policy, decisions, step)
        _chain_extraction_rules(fire, policy, (decisions or {}).get("extraction"), step)
    if policy.chain_step_must_beat_start and decisions is not None and decisions["n"]:
        d = decisions["deltas"].get(f"{step}-sft", {}).get("decision_score")
        if d is None:
            fire(f"decision_eval_missing:{step}-sft", None, "present", "hold")
        elif d["ci_low"] <= 0:
            fire(f"decision_score_{step}_minus_sft", ci_text(d, digits=4), "CI above 0", "hold")
    decision = _worst(reasons)
    summary = {"decision_code": SEVERITY.index(decision), "decision_score_delta": _decision_delta(decisions, step),
               "reasons": _counted(reasons)}
    return GateDecision(decision=decision, reasons=reasons, per_batch={}, requires_rag=start.requires_rag,
                        policy=policy.name, candidate=step, trainers={step: "ok" if guard and guard["status"] == "ok"
                                                                          else "hold"}, summary=summary)


def _chain_extraction_rules(fire, policy: Gate, extraction: dict | None, step: str) -> None:
    """A chain step on the extraction holdouts against the SFT adapter it continues (evaluate_decisions)."""
    d = ((extraction or {}).get("deltas", {}).get(f"{step}-sft") or {}).get("overall_score")
    if d is None or step not in extraction.get("models", {}):
        fire(f"extraction_eval_missing:{step}-sft", None, "present", "hold")
        return
    _delta_rule(fire, f"extraction_overall_{step}_minus_sft", d, policy.max_chain_extraction_regression, None,
                policy.acts_on.chain_extraction)
    rate = extraction["models"][step]["hallucination_rate"]
    if rate > policy.max_hallucination_rate:
        fire(f"extraction_hallucination_rate:{step}", rate, policy.max_hallucination_rate, "hold")
    wrong = extraction["models"][step]["wrong_fact_rate"]
    if wrong > policy.max_wrong_fact_rate:
        fire(f"extraction_wrong_fact_rate:{step}", wrong, policy.max_wrong_fact_rate, "hold")


def decide_agent(policy: Gate, agent: dict | None, guard: dict | None, candidate: str = "agent_sft") -> GateDecision:
    """A tool-calling agent adapter (its own track: `evaluate_agent` → metrics/agent.json) against the agent
    adapter in prod (the base model before a release shipped one) on the held-out agent tasks: its guards;
    task success against `agent_min_success_delta` and `agent_ci_lower_must_exceed` (`_delta_rule`, on what
    `acts_on.agent` says); its hallucination rate (a final answer no tool return supports) and
    its tool-call accuracy (BFCL's AST rules on the gold prefix) against their thresholds. A later step
    of the agent chain (agent_dpo, agent_grpo, agent_rloo), with `chain_step_must_beat_start`, must also beat agent SFT (CI above 0)."""
    reasons: list[Reason] = []

    def fire(rule, observed, threshold, outcome):
        reasons.append(Reason(rule=rule, observed=observed, threshold=threshold, batch=None, outcome=outcome))

    if guard is None:
        fire(f"guard_report_missing:{candidate}", None, "present", "hold")
    elif guard["status"] != "ok":
        trip = guard.get("trip") or {}
        fire(f"guard:{candidate}:{trip.get('rule')}", trip.get("value"), trip.get("threshold"), "hold")
    model, d = _agent_rules(fire, policy, agent, candidate)
    decision = _worst(reasons)
    summary = {"decision_code": SEVERITY.index(decision), "reasons": _counted(reasons),
               "success_delta": None if d is None else d["delta"],
               "success": None if model is None else model["success"],
               "tool_call_accuracy": None if model is None else model["tool_call_accuracy"]}
    return GateDecision(decision=decision, reasons=reasons, per_batch={}, requires_rag=False, policy=policy.name,
                        candidate=candidate, trainers={candidate: "ok" if guard and guard["status"] == "ok" else "hold"},
                        summary=summary)


def _agent_rules(fire, policy: Gate, agent: dict | None, candidate: str) -> tuple[dict | None, dict | None]:
    """`decide_agent`'s rules on metrics/agent.json, once its evidence checked: task success against the reference,
    hallucination, tool-call accuracy, and a later step against agent SFT. Returns (the candidate's scores, its
    success delta), None for what the evidence does not hold."""
    bad = evidence.problems({}, agent=agent) if agent is not None else []
    for file, field, problem in bad:
        fire("evidence_invalid", f"{file}: {field} {problem}", "a finite number with its n", "hold")
    if bad:
        return None, None
    model = (agent or {}).get("models", {}).get(candidate)
    reference = "prod" if "deltas_vs_prod" in (agent or {}) else "base"
    d = (agent or {}).get(f"deltas_vs_{reference}", {}).get(candidate, {}).get("success")
    if model is None or d is None or not all(k in model for k in ("hallucinated", "tool_call_accuracy", "success")):
        fire("agent_eval_missing", None, "metrics/agent.json with the candidate", "hold")
        return None, d
    _delta_rule(fire, f"agent_success_minus_{reference}", d, policy.agent_min_success_delta,
                policy.agent_ci_lower_must_exceed, policy.acts_on.agent)
    if model["hallucinated"] > policy.agent_max_hallucination_rate:
        fire("agent_hallucination_rate", model["hallucinated"], policy.agent_max_hallucination_rate, "hold")
    if model["tool_call_accuracy"] < policy.agent_min_tool_call_accuracy:
        fire("agent_tool_call_accuracy", model["tool_call_accuracy"], policy.agent_min_tool_call_accuracy, "hold")
    if candidate != AGENT_CHAIN[0] and policy.chain_step_must_beat_start:
        vs = (agent.get("deltas_chain", {}).get(f"{candidate}-{AGENT_CHAIN[0]}") or {}).get("success")
        if vs is None:
            fire(f"agent_eval_missing:{candidate}-{AGENT_CHAIN[0]}", None, "present", "hold")
        elif vs["ci_low"] <= 0:
            fire(f"agent_success_{candidate}_minus_{AGENT_CHAIN[0]}", ci_text(vs, digits=4), "CI above 0", "hold")
    return model, d


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
