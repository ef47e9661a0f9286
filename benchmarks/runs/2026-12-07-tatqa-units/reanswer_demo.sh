#!/usr/bin/env bash
# The demo's last state answered again under a checkout's decoding: every evaluate@bN, the replay and the gate rerun
# on a copy (no retraining: the adapters, data and index are the demo run's), then the figures beside the run's own.
#
#   bash benchmarks/runs/2026-12-07-tatqa-units/reanswer_demo.sh <finished demo project> <copy> <checkout>/src
set -euo pipefail
demo=$(cd "$1" && pwd) copy=$(realpath -m "$2") src=$(cd "$3" && pwd)
root=$(cd "$(dirname "$0")/../../.." && pwd)
rm -rf "$copy" && cp -a "$demo" "$copy"
cd "$copy"
export PYTHONPATH=$src PATH="$root/.venv/bin:$PATH"
if [ -f clap-code.json ]; then clap upgrade; fi > reanswer.log 2>&1   # a `clap init` project re-pins; the demo (a clone of CLAP) runs its src
python - >> reanswer.log 2>&1 <<'PY'
# keys the checkout's conf has and the demo's params.yaml lacks: added with their defaults (a moved key carried to its
# new name, as `clap upgrade` does), every other value as the demo's rounds left it (recomposing conf/ would undo the
# `-S` overrides `clap demo` ran with)
import yaml
from pathlib import Path
from clap.config import check, compose, dump, upgrade_plan
from clap.project import template_root
params = yaml.safe_load(Path("params.yaml").read_text(encoding="utf-8"))
plan = upgrade_plan(params, compose([], conf=template_root() / "conf"))
for key, value in plan.adds:
    print(f"params.yaml: {key} = {value} (the checkout's default)")
Path("params.yaml").write_text(dump(check(plan.upgraded, "params.yaml")), encoding="utf-8")
PY
stages=$(grep -o 'evaluate@b[0-9]*' dvc.lock | sort -u | tr '\n' ' ')
dvc repro -f -s $stages replay >> reanswer.log 2>&1
dvc repro -f -s gate >> reanswer.log 2>&1 || true   # a hold exits non-zero only where the project says so
python - "$demo" "$copy" <<'PY'
import json, sys
from pathlib import Path
for name, root in (("the run", Path(sys.argv[1])), ("re-answered", Path(sys.argv[2]))):
    print(name)
    for p in sorted((root / "metrics" / "eval").glob("*.json")):
        e = json.loads(p.read_text())
        print(f"  {e['batch']}: " + ", ".join(f"{k} {e['baseline'][k]:.4f} → {e['candidate'][k]:.4f}"
                                          for k in ("overall_score", "value_accuracy", "wrong_fact_rate")))
    rp, gate = json.loads((root / "metrics/replay.json").read_text()), json.loads((root / "metrics/gate.json").read_text())
    ba = rp["contrasts"]["B-A"]
    print("  replay B value", rp["arms"]["B"]["value_exact"], "| B − A value", ba["value_exact"],
          "| core fields", ba["core_fields_exact"]["delta"])
    print("  gate", gate["decision"], [r["rule"] for r in gate["reasons"] if r.get("outcome") != "info"])
PY
