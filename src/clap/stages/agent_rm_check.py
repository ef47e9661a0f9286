"""agent rm check: the agent reward model against people — may it drive training?

    clap agent-rm-check         (DVC stage `agent_rm_check`, writes data/agent_rm_check/verdict.json and
                                 metrics/agent_rm_check.json)

The episodes people labelled through `clap human import` (feedback/human/agent_labels.jsonl, each with its whole
conversation) are scored by the trained reward model — the mean over the episode's turns of sigmoid(score), the
learned process reward GRPO adds — and compared with the share of raters who called each episode correct:
Spearman's ρ (does it rank episodes as people do) and the expected calibration error of the score read as
P(correct) (`reward_model.human_check`, thresholds `agent.rm.human`). Too few labels fail the check: a model never
compared with people never shapes the policy. The verdict adds the model's own check against the rule rewards
(`agrees_with_rules`, from `clap train agent-rm`).

Why a stage of its own: importing new labels re-scores them here without training the reward model again, and
the verdict file holds only the outcome, so agent GRPO and RLOO (which depend on it) re-run only when it flips.
The figures and the raters' names are in the metrics file. The demo's labels come from SIMULATED raters
(`clap demo-label`) and say so in `annotators`.
"""

from __future__ import annotations

from pathlib import Path

from clap import model as base_model
from clap import paths
from clap.agent import reward_model
from clap.config import AgentRmHuman, Params
from clap.integrity import pinned_expectation
from clap.io import atomic_dir, read_json, read_jsonl, require_inputs, write_json, write_switched_off
from clap.stages.spec import StageSpec


def run(human: AgentRmHuman, rm_dir: Path, base_dir: Path, labels: Path, out: Path, metrics_file: Path,
        rm_expected: dict | None) -> dict:
    """`human`: the thresholds of `agent.rm.human`; `rm_dir`: models/agent_rm; `rm_expected`: the manifest git pins
    for its adapter (None when it trained none)."""
    rm_metrics = read_json(Path(rm_dir) / paths.TRAIN_METRICS_FILE)
    rows = [r for r in (read_jsonl(labels) if Path(labels).exists() else []) if r.get("correct") is not None]
    people = None
    if rm_metrics.get("steps") and rm_expected is not None:
        scores = []
        if rows:  # no label: nothing to score, and the check fails on its count alone
            model = reward_model.load(base_dir, Path(rm_dir) / "adapter", rm_expected, base_model.identity(base_dir))
            tok = base_model.load_tokenizer(base_dir)
            scores = [reward_model.episode_reward(model, tok, r["messages"], r["steps"]) for r in rows]
        people = reward_model.human_check(scores, [float(r["correct"]) for r in rows], human)
        people |= {"annotators": sorted({a for r in rows for a in r["annotators"]}),
                   "exports": sorted({r["export_id"] for r in rows})}
    verdict = reward_model.verdict(rm_metrics, people)
    metrics = verdict | {"agrees_with_rules": bool(rm_metrics.get("agrees_with_rules")),
                         "agreement_with_rules": (rm_metrics.get("agreement_with_rules") or {}).get("held_out"),
                         "against_people": people, "labelled_episodes": len(rows)}
    with atomic_dir(out, (Path(rm_dir), Path(labels))) as tmp:
        write_json(tmp / "verdict.json", verdict)
    write_json(metrics_file, metrics)
    return metrics


def main(params: Params, out: Path = paths.AGENT_RM_CHECK, metrics: Path = paths.AGENT_RM_CHECK_METRICS,
         labels: Path = paths.AGENT_HUMAN_LABELS) -> list[str]:
    """The agent reward model against people's labels on agent episodes (Spearman, calibration), and its verdict:
    may agent GRPO and RLOO use it (both its checks passed)?"""
    if not params.agent.enabled:
        return [write_switched_off("agent-rm-check", "agent.enabled", out, ("verdict.json",), metrics)]
    rm = paths.adapter("agent_rm")
    require_inputs([(rm.parent / paths.TRAIN_METRICS_FILE, "dvc repro train_agent_rm")])
    m = run(params.agent.rm.human, rm.parent, base_model.resolve(params.model), labels, out, metrics,
            pinned_expectation(Path("."), rm) if rm.exists() else None)
    people = m["against_people"] or {}
    return [f"agent reward model: {'usable' if m['usable_as_reward'] else 'not usable'} as a reward"
            + (f" ({m['failed']} check failed)" if m["failed"] else "")
            + (f"; against {people['n']} labelled episodes Spearman {people['spearman']}, ECE {people['ece']}"
               if people else "")]


STAGE = StageSpec(name="agent_rm_check", group="agent", main=main)
