#!/usr/bin/env bash
# The agent DPO dose, swept through DVC's experiment queue on the real SmolLM2, in the clone one agent round left
# (benchmarks/runs/2026-12-05-agent-round/run.sh WORK 3794f49): each point re-runs agent DPO and the held-out
# evaluation; the other models' answers come from the workspace's answer store. Run it alone.
#   bash benchmarks/runs/2026-12-05-agent-dpo-sweep/run.sh CLONE COMMIT STEPS...   (the venv of /work/main)
# Before the sweep the clone takes COMMIT's code. Its training outputs came from 3794f49, whose src/clap/agent differs
# from COMMIT's only by additions the training stages do not call (`git diff 3794f49 COMMIT -- src/clap/agent`), so
# those stages are `dvc commit`ted as they are and the baseline's evaluation re-runs under COMMIT's code.
set -euo pipefail
clone=$1; commit=$2; shift 2
repo=$(cd "$(dirname "$0")/../../.." && pwd)
source "$repo/benchmarks/runs/dvc_queue.sh"
in_clone "$clone"
{
  take_code "$repo" "$commit"
  dvc commit -f agent_pairs train_agent_rloo train_agent_grpo
  echo "== baseline: agent.dpo.max_steps=$(python -c 'import yaml;print(yaml.safe_load(open("params.yaml"))["agent"]["dpo"]["max_steps"])')"
  time dvc repro evaluate_agent
  commit_baseline "$commit"
  for steps in "$@"; do
    clap exp run --queue -n "dpo-$steps" -S "agent.dpo.max_steps=$steps" train_agent_dpo evaluate_agent
  done
  run_queue
  dvc exp show --only-changed --md --no-pager || true
} 2>&1 | stamp
