#!/usr/bin/env bash
# The agent's cold start on the held-out evaluation (64 tasks: held-out companies, phrasings and tool compositions):
# agent SFT at the committed dose, then evaluate_agent on the base model and agent SFT, greedy (at commits before
# agent_pass_k, `agent.evaluate.sampled_models=[]` keeps it so), agent DPO, GRPO and RLOO switched off, in a fresh
# clone.
#   bash benchmarks/runs/2026-12-05-agent-heldout/run.sh WORK COMMIT [LABEL [OVERRIDE ...]]   (the venv of /work/main)
# LABEL (default smollm2-135m) names the clone WORK/LABEL and its log; each OVERRIDE is a `clap params -S` one, e.g.
#   run.sh /tmp/heldout COMMIT two-stage agent.sft.policy=two_stage
#   run.sh /tmp/heldout COMMIT gemma3-270m model=gemma3-270m
set -euo pipefail
work=$1; commit=$2; label=${3:-smollm2-135m}; shift $(( $# < 3 ? $# : 3 ))
overrides=(); for o in "$@"; do overrides+=(-S "$o"); done
repo=$(cd "$(dirname "$0")/../../.." && pwd)
source "$repo/benchmarks/runs/dvc_queue.sh"  # in_clone, stamp
clone="$work/$label"
rm -rf "$clone"; git clone -q "$repo" "$clone"; git -C "$clone" checkout -q "$commit"
log="$work/$label.log"; [ "$label" = smollm2-135m ] && log="$work/run.log"
(
  in_clone "$clone"
  echo "== $(git rev-parse --short HEAD) $label ${overrides[*]:-}"
  clap params -S agent.dpo.enabled=false -S agent.grpo.enabled=false \
    $(grep -q "sampled_models" conf/config.yaml && echo "-S agent.evaluate.sampled_models=[]") \
    $(grep -q "rloo" conf/config.yaml && echo -S agent.rloo.enabled=false) "${overrides[@]}"
  time dvc repro train_agent_sft prod_adapter
  cat data/agent/report.json
  time clap evaluate-agent --prod models/prod --out data/eval_agent --metrics metrics/agent.json
) 2>&1 | stamp > "$log"
