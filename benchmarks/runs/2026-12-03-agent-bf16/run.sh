#!/usr/bin/env bash
# Phase 2 of the agent track again, with this stop's code: agent DPO / RM / GRPO in bf16 autocast (agent.*.bf16: auto),
# the reward model's check reading each state once, sampled turns seeded per request (so agent_pairs mines again and
# evaluate_agent decodes every model again: generate.py is in the answer store's code salt).
#   bash benchmarks/runs/2026-12-03-agent-bf16/run.sh /tmp/agent   (the checkout of 2026-12-03-agent-track after its
#   two phases, its src/, conf/, params.yaml and dvc.yaml replaced by main's; the venv of /work/main)
set -euo pipefail
clone=$1
cd "$clone"
export PYTHONPATH="$clone/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }
{
  echo "== phase 2 again"
  clap params
  dvc status evaluate_agent | head -40
  time dvc repro evaluate_agent
} 2>&1 | stamp
