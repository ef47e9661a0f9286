#!/usr/bin/env bash
# The agent reward model's, RLOO's and GRPO's doses, swept through DVC's experiment queue on the real SmolLM2, in the
# clone the DPO sweeps left (benchmarks/runs/2026-12-05-agent-dpo-balanced/run.sh), from its baseline commit
# (the committed doses: agent.rm.max_steps 12, agent.rloo.max_steps 6, agent.grpo.max_steps 6). Run it alone.
#   bash benchmarks/runs/2026-12-05-agent-chain-sweep/run.sh CLONE "RM_STEPS" "RLOO_STEPS" "GRPO_STEPS"
# e.g. run.sh /tmp/dose/round "24 44" "12" "12". The reward model's points stop at agent_rm_check (its agreement with
# the rules on held-out pairs, and its check against people's labels); RLOO's and GRPO's re-train that step and
# re-run the held-out evaluation (the other models' episodes come from the workspace's answer store).
# Table: python benchmarks/runs/2026-12-05-agent-chain-sweep/table.py CLONE
set -euo pipefail
clone=$1; rm_steps=$2; rloo_steps=$3; grpo_steps=$4
source "$(cd "$(dirname "$0")/.." && pwd)/dvc_queue.sh"
in_clone "$clone"
{
  for n in $rm_steps; do clap exp run --queue -n "rm-$n" -S "agent.rm.max_steps=$n" agent_rm_check; done
  for n in $rloo_steps; do
    clap exp run --queue -n "rloo-$n" -S "agent.rloo.max_steps=$n" train_agent_rloo evaluate_agent
  done
  for n in $grpo_steps; do
    clap exp run --queue -n "grpo-$n" -S "agent.grpo.max_steps=$n" train_agent_grpo evaluate_agent
  done
  run_queue
} 2>&1 | stamp
