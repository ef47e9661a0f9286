#!/usr/bin/env bash
# Agent RLOO's dose with each state's prompt run once (clap.train.shared_prefix, no gradient checkpointing), swept
# through DVC's experiment queue on the real SmolLM2, in the clone the earlier sweeps left
# (benchmarks/runs/2026-12-05-agent-chain-sweep/run.sh). Run it alone.
#   bash benchmarks/runs/2026-12-05-agent-rloo-shared-prefix/run.sh CLONE COMMIT "STEPS"   (the venv of /work/main)
# The clone takes COMMIT's code and becomes the new baseline as it stands (its RLOO: 6 steps of TRL's own trainer).
# Each point re-trains RLOO alone and re-runs the held-out evaluation, `-s` so that no upstream stage re-runs (the
# other models' episodes come from the workspace's answer store):
#   clap exp run --queue -n rloo-N -S agent.rloo.max_steps=N -s train_agent_rloo evaluate_agent
# Table: python benchmarks/runs/2026-12-05-agent-chain-sweep/table.py CLONE --only rloo
set -euo pipefail
clone=$1; commit=$2; steps=$3
repo=$(cd "$(dirname "$0")/../../.." && pwd)
source "$repo/benchmarks/runs/dvc_queue.sh"
in_clone "$clone"
{
  take_code "$repo" "$commit"
  commit_baseline "$commit"
  for n in $steps; do
    clap exp run --queue -n "rloo-$n" -S "agent.rloo.max_steps=$n" -s train_agent_rloo evaluate_agent
  done
  run_queue
} 2>&1 | stamp
