#!/usr/bin/env bash
# Time every stage of the loop on this machine: runs each stage alone (`dvc repro -s -f`) in pipeline
# order and writes benchmarks/last_demo_timing.json ({stage: seconds}).  Usage: bash benchmarks/time_demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
stages=$(python -c '
import yaml
from clap.config import load
p = load()
order = []
for name, s in yaml.safe_load(open("dvc.yaml"))["stages"].items():
    order += [f"{name}@{b}" for b in p["data"]["batches"]] if "foreach" in s else [name]
print(" ".join(order))')
out="{"
for stage in $stages; do
  t0=$(date +%s.%N)
  dvc repro -s -f "$stage" >/dev/null
  t1=$(date +%s.%N)
  out="$out\"$stage\": $(python -c "print(round($t1 - $t0, 2))"),"
done
echo "${out%,}}" | python -m json.tool > benchmarks/last_demo_timing.json
cat benchmarks/last_demo_timing.json
