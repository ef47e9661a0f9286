"""gate: gather the evidence and apply the release policy (`clap.release.gate.decide`).

    clap gate                  (DVC stage `gate`, writes metrics/gate.json)

Reads admission records, guard reports of every trainer that ran, per-batch evaluation metrics
and deltas (candidate vs prod, candidate vs base, prod vs base), and the ABCD replay; the policy is
`conf/gate/<name>.yaml`. SFT is judged on extraction (and the decision task, once evaluated); SFT→DPO
and SFT→GRPO on the decision evaluation with their own guards; `metrics/gate.json` is the shipped
candidate's decision, with every candidate's verdict under `candidates`. When the adapter in prod regressed against the base model on the evidence
and the candidate cannot replace it, the decision is `rollback`. The human verdict (metrics/human.json,
`clap human import`) counts for the adapter it rated; `release_via_canary` sends a promote to canary first.
The tool-calling agent adapter (metrics/agent.json) is judged on its own track (`decide_agent`) and
recorded under `agent`; the bundle pins it with its evidence only when its verdict is promote or canary
(else the agent adapter in prod stays), so its tag, verification and rollback are the release's. With
`agent.enabled: false` no agent adapter is judged and `agent` stays empty: the release ships none.
Every evidence file is read as it is — a missing, unreadable or malformed one becomes a named
`evidence_invalid` reason (`clap.release.evidence`), never a traceback and never a pass.
"""

from __future__ import annotations

from pathlib import Path

from clap import paths
from clap.config import Gate, Params
from clap.domain.contracts import GateDecision
from clap.evaluate import headline
from clap.io import InputFileError, read_json, read_json_if_exists, sha256_file, write_json
from clap.release.gate import choose, choose_agent, decide, decide_agent, decide_chain_step, via_canary
from clap.stages import trainers as trainer_registry
from clap.stages.spec import StageSpec
from clap.train.spec import AGENT, EXTRACTION


def run(policy: Gate, root: Path, out: Path, *, batches: list[str], chain: list[str], agent_chain: list[str]
        ) -> GateDecision:
    """Judge the extraction chain's candidate (`chain[0]`) and the steps that continue it under the `gate` policy,
    from the evidence under `root`; then the agent chain's adapters, when it has any. `batches`: `data.batches`;
    `chain`, `agent_chain`: each chain's switched-on trainers, in order (`clap.stages.trainers.switched_on`)."""
    root = Path(root)
    admission = {b: read_json(root / paths.admission(b)) for b in batches}
    candidate, trainers = chain[0], list(chain)
    guards = {t: read_json_if_exists(root / paths.guard_report(t)) for t in trainers}
    evaluation = {b: _evidence(root / paths.eval_metrics(b), f"evaluate@{b}") for b in batches}
    replay = _evidence(root / paths.REPLAY_METRICS, "replay", optional=True)
    decisions = _evidence(root / paths.DECISION_METRICS, "evaluate_decisions", optional=True)
    human = _evidence(root / paths.HUMAN_METRICS, "clap human import", optional=True)
    manifest = root / paths.adapter(candidate) / paths.MANIFEST
    judged = {candidate: decide(policy, admission, guards, evaluation, replay, candidate=candidate,
                                decisions=decisions, human=human,
                                candidate_manifest=sha256_file(manifest) if manifest.exists() else None)}
    for step in trainers[1:]:
        judged[step] = decide_chain_step(policy, step, guards[step], judged[candidate], decisions)
    decision = via_canary(policy, choose(judged))
    agent_metrics = None
    if agent_chain:
        agent_metrics = _evidence(root / paths.AGENT_METRICS, "evaluate_agent", optional=True)
        judged_agent = choose_agent({s: decide_agent(policy, agent_metrics,
                                              read_json_if_exists(root / paths.guard_report(s)), s)
                              for s in agent_chain})
        decision = decision.model_copy(update={"agent": judged_agent, "summary": {
            **decision.summary, "agent_decision_code": judged_agent["summary"]["decision_code"],
            "agent_success_delta": judged_agent["summary"]["success_delta"]}})
    write_json(out, decision.model_dump())
    write_json(root / paths.HEADLINE, headline.figures(
        decision.model_dump(), {b: e for b, e in evaluation.items() if isinstance(e, dict)},
        replay if isinstance(replay, dict) else None, agent_metrics if isinstance(agent_metrics, dict) else None))
    shipped = (decision.agent or {}) if agent_chain else {}
    write_json(root / paths.GATE_AGENT, {"candidate": shipped.get("candidate"), "decision": shipped.get("decision")})
    return decision


def _evidence(path: Path, maker: str, optional: bool = False):
    """An evidence record as read, or a one-line description of why it cannot be (the gate's evidence check names
    it and holds): a missing file the stage `maker` writes, unreadable JSON, a key repeated in one object.
    `optional`: absent evidence is None (its rules say what its absence means)."""
    if not path.exists():
        return None if optional else f"missing: the stage {maker} has not written it"
    try:
        return read_json(path)
    except InputFileError as exc:
        return str(exc).removeprefix(f"{path}: ")


def main(params: Params, out: Path = paths.GATE) -> list[str]:
    """Release gate: promote / canary / hold / reject / rollback with machine-readable reasons."""
    d = run(params.gate, Path("."), out, batches=params.data.batches,
            chain=trainer_registry.switched_on(EXTRACTION, params),
            agent_chain=trainer_registry.switched_on(AGENT, params))
    return [f"gate decision: {d.decision}"] + [
        f"  - {r.rule}: {r.observed} vs {r.threshold} → {r.outcome}" + (f" [{r.batch}]" if r.batch else "")
        for r in d.reasons]


STAGE = StageSpec(name="gate", group="release", main=main)
