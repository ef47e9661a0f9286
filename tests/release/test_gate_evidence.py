"""Evidence that is not a finite number with its n never promotes (clap.release.evidence, gate.decide)."""

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.release.test_gate import (
    ADMIT,
    OK,
    POLICY,
    REPLAY_GOOD,
    REPLAY_PROD,
    agent_metrics,
    decisions,
    evaluation,
    replay,
    with_prod,
)

from clap.release.gate import decide, decide_agent, decide_chain_step

ADMIT3 = {b: ADMIT[b] for b in ("b1", "b2", "b3")}
DECISIONS = decisions({"sft": 0.30, "dpo": 0.45}, {"dpo": 0.15})


def promoting() -> dict:
    """Evidence on which the default policy promotes SFT (and DPO, judged as a chain step)."""
    return {"evaluation": with_prod(evaluation([0.05] * 3, ci_half=0.01), 0.04, 0.02), "replay": copy.deepcopy(REPLAY_PROD),
            "decisions": copy.deepcopy(DECISIONS)}


def judge(ev: dict):
    sft = decide(POLICY, ADMIT3, {"sft": OK}, ev["evaluation"], ev["replay"], decisions=ev["decisions"])
    return sft, decide_chain_step(POLICY, "dpo", OK, sft, ev["decisions"])


