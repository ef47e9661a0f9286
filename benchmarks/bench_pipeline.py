"""Pipeline overhead: no-op `dvc repro` time, and the share of a run spent outside model compute.

    .venv/bin/python benchmarks/bench_pipeline.py      # after one full `dvc repro`

The no-op figure is `dvc repro` on an up-to-date pipeline (median of 3). The demo split reads the
per-round stage timings of the last timed demo, `benchmarks/last_demo_timing.json` (written by
`benchmarks/time_demo.py`): model stages (train, evaluate, replay) versus everything else.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

MODEL_STAGES = ("train_", "evaluate", "replay", "base_model")


def main() -> None:
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run(["dvc", "repro"], capture_output=True, text=True)
        runs.append(time.perf_counter() - t)
        if "Data and pipelines are up to date" not in r.stdout:
            print("warning: pipeline was not up to date; run `dvc repro` first")
    out = {"noop_repro_s": round(statistics.median(runs), 2), "noop_runs_s": [round(x, 2) for x in runs]}
    timing = Path("benchmarks/last_demo_timing.json")
    if timing.exists():
        rounds = json.loads(timing.read_text())["rounds"]
        stages = [(name, s) for r in rounds.values() for name, s in r["stages"].items()]
        total = sum(s for _, s in stages)
        model = sum(s for name, s in stages if name.startswith(MODEL_STAGES))
        out.update(demo_total_s=round(total, 1), model_compute_s=round(model, 1),
                   orchestration_share=round((total - model) / total, 4))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
