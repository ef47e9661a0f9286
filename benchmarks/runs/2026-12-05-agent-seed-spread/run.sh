#!/usr/bin/env bash
# The run-to-run spread of agent RLOO and GRPO at their committed dose (6 steps each): the same start (seed 7's agent
# SFT, SmolLM2-135M-Instruct), the same data, another training seed (`train.seed`: TRL's seed, so the sampled actions
# and episodes, and the dropout draws), swept through DVC's experiment queue in the clone the earlier sweeps left
# (benchmarks/runs/2026-12-05-agent-chain-sweep/run.sh). Run it alone.
#   bash benchmarks/runs/2026-12-05-agent-seed-spread/run.sh CLONE COMMIT "SEEDS" [STEPS]   (the venv of /work/main)
# Each point re-trains one step alone and re-runs the held-out evaluation, `-s` so that no upstream stage re-runs:
#   clap exp run --queue -n rloo-6-sS -S train.seed=S -s train_agent_rloo evaluate_agent   (and grpo-6-sS)
# Table: python benchmarks/runs/2026-12-05-agent-chain-sweep/table.py CLONE --only rloo grpo
set -euo pipefail
clone=$1; commit=$2; seeds=$3; steps=${4:-"rloo grpo"}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
source "$repo/benchmarks/runs/dvc_queue.sh"
in_clone "$clone"
{
  take_code "$repo" "$commit"
  commit_baseline "$commit"
  for step in $steps; do
    n=$(python -c "import yaml; print(yaml.safe_load(open('params.yaml'))['agent']['$step']['max_steps'])")
    for s in $seeds; do
      clap exp run --queue -n "$step-$n-s$s" -S "train.seed=$s" -s "train_agent_$step" evaluate_agent
    done
  done
  run_queue
} 2>&1 | stamp
