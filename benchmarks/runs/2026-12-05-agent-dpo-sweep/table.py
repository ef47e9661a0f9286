"""The agent DPO sweep's table: each point's agent DPO against agent SFT on the same 64 held-out tasks, read from
the baseline commit's and each experiment's `metrics/agent.json` (git refs DVC's queue left). Points on balanced
pairs (`agent.dpo.balance_finish`, benchmarks/runs/2026-12-05-agent-dpo-balanced) are marked "bal.".

    python benchmarks/runs/2026-12-05-agent-dpo-sweep/table.py CLONE [--copy DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import yaml


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, capture_output=True, text=True, check=True).stdout


def _ci(d: dict) -> str:
    return f"{d['delta']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]"


def points(clone: Path) -> list[tuple[str, str]]:
    """(name, commit): the baseline (HEAD) and each experiment DVC's queue ran from it."""
    out = [("baseline", _git(clone, "rev-parse", "HEAD").strip())]
    for line in _git(clone, "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps").splitlines():
        ref, sha = line.split()
        if "/celery/" not in ref and not ref.endswith("/stash"):
            out.append((ref.rsplit("/", 1)[1], sha))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("clone", type=Path)
    ap.add_argument("--copy", type=Path, help="write each point's agent.json and train_agent_dpo.json here")
    a = ap.parse_args()
    rows, sft = [], None
    for name, sha in points(a.clone):
        agent = json.loads(_git(a.clone, "show", f"{sha}:metrics/agent.json"))
        train = json.loads(_git(a.clone, "show", f"{sha}:metrics/train_agent_dpo.json"))
        steps = yaml.safe_load(_git(a.clone, "show", f"{sha}:params.yaml"))["agent"]["dpo"]
        d = agent["deltas_chain"]["agent_dpo-agent_sft"]
        m, sft = agent["models"]["agent_dpo"], sft or agent["models"]["agent_sft"]  # the baseline's: every point's SFT
        pairs = steps["max_steps"] * steps["gradient_accumulation"]
        balanced = bool(steps.get("balance_finish"))
        label = f"{steps['max_steps']}{' bal.' if balanced else ''}"
        rows.append(((balanced, steps["max_steps"]), f"| {label} ({name}) | {min(pairs, train['pairs'])} of "
                     f"{train['pairs']} | {train['train_runtime_s']:.0f} s | {m['success']:.2f} | {_ci(d['success'])} "
                     f"| {m['hallucinated']:.2f} | {_ci(d['hallucinated'])} | {m['finished']:.2f} | "
                     f"{_ci(d['tool_selection'])} | {_ci(d['arguments'])} | {_ci(d['n_calls'])} |"))
        if a.copy:
            a.copy.mkdir(parents=True, exist_ok=True)
            stem = f"dpo{'-bal' if balanced else ''}{steps['max_steps']}"
            (a.copy / f"{stem}-agent.json").write_text(json.dumps(agent, indent=1))
            (a.copy / f"{stem}-train_agent_dpo.json").write_text(json.dumps(train, indent=1))
    print(f"agent SFT: success {sft['success']:.2f}, hallucinated {sft['hallucinated']:.2f} (64 held-out tasks)\n")
    print("| DPO steps | pairs seen | training | success | DPO − SFT success | hallucinated | DPO − SFT hallucinated "
          "| finished | tool selection | arguments | calls per task |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for _, line in sorted(rows):
        print(line)


if __name__ == "__main__":
    main()
