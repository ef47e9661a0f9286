"""The same trained adapter, answered again under another checkout's decoding: what a decoding change alone does on
the real pages (no retraining, so no seed in the difference).

    python benchmarks/runs/2026-12-07-tatqa-answers/redecode.py <project after bench_tatqa.py> <copy> --clap-src <src>
    ... --set generate.evidence_names_metric=false      # the same checkout with a decoding setting changed

Copies the project, re-pins it to `--clap-src`'s CLAP (`clap upgrade`), re-runs only the held-out evaluation, the
replay and the gate (`dvc repro -s`; `--set`: Hydra overrides for `clap params -S` first: the adapter, the data and the index stay those of the first run) and prints
the table `bench_tatqa.py` prints, from the copy's metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_tatqa import figures, table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("project", type=Path)
    ap.add_argument("copy", type=Path)
    ap.add_argument("--clap-src", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--model", default="smollm2-135m", help="the profile the project was made with (for the table)")
    ap.add_argument("--set", action="append", default=[], help="a Hydra override for `clap params -S`")
    a = ap.parse_args()
    if a.copy.exists():
        shutil.rmtree(a.copy)
    shutil.copytree(a.project, a.copy, symlinks=True)
    env = dict(os.environ, PYTHONPATH=str(a.clap_src.resolve()),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    started = time.time()
    params = [["clap", "params", *(x for o in a.set for x in ("-S", o))]] if a.set else []
    for cmd in (["clap", "upgrade"], *params, ["dvc", "repro", "-s", "evaluate@b1", "replay", "gate"]):
        r = subprocess.run(cmd, cwd=a.copy, env=env, text=True, capture_output=True)
        (a.copy / "redecode.log").open("a").write(r.stdout + r.stderr)
        if r.returncode:
            sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stdout + r.stderr)[-1500:]}")
    result = {"model": a.model, "code": str(a.clap_src), "adapter_of": str(a.project), "set": a.set,
              "conversion": {"facts": "the first run's", "pages_with_facts": "the first run's", "pages": "the first run's"},
              "repro_s": round(time.time() - started, 1), "figures": figures(a.copy)}
    print(table(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
