"""Does a refactor change what the pipeline writes? The same stages from two commits, each in a fresh clone, and
their outputs' DVC hashes compared.

    python benchmarks/same_outputs.py --before REV --after REV [--stages demo_data,assetize,...] [--work DIR]

Each clone runs `dvc repro -s <stages>` with its own code (PYTHONPATH: its src/); the outputs' md5s recorded in
each clone's dvc.lock are printed side by side, stage by stage, with `same` or `DIFFERS`. The default stages are
the demo's data stages (no model): demo_data, assetize, materialize@b1..b5, admit@b1..b5, index, agent_tasks. A
stage that needs the model (train_*, evaluate@*, replay) can be named too; it then takes its real time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA_STAGES = ["demo_data", "assetize", *[f"materialize@b{i}" for i in range(1, 6)],
               *[f"admit@b{i}" for i in range(1, 6)], "index", "agent_tasks"]


def run(rev: str, work: Path, stages: list[str]) -> dict[tuple[str, str], str]:
    clone = work / rev
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", rev], cwd=clone, check=True)
    env = os.environ | {"PYTHONPATH": str(clone / "src"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with (clone / "repro.log").open("w") as log:
        subprocess.run(["dvc", "repro", "-s", *stages], cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT,
                       check=True)
    lock = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    return {(s, o["path"]): o.get("md5") for s, st in lock.items() if s in stages for o in st.get("outs", [])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--stages", default=",".join(DATA_STAGES))
    ap.add_argument("--work", type=Path, default=Path("/tmp/clap-same-outputs"))
    args = ap.parse_args()
    stages = args.stages.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    before, after = run(args.before, args.work, stages), run(args.after, args.work, stages)
    differ = 0
    for key in sorted(set(before) | set(after)):
        same = before.get(key) == after.get(key)
        differ += not same
        print(f"{'same   ' if same else 'DIFFERS'} {key[0]:16s} {key[1]:28s} {before.get(key)}  {after.get(key)}")
    print(f"{len(set(before) | set(after)) - differ} outputs the same, {differ} differ")


if __name__ == "__main__":
    main()
