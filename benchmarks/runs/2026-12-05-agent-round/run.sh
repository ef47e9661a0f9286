#!/usr/bin/env bash
# One agent round on the real SmolLM2 from a fresh clone, every agent stage the pipeline runs (tasks, SFT, pair
# mining, DPO, the reward model and its check, GRPO, RLOO, the held-out evaluation of base + the four chain models),
# each stage's start stamped, for the round's time split. The evaluation is greedy: at commits before `agent_pass_k`
# (which samples after the gate) with `agent.evaluate.sampled_models=[]`; the sampled runs are timed apart
# (benchmarks/README.md, "one agent round"). Run it alone.
#   bash benchmarks/runs/2026-12-05-agent-round/run.sh WORK COMMIT [OVERRIDE ...]   (the venv of /work/main)
set -euo pipefail
work=$1; commit=$2; shift 2
overrides=(); for o in "$@"; do overrides+=(-S "$o"); done
repo=$(cd "$(dirname "$0")/../../.." && pwd)
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }
clone="$work/round"
rm -rf "$clone"; git clone -q "$repo" "$clone"; git -C "$clone" checkout -q "$commit"
(
  cd "$clone"
  export PYTHONPATH="$clone/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
  echo "== $(git rev-parse --short HEAD) ${overrides[*]:-}"
  clap params $(grep -q sampled_models conf/config.yaml && echo "-S agent.evaluate.sampled_models=[]") "${overrides[@]}"
  time dvc repro evaluate_agent
  echo "== done"
) 2>&1 | stamp > "$work/round.log"
