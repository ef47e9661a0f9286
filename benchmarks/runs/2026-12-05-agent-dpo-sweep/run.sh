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
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }
cd "$clone"
export PYTHONPATH="$clone/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
{
  git diff --quiet HEAD || git -c user.name=bench -c user.email=b@b commit -qam "round state"
  git fetch -q "$repo" "$commit" && git checkout FETCH_HEAD -- src dvc.yaml conf
  clap params
  dvc commit -f agent_pairs train_agent_rloo train_agent_grpo
  echo "== baseline: agent.dpo.max_steps=$(python -c 'import yaml;print(yaml.safe_load(open("params.yaml"))["agent"]["dpo"]["max_steps"])')"
  time dvc repro evaluate_agent
  git add -A && git -c user.name=bench -c user.email=b@b commit -qm "baseline at $commit"
  for steps in "$@"; do
    clap exp run --queue -n "dpo-$steps" -S "agent.dpo.max_steps=$steps" train_agent_dpo evaluate_agent
  done
  echo "== queue start"
  dvc queue start -j 1
  sleep 30
  while [[ $(dvc queue status 2>/dev/null) =~ Running|Queued ]]; do sleep 30; done  # not `| grep -q`: pipefail
  dvc queue status
  echo "== done"
  dvc exp show --only-changed --md --no-pager || true
} 2>&1 | stamp
