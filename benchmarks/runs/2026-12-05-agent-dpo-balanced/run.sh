#!/usr/bin/env bash
# Agent DPO on balanced pairs (agent.dpo.balance_finish=true), swept through DVC's experiment queue on the real
# SmolLM2, in the clone the unbalanced sweep left (benchmarks/runs/2026-12-05-agent-dpo-sweep/run.sh). Run it alone.
#   bash benchmarks/runs/2026-12-05-agent-dpo-balanced/run.sh CLONE COMMIT STEPS...   (the venv of /work/main)
# The clone takes COMMIT's code. With balance_finish false (the committed default) agent DPO trains on exactly the
# pairs it trained on before, so its stage is `dvc commit`ted as it is; each point is then
#   clap exp run --queue -n dpo-bal-N -S agent.dpo.balance_finish=true -S agent.dpo.max_steps=N train_agent_dpo evaluate_agent
# Table: python benchmarks/runs/2026-12-05-agent-dpo-sweep/table.py CLONE
set -euo pipefail
clone=$1; commit=$2; shift 2
repo=$(cd "$(dirname "$0")/../../.." && pwd)
source "$repo/benchmarks/runs/dvc_queue.sh"
in_clone "$clone"
{
  take_code "$repo" "$commit"
  dvc commit -f train_agent_dpo
  dvc status
  time dvc repro evaluate_agent
  commit_baseline "$commit"
  for steps in "$@"; do
    clap exp run --queue -n "dpo-bal-$steps" -S agent.dpo.balance_finish=true -S "agent.dpo.max_steps=$steps" \
      train_agent_dpo evaluate_agent
  done
  run_queue
} 2>&1 | stamp
