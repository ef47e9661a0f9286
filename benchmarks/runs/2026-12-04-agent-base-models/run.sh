#!/usr/bin/env bash
# The agent track's cold start on two base-model families from one commit and seed: agent SFT, then
# evaluate_agent on the base model and agent SFT (agent DPO and GRPO switched off), each profile in a fresh clone.
#   bash benchmarks/runs/2026-12-04-agent-base-models/run.sh WORK COMMIT [PROFILE ...]   (the venv of /work/main;
#   `make gemma` first for gemma3-270m)
set -euo pipefail
work=$1; commit=$2; shift 2
profiles=${*:-smollm2-135m gemma3-270m}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }
for profile in $profiles; do
  clone="$work/$profile"
  rm -rf "$clone"; git clone -q "$repo" "$clone"; git -C "$clone" checkout -q "$commit"
  (
    cd "$clone"
    export PYTHONPATH="$clone/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
    echo "== $profile $(git rev-parse --short HEAD)"
    clap params -S "model=$profile" -S agent.dpo.enabled=false -S agent.grpo.enabled=false
    time dvc repro train_agent_sft prod_adapter
    time clap train agent-dpo
    time clap train agent-grpo
    time clap evaluate-agent --prod models/prod --out data/eval_agent --metrics metrics/agent.json
  ) 2>&1 | stamp > "$work/$profile.log"
done