def leaves(obj, prefix=()):
    """Every (path) to a value inside the evidence, containers included."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield prefix + (k,)
        yield from leaves(v, prefix + (k,))


REMOVED = object()
PATHS = sorted((p for p in leaves(promoting()) if len(p) > 1), key=str)  # every field of every evidence file


def test_the_reference_evidence_promotes():
    sft, dpo = judge(promoting())
    assert sft.decision == "promote" and dpo.decision == "promote", (sft.reasons, dpo.reasons)


BAD = [math.nan, math.inf, -math.inf, None, "0.9", REMOVED]


def mutated(path: tuple, bad) -> dict:
    ev = promoting()
    parent = ev
    for k in path[:-1]:
        parent = parent[k]
    if bad is REMOVED:
        del parent[path[-1]]
    else:
        parent[path[-1]] = bad
    return ev


def test_every_field_replaced_or_removed_never_promotes():
    """Exhaustive: each field of each evidence file, in turn, as NaN, ±inf, null, a string, or removed."""
    promoted = []
    for path in PATHS:
        for bad in BAD:
            sft, dpo = judge(mutated(path, bad))
            if (sft.decision == "promote" and dpo.decision == "promote") or \
                    (path[0] in ("evaluation", "replay") and sft.decision == "promote"):
                promoted.append((path, "removed" if bad is REMOVED else bad))
    assert not promoted, promoted[:10]


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(PATHS), bad=st.sampled_from(BAD), second=st.sampled_from(PATHS))
def test_two_fields_broken_at_once_never_promote(path, bad, second):
    ev = mutated(path, bad)
    parent = ev
    try:
        for k in second[:-1]:
            parent = parent[k]
        parent[second[-1]] = math.nan
    except (KeyError, TypeError, IndexError):
        pass  # the second field went with the first
    sft, dpo = judge(ev)
    assert not (sft.decision == "promote" and dpo.decision == "promote"), (path, bad, second)


def test_every_field_is_exercised_by_the_property():
    assert len(PATHS) > 150  # the batches' metrics and deltas, the replay arms, the decision tables


def test_nan_in_one_batch_holds_naming_the_file_and_field():
    ev = promoting()
    ev["evaluation"]["b2"]["candidate"]["hallucination_rate"] = math.nan
    sft, _ = judge(ev)
    assert sft.decision == "hold" and sft.per_batch["b2"] == "hold"
    bad = [r for r in sft.reasons if r.rule == "evidence_invalid"]
    assert [r.observed for r in bad] == ["metrics/eval/b2.json: candidate.hallucination_rate is NaN, not a finite number"]
    assert bad[0].batch == "b2" and bad[0].outcome == "hold"


@pytest.mark.parametrize("mutate, named", [
    (lambda ev: ev["evaluation"]["b1"]["deltas"]["overall_score"].pop("n"), "metrics/eval/b1.json: deltas.overall_score.n is missing"),
    (lambda ev: ev["evaluation"]["b1"]["deltas_vs_prod"]["overall_score"].update(ci_low=0.5),
     "metrics/eval/b1.json: deltas_vs_prod.overall_score interval [0.5, 0.05] does not hold its point 0.04"),
    (lambda ev: ev["evaluation"]["b3"]["prod"].pop("wrong_fact_rate"),
     "metrics/eval/b3.json: prod.wrong_fact_rate is missing (its siblings carry it)"),
    (lambda ev: ev["replay"]["arms"]["B"].update(value_exact=math.inf), "metrics/replay.json: arms.B.value_exact is inf"),
    (lambda ev: ev["evaluation"].update(b2="missing: the stage evaluate@b2 has not written it"),
     "metrics/eval/b2.json: (file) missing: the stage evaluate@b2 has not written it"),
    (lambda ev: ev["evaluation"]["b1"].update(candidate_is_prod="no"), "metrics/eval/b1.json: candidate_is_prod is str"),
])
def test_invalid_evidence_is_named(mutate, named):
    ev = promoting()
    mutate(ev)
    sft, _ = judge(ev)
    assert sft.decision == "hold"
    assert any(str(r.observed).startswith(named) for r in sft.reasons if r.rule == "evidence_invalid"), sft.reasons


@pytest.mark.parametrize("field, bad", [("success", math.nan), ("hallucinated", None), ("tool_call_accuracy", "x")])
def test_agent_evidence_that_is_not_a_number_holds(field, bad):
    m = agent_metrics(0.4)
    assert decide_agent(POLICY, m, OK).decision == "promote"
    m["models"]["agent_sft"][field] = bad
    d = decide_agent(POLICY, m, OK)
    assert d.decision == "hold" and any(r.rule == "evidence_invalid" for r in d.reasons)


# --- point or interval, per rule group (conf/gate: acts_on) ---

@pytest.mark.parametrize("acts_on, delta, half, expected, rule", [
    ("point", -0.05, 0.2, "hold", "critical_batch_regression"),       # the point is past the tolerance: hold
    ("interval", -0.05, 0.2, "canary", "batch_regression_not_significant"),  # the CI reaches above 0: not shown
    ("interval", -0.05, 0.01, "hold", "critical_batch_regression"),   # the whole CI is past the tolerance
    ("point", -0.01, 0.005, "canary", "regressed_batches"),
    ("interval", -0.01, 0.02, "canary", "batch_regression_not_significant"),
])
def test_batch_rule_on_the_point_or_the_interval(acts_on, delta, half, expected, rule):
    policy = POLICY.model_copy(update={"acts_on": POLICY.acts_on.model_copy(update={"batch": acts_on})})
    ev = evaluation([delta, 0.10, 0.10], ci_half=half)
    d = decide(policy, ADMIT3, {"sft": OK}, ev, REPLAY_GOOD)
    assert d.decision == expected and any(r.rule == rule for r in d.reasons), d.reasons


@pytest.mark.parametrize("acts_on, expected, rule", [
    ("interval", "canary", "decision_score_sft_minus_base_ci_low"),  # a gain whose CI reaches 0
    ("point", "promote", None),                                       # the gain itself is above 0
])
def test_decision_rule_on_the_point_or_the_interval(acts_on, expected, rule):
    policy = POLICY.model_copy(update={"acts_on": POLICY.acts_on.model_copy(update={"decision": acts_on})})
    dec = decisions({"sft": 0.05}, {})
    dec["deltas"]["sft-base"]["decision_score"].update(ci_low=-0.1, ci_high=0.2)
    d = decide(policy, ADMIT3, {"sft": OK}, evaluation([0.05] * 3), REPLAY_GOOD, decisions=dec)
    assert d.decision == expected, d.reasons
    assert (rule is None) or any(r.rule == rule for r in d.reasons)


# --- latency: only a paired timing is compared, once per candidate (the replay's) ---

@pytest.mark.parametrize("latency, named", [
    ({"abstained": "no request timed (replay.latency_requests is 0)"}, None),
    ({"abstained": ""}, "latency.prod.abstained is str '', not a reason"),
    ({"n": 4, "reference_p95_ms": 1000.0, "candidate_p95_ms": 1900.0, "p95_ratio": 1.9, "interleaved": False},
     "latency.prod.interleaved is a boolean: only an interleaved timing is compared"),
    ({"n": 4, "reference_p95_ms": 1000.0, "candidate_p95_ms": 1900.0, "p95_ratio": math.nan, "interleaved": True},
     "latency.prod.p95_ratio is NaN, not a finite number"),
])
def test_the_replays_timing_is_checked_before_it_is_read(latency, named):
    ev = promoting()
    ev["replay"]["latency"]["prod"] = latency
    sft, _ = judge(ev)
    invalid = [r.observed for r in sft.reasons if r.rule == "evidence_invalid"]
    if named is None:
        assert not invalid and sft.decision == "promote"
    else:
        assert sft.decision == "hold" and f"metrics/replay.json: {named}" in invalid, invalid


def test_a_replay_with_prod_is_timed_against_prod():
    """Arm P ran (an adapter is in prod): the timing against the base model alone is not the gate's evidence."""
    ev = promoting()
    ev["replay"]["latency"] = replay("baseline")["latency"]
    sft, _ = judge(ev)
    assert sft.decision == "hold"
    assert "metrics/replay.json: latency.prod is missing" in [r.observed for r in sft.reasons], sft.reasons


