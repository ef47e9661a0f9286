"""Peak memory and time of each stage where users meet it: `dvc repro -f -s <stage>` in a copy of a project that
has run, one stage at a time, nothing beside it.

    python benchmarks/bench_memory.py demo-run --stages train_dpo evaluate@b1 replay ... [--set K=V ...] [--json F]

The project is copied first (outputs, `dvc.lock` and DVC cache), so the run it came from keeps its own. In the copy `generate.reuse_answers` is switched off: an evaluation
decodes every answer, as it does the first time, instead of reading the answer store; `--set agent.enabled=true`
(dotted keys of params.yaml, YAML values) switches on what the run had off. The stages run in the order given, so
a stage's inputs may come from one listed before it. Each stage runs under its
own Python parent, whose `RUSAGE_CHILDREN` peak is the largest process below it: the `clap` command DVC starts
(DVC's own process is smaller). The figure is the one `metrics/train_<name>.json` records as `peak_rss_mb` for a
trainer, measured the same way for every stage.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PROBE = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
         "sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:])")


def measure(project: Path, stage: str) -> dict:
    """One stage rerun alone: its peak RSS (MB), wall seconds and exit status."""
    venv = Path(sys.executable).parent  # this environment's dvc, and the `clap` its stages call
    env = dict(os.environ, PATH=f"{venv}{os.pathsep}{os.environ.get('PATH', '')}")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PROBE, str(venv / "dvc"), "repro", "-f", "-s", stage], cwd=project,
                       capture_output=True, text=True, env=env)
    if len(r.stdout.split()) < 2:
        raise SystemExit(f"{stage}: the probe did not run: {r.stderr[-1500:]}")
    status, peak_kb = r.stdout.split()[:2]
    out = {"stage": stage, "peak_rss_mb": round(int(peak_kb) / 1024), "wall_s": round(time.perf_counter() - t0, 1),
           "status": int(status)}
    if out["status"]:
        out["tail"] = r.stderr[-1500:]
    return out


def copy_project(src: Path, dst: Path, overrides: list[str]) -> None:
    """The project, its outputs and DVC cache, copied; answers decoded afresh in the copy; `overrides` applied."""
    shutil.copytree(src, dst, symlinks=True)
    params = dst / "params.yaml"
    p = yaml.safe_load(params.read_text(encoding="utf-8"))
    for key, value in [("generate.reuse_answers", "false"), *(o.split("=", 1) for o in overrides)]:
        *parents, leaf = key.split(".")
        section = p
        for name in parents:
            section = section[name]
        if leaf not in section:
            raise SystemExit(f"--set {key}: params.yaml has no such key")
        section[leaf] = yaml.safe_load(value)
    params.write_text(yaml.safe_dump(p, sort_keys=False, allow_unicode=True), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("project", type=Path)
    ap.add_argument("--stages", nargs="+", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="clap-mem-") as tmp:
        copy = Path(tmp) / "project"
        copy_project(a.project.resolve(), copy, a.overrides)
        rows = []
        for stage in a.stages:
            rows.append(measure(copy, stage))
            r = rows[-1]
            print(f"{stage:24s} peak {r['peak_rss_mb']:>6} MB  {r['wall_s']:>7} s  exit {r['status']}", flush=True)
            if r["status"]:
                print(r["tail"], file=sys.stderr)
    if a.json:
        a.json.write_text(json.dumps({"project": str(a.project), "overrides": a.overrides, "stages": rows},
                                     indent=1) + "\n")


if __name__ == "__main__":
    main()
