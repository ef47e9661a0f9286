#!/usr/bin/env bash
# The agent track, one round, timed stage by stage on the real SmolLM2 (2 cores, nothing else running).
#   bash benchmarks/runs/2026-12-03-agent-track/run.sh /tmp/agent   (a fresh clone of main; the venv of /work/main)
# Phase 1: agent SFT (bf16 autocast, LM head at the agent's turns only), then evaluate_agent on base and agent SFT
#          alone (agent.dpo / agent.grpo switched off): the quality of the cold start and what evaluation costs.
# Phase 2: the committed config (DPO and GRPO on): dvc repro evaluate_agent runs agent_pairs, the DPO step, the
#          reward model, GRPO and the evaluation again (base and SFT answers read back from the answer store).
set -euo pipefail
clone=$1
cd "$clone"
export PYTHONPATH="$clone/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }
{
  echo "== phase 1 $(git rev-parse --short HEAD)"
  clap params -S agent.dpo.enabled=false -S agent.grpo.enabled=false
  time dvc repro train_agent_sft prod_adapter
  time clap train agent-dpo
  time clap train agent-grpo
  time clap evaluate-agent --prod models/prod --out data/eval_agent --metrics metrics/agent.json
  cp metrics/agent.json phase1-agent.json; cp metrics/train_agent_sft.json phase1-train_agent_sft.json
  echo "== phase 2"
  clap params
  time dvc repro evaluate_agent
} 2>&1 | stamp