def test_latency_rule_abstains_without_a_paired_timing():
    """Stored latencies from another load (prod decoded rounds ago on an idle machine, the candidate now on a
    busy one) are never compared: without the interleaved timing the rule abstains, and the decision stands."""
    ev = with_prod(evaluation([0.05] * 3), 0.04, 0.02)
    for rec in ev.values():
        rec["prod"]["p95_latency_ms"] = 1000.0  # decoded idle, rounds ago
        rec["candidate"]["p95_latency_ms"] = 1840.0  # decoded now, beside other work: ratio 1.84
    timed = replay("prod")
    timed["latency"]["prod"] = {"abstained": "no request timed (replay.latency_requests is 0)"}
    d = decide(POLICY, ADMIT3, {"sft": OK}, ev, timed)
    assert d.decision == "promote"
    assert {r.rule for r in d.reasons if r.outcome == "info"} >= {"p95_latency_ratio_abstained"}


def test_paired_timing_decides_latency():
    ev = with_prod(evaluation([0.05] * 3), 0.04, 0.02)
    d = decide(POLICY, ADMIT3, {"sft": OK}, ev, replay("prod", p95_ratio=1.9))
    assert d.decision == "canary", d.reasons
    assert [(r.rule, r.observed, r.batch) for r in d.reasons if r.rule.startswith("p95")] == [("p95_latency_ratio", 1.9, None)]


def test_clap_gate_names_the_file_and_field_of_a_nan(tmp_path, monkeypatch):
    """As the user meets it: `clap gate` over a project whose b2 record carries a NaN (JSON allows the token) holds,
    and says which file and which field."""
    import json

    import yaml
    from tests.conftest import ROOT
    from typer.testing import CliRunner

    from clap.cli import app
    from clap.config import dump

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"]["batches"] = ["b1", "b2", "b3"]
    params["agent"]["enabled"] = False
    params["train"]["dpo"]["enabled"] = params["train"]["grpo"]["enabled"] = False
    (tmp_path / "params.yaml").write_text(dump(params))
    ev = promoting()
    for b in ("b1", "b2", "b3"):
        (tmp_path / "data/admission").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"data/admission/{b}.json").write_text(json.dumps(ADMIT3[b]))
        (tmp_path / "metrics/eval").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"metrics/eval/{b}.json").write_text(json.dumps(ev["evaluation"][b]))
    (tmp_path / "models/sft").mkdir(parents=True)
    (tmp_path / "models/sft/guard_report.json").write_text(json.dumps(OK))
    (tmp_path / "metrics/replay.json").write_text(json.dumps(ev["replay"]))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["gate"])
    assert r.exit_code == 0 and "gate decision: promote" in r.output, r.output
    text = (tmp_path / "metrics/eval/b2.json").read_text().replace('"parse_ok": 1.0', '"parse_ok": NaN', 1)
    (tmp_path / "metrics/eval/b2.json").write_text(text)
    r = CliRunner().invoke(app, ["gate"])
    assert "gate decision: hold" in r.output, r.output
    assert "evidence_invalid: metrics/eval/b2.json: baseline.parse_ok is NaN" in " ".join(r.output.split())
    gate = json.loads((tmp_path / "metrics/gate.json").read_text())
    assert gate["decision"] == "hold" and gate["per_batch"]["b2"] == "hold"
