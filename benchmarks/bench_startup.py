"""How long the `clap` command takes to start: `clap --help` and a switched-off trainer, for two source trees, run
interleaved in fresh interpreters (the same machine, the same minutes), with what each imported.

    python benchmarks/bench_startup.py --before /tmp/old/src --after src --repeat 7

Every DVC stage is one `clap …` process, and `clap --help` is a user's first command: what the CLI imports before
it reaches the command's work is paid each time. `--before`/`--after` are `src/` folders (a worktree of another
commit: `git worktree add /tmp/old REV`); each run puts its folder first on PYTHONPATH. The figure is the median
wall time of `--repeat` runs; the modules column says which heavyweights the import loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "transformers", "trl", "peft", "scipy", "fastapi", "pandas", "pandera", "duckdb")
PROBES = {
    "clap --help": "import sys; sys.argv = ['clap', '--help']\nfrom clap.cli import app\ntry:\n    app()\n"
                   "except SystemExit:\n    pass\n",
    "import clap.cli": "import clap.cli\n",
}


def timed(src: Path, code: str) -> tuple[float, list[str]]:
    """Wall seconds of one fresh interpreter running `code` with `src` first on the path, and the heavy modules it
    loaded."""
    probe = code + f"\nimport json, sys\nprint('LOADED', json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    env = {**os.environ, "PYTHONPATH": str(src)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    took = time.perf_counter() - start
    loaded = next(line for line in done.stdout.splitlines() if line.startswith("LOADED"))
    return took, json.loads(loaded.removeprefix("LOADED "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the src/ folder of the code before")
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    times = {(p, t): [] for p in PROBES for t in trees}
    loaded = {}
    for _ in range(args.repeat):
        for probe, code in PROBES.items():
            for tree, src in trees.items():  # interleaved: drift hits both alike
                took, mods = timed(src, code)
                times[probe, tree].append(took)
                loaded[probe, tree] = mods
    print(f"| probe | tree | median s (of {args.repeat}) | min s | heavy modules loaded |")
    print("|---|---|---|---|---|")
    for (probe, tree), ts in times.items():
        print(f"| `{probe}` | {tree} | {statistics.median(ts):.2f} | {min(ts):.2f} | "
              f"{', '.join(loaded[probe, tree]) or '—'} |")


if __name__ == "__main__":
    main()
