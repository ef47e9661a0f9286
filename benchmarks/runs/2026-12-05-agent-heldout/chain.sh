#!/usr/bin/env bash
# The rest of the agent chain (agent_pairs, DPO, the reward model and its check, RLOO, GRPO) and the held-out
# evaluation of all five models, in a clone that run.sh left (agent SFT trained, base and SFT evaluated: their
# episodes come from the answer store), at the committed doses, each stage timed by DVC's own log lines.
#   bash benchmarks/runs/2026-12-05-agent-heldout/chain.sh WORK LABEL [OVERRIDE ...]   (the venv of /work/main)
# The reward model trains 2 steps (agent.rm.max_steps=2): with no person's labels its check fails closed and it
# drives nothing, so its dose only costs time (44 steps ≈ 15–30 min on 2 cores).
#   chain.sh /tmp/heldout gemma3-270m model=gemma3-270m
set -euo pipefail
work=$1; label=$2; shift 2
overrides=(); for o in "$@"; do overrides+=(-S "$o"); done
source "$(cd "$(dirname "$0")/../../.." && pwd)/benchmarks/runs/dvc_queue.sh"  # in_clone, stamp
clone="$work/$label"
(
  in_clone "$clone"
  echo "== $(git rev-parse --short HEAD) $label chain ${overrides[*]:-}"
  clap params -S agent.rm.max_steps=2 "${overrides[@]}"
  time dvc repro evaluate_agent
  cat metrics/train_agent_*.json
) 2>&1 | stamp > "$work/$label-chain.log"
