"""The agent chain's dose sweep tables — the reward model, RLOO, GRPO — read from the clone's baseline commit (HEAD)
and each experiment DVC's queue ran from it (git refs named rm-N, rloo-N, grpo-N; rloo-N-sS, grpo-N-sS for one dose
at training seed S, benchmarks/runs/2026-12-05-agent-seed-spread/run.sh).

    python benchmarks/runs/2026-12-05-agent-chain-sweep/table.py CLONE [--copy DIR] [--only rm rloo grpo]

Run it with the clone at the sweep's baseline: the experiments are the ones DVC's queue ran from HEAD.

A step whose training the baseline took from its finished checkpoint shows the stage's wall time in the agent round
instead (benchmarks/README.md, "one agent round", pauses left out), marked "(round)".
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import yaml

ROUND_STAGE_WALL = {"agent_rm": "3 min 55 s", "agent_rloo": "10 min 18 s", "agent_grpo": "7 min 05 s"}


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout


def _ci(d: dict) -> str:
    return f"{d['delta']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]"


def points(clone: Path, prefix: str) -> list[tuple[str, str]]:
    """(name, commit): the baseline (HEAD) and each experiment named `prefix`-N or `prefix`-N-sS that DVC's queue ran
    from it (its refs are refs/exps/<baseline[:2]>/<baseline[2:]>/<name>)."""
    baseline = _git(clone, "rev-parse", "HEAD").strip()
    out = [("baseline", baseline)]
    under = f"refs/exps/{baseline[:2]}/{baseline[2:]}"
    for line in _git(clone, "for-each-ref", "--format=%(refname) %(objectname)", under).splitlines():
        ref, sha = line.split()
        name = ref.rsplit("/", 1)[1]
        if re.fullmatch(rf"{prefix}-\d+(-s\d+)?", name):
            out.append((name, sha))
    return out


def _show(clone: Path, sha: str, path: str) -> dict:
    return json.loads(_git(clone, "show", f"{sha}:{path}"))


def _runtime(train: dict, step: str) -> str:
    if train.get("resumed_from") and train.get("train_runtime_s", 0) < 60:
        return f"{ROUND_STAGE_WALL[step]} (round)"
    return f"{train['train_runtime_s']:.0f} s"


def rm_table(clone: Path, copy: Path | None) -> None:
    rows = []
    for name, sha in points(clone, "rm"):
        train, check = _show(clone, sha, "metrics/train_agent_rm.json"), _show(clone, sha, "metrics/agent_rm_check.json")
        p = yaml.safe_load(_git(clone, "show", f"{sha}:params.yaml"))["agent"]["rm"]
        seen = min(p["max_steps"] * p["gradient_accumulation"], train["train_pairs"])
        h, t = train["agreement_with_rules"]["held_out"], train["agreement_with_rules"]["train"]
        rows.append((p["max_steps"], f"| {p['max_steps']} ({name}) | {seen} of {train['train_pairs']} | "
                     f"{_runtime(train, 'agent_rm')} | {train['train_loss']:.3f} | {t['agreement']:.3f} | "
                     f"{h['agreement']:.3f} (n {h['n']}) | {h['mean_margin']:+.3f} | {check['agrees_with_rules']} | "
                     f"{check['usable_as_reward']} ({check.get('failed') or 'passed'}) |"))
        if copy:
            (copy / f"rm{p['max_steps']}-train_agent_rm.json").write_text(json.dumps(train, indent=1))
            (copy / f"rm{p['max_steps']}-agent_rm_check.json").write_text(json.dumps(check, indent=1))
    print("| RM steps | train pairs seen | training | last loss | agreement, train | agreement, held out | "
          "held-out margin | agrees with rules (≥ agent.rm.min_agreement) | usable as reward (check failed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for _, line in sorted(rows):
        print(line)


def policy_table(clone: Path, step: str, copy: Path | None) -> None:
    rows, sft = [], None
    for name, sha in points(clone, step):
        agent, train = _show(clone, sha, "metrics/agent.json"), _show(clone, sha, f"metrics/train_agent_{step}.json")
        params = yaml.safe_load(_git(clone, "show", f"{sha}:params.yaml"))
        n, seed = params["agent"][step]["max_steps"], params["train"]["seed"]
        d, m = agent["deltas_chain"][f"agent_{step}-agent_sft"], agent["models"][f"agent_{step}"]
        sft = sft or agent["models"]["agent_sft"]  # the baseline's: every point's SFT
        rows.append(((n, seed, name), f"| {n} ({name}) | {seed} | {_runtime(train, 'agent_' + step)} | {m['success']:.2f} | "
                     f"{_ci(d['success'])} | {m['hallucinated']:.2f} | {_ci(d['hallucinated'])} | {m['finished']:.2f} | "
                     f"{_ci(d['tool_selection'])} | {_ci(d['arguments'])} | {_ci(d['n_calls'])} |"))
        if copy:
            stem = f"baseline-{step}{n}" if name == "baseline" else name.replace("-", "")  # rloo-6-s18: rloo6s18
            (copy / f"{stem}-agent.json").write_text(json.dumps(agent, indent=1))
            (copy / f"{stem}-train_agent_{step}.json").write_text(json.dumps(train, indent=1))
    print(f"\nagent SFT: success {sft['success']:.2f}, hallucinated {sft['hallucinated']:.2f} (64 held-out tasks)\n")
    print(f"| {step.upper()} steps | training seed | training | success | − SFT success | hallucinated | − SFT hallucinated | finished "
          "| tool selection | arguments | calls per task |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for _, line in sorted(rows):
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("clone", type=Path)
    ap.add_argument("--copy", type=Path, help="write each point's metrics files here")
    ap.add_argument("--only", nargs="+", choices=("rm", "rloo", "grpo"), default=("rm", "rloo", "grpo"),
                    help="the tables to print (default: all three)")
    a = ap.parse_args()
    if a.copy:
        a.copy.mkdir(parents=True, exist_ok=True)
    if "rm" in a.only:
        rm_table(a.clone, a.copy)
    for step in ("rloo", "grpo"):
        if step in a.only:
            policy_table(a.clone, step, a.copy)


if __name__ == "__main__":
    main()
