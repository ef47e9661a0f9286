"""The cost curve of assetize: time, rows/s and peak memory at 1M, 3M and 10M demo facts.

    .venv/bin/python benchmarks/bench_scale.py [--sizes 1000000 3000000 10000000] [--baseline-rev 8a8ed8d]

Per size, on the same corpus and in one run, each in its own process:
  - streaming, local engine (`assetize.engine: local`, the default: `assetize.workers` processes; memory
    budget from params.yaml);
  - streaming on Ray (`--engine ray`, a local cluster of `assetize.workers` CPUs);
  - the peer: the in-memory assetize of `--baseline-rev` (the last revision before streaming), run from
    a `git archive` of that revision, at the sizes where it fits this machine (`--in-memory-up-to`).
Peak memory is the sum over the process and everything it started (Ray's raylet and workers
included), sampled every 0.2 s; the phase times come from the stage's `clap.assetize` log. Writes
`benchmarks/runs/scale.json` and `benchmarks/scale.png` (time and peak memory against facts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_assetize import make_corpus  # noqa: E402

CHILD = r"""
import logging, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, format="phase %(message)s", stream=sys.stdout)
mode, raw, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
from clap.stages import assetize
if mode == "in-memory":
    t = time.perf_counter(); assetize.run(raw, out)
else:
    from clap.config import load
    t = time.perf_counter(); assetize.run(load(Path(sys.argv[4])).assetize, raw, out, engine=mode)
print(f"seconds {time.perf_counter() - t:.2f}")
"""


def measure(mode: str, raw: Path, out: Path, pythonpath: Path | None) -> dict:
    """Run one assetize in a child process; wall time after imports, peak RSS of its whole process tree."""
    env = None
    if pythonpath is not None:
        import os
        env = dict(os.environ, PYTHONPATH=str(pythonpath))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(raw), str(out), str(ROOT / "params.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    peak, done = [0], threading.Event()

    def sample():
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{stderr[-3000:]}")
    phases = {line[6:].split(":")[0]: float(line.rsplit(":", 1)[1].strip().split()[0])
              for line in stdout.splitlines() if line.startswith("phase ") and ":" in line}
    seconds = float(next(line.split()[1] for line in stdout.splitlines() if line.startswith("seconds ")))
    return {"seconds": seconds, "peak_rss_mb": round(peak[0] / 2**20), "phases": phases}


def file_hashes(out: Path) -> dict[str, str]:
    """sha256 of every output file (the engines must write the same bytes)."""
    import hashlib

    return {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(out.rglob("*")) if f.is_file()}


def same_content(old: Path, new: Path) -> bool:
    """The in-memory revision's output and the streaming one hold the same rows (each batch in input order),
    the same report (less `units`) and the same quarantine records."""
    import pandas as pd

    for name in ("chunks", "facts", "decisions"):
        a, b = pd.read_parquet(old / f"{name}.parquet"), pd.read_parquet(new / f"{name}.parquet")
        a = a.sort_values("batch", kind="stable").reset_index(drop=True).astype(object)
        b = b.reset_index(drop=True).astype(object)
        if a.shape != b.shape or not a.where(a.notna(), None).equals(b.where(b.notna(), None)):
            return False
    report = json.loads((new / "report.json").read_text())
    report.pop("units")
    if json.loads((old / "report.json").read_text()) != report:
        return False
    def records(out):
        return sorted(json.dumps(json.loads(line), sort_keys=True) for line in (out / "quarantine.jsonl").open())
    return records(old) == records(new)


def baseline_tree(rev: str, folder: Path) -> Path:
    """The `src/` of a previous revision, extracted with `git archive`: its in-memory assetize, unchanged."""
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("local", "o-"), ("ray", "s-"), ("in-memory", "^--")):
        points = [(r["facts"], r[mode]) for r in rows if r.get(mode)]
        if not points:
            continue
        xs = [p[0] / 1e6 for p in points]
        ax_t.plot(xs, [p[1]["seconds"] for p in points], style, label=mode)
        ax_m.plot(xs, [p[1]["peak_rss_mb"] / 1024 for p in points], style, label=mode)
    ax_t.set(xlabel="facts (millions)", ylabel="seconds", title="assetize wall time")
    ax_m.set(xlabel="facts (millions)", ylabel="peak RSS, GiB (process tree)", title="assetize peak memory")
    ax_m.axhline(4, color="grey", lw=0.8, ls=":")
    for ax in (ax_t, ax_m):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    ap.add_argument("--baseline-rev", default="8a8ed8d")
    ap.add_argument("--in-memory-up-to", type=int, default=3_000_000, help="largest size the in-memory peer runs at")
    ap.add_argument("--compare-up-to", type=int, default=1_000_000,
                    help="largest size whose streaming output is compared row by row with the in-memory one")
    ap.add_argument("--modes", nargs="+", default=["local", "ray", "in-memory"])
    args = ap.parse_args()
    rows = []
    print(f"{'facts':>10} | {'mode':>9} | {'seconds':>8} {'rows/s':>8} {'peak MB':>8} | phases")
    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks" / "runs") as tmp:
        tmp = Path(tmp)
        old_src = baseline_tree(args.baseline_rev, tmp) if "in-memory" in args.modes else None
        for n in args.sizes:
            raw = tmp / f"raw-{n}"
            make_corpus(raw, n)
            row = {"facts": n, "raw_mb": round(sum(f.stat().st_size for f in raw.iterdir()) / 2**20)}
            for mode in args.modes:
                if mode == "in-memory" and n > args.in_memory_up_to:
                    continue
                result = measure(mode, raw, tmp / f"out-{mode}", old_src if mode == "in-memory" else None)
                result["rows_per_s"] = round(n / result["seconds"])
                row[mode] = result
                phases = ", ".join(f"{k} {v:.0f}s" for k, v in result["phases"].items())
                print(f"{n:>10,} | {mode:>9} | {result['seconds']:>8.1f} {result['rows_per_s']:>8,} "
                      f"{result['peak_rss_mb']:>8,} | {phases}", flush=True)
            if "local" in row and "ray" in row:
                row["ray_files_equal_local"] = file_hashes(tmp / "out-local") == file_hashes(tmp / "out-ray")
            if "local" in row and "in-memory" in row and n <= args.compare_up_to:
                row["local_content_equals_in_memory"] = same_content(tmp / "out-in-memory", tmp / "out-local")
            print(f"{'':>10} | checks: " + ", ".join(f"{k} {row[k]}" for k in row if k.endswith(("_local", "_memory"))))
            rows.append(row)
            subprocess.run(["rm", "-rf", str(raw), *(str(tmp / f"out-{m}") for m in args.modes)], check=True)
    (ROOT / "benchmarks" / "runs").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "runs" / "scale.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot(rows, ROOT / "benchmarks" / "scale.png")
    print("→ benchmarks/runs/scale.json, benchmarks/scale.png")


if __name__ == "__main__":
    main()
