#!/usr/bin/env bash
# The agent's cold start on the held-out evaluation (64 tasks: held-out companies, phrasings and tool compositions):
# agent SFT at the committed dose, then evaluate_agent on the base model and agent SFT, greedy (no sampled runs:
# `agent.evaluate.sampled_models=[]`, to fit the session), agent DPO and GRPO switched off, in a fresh clone.
#   bash benchmarks/runs/2026-12-05-agent-heldout/run.sh WORK COMMIT   (the venv of /work/main)
set -euo pipefail
work=$1; commit=$2
repo=$(cd "$(dirname "$0")/../../.." && pwd)
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }
clone="$work/smollm2-135m"
rm -rf "$clone"; git clone -q "$repo" "$clone"; git -C "$clone" checkout -q "$commit"
(
  cd "$clone"
  export PYTHONPATH="$clone/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
  echo "== $(git rev-parse --short HEAD)"
  clap params -S agent.dpo.enabled=false -S agent.grpo.enabled=false -S 'agent.evaluate.sampled_models=[]'
  time dvc repro train_agent_sft prod_adapter
  cat data/agent/report.json
  time clap train agent-dpo
  time clap train agent-grpo
  time clap evaluate-agent --prod models/prod --out data/eval_agent --metrics metrics/agent.json
) 2>&1 | stamp > "$work/run.log"
