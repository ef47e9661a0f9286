"""Assetize throughput and peak memory at 10k / 100k / 1M facts, beside a plain pandas read.

    .venv/bin/python benchmarks/bench_assetize.py [--sizes 10000 100000 1000000]

Each measurement runs in its own process (peak RSS is per process) and times the work after the
imports; the peer is `pandas.read_json(lines=True)` of the same facts and chunks files — reading
alone, no validation or normalisation — so the ratio shows what contracts, normalisation, evidence
repair and hashing cost on top of I/O.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, raw, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
import pandas as pd
if mode == "clap":
    from clap.stages import assetize
t = time.perf_counter()  # imports excluded for both: the work on the files is what is compared
if mode == "clap":
    from clap.config import load
    assetize.run(load().assetize, raw, out)
else:
    pd.read_json(raw / "facts.jsonl", lines=True, dtype=False)
    pd.read_json(raw / "chunks.jsonl", lines=True)
print(json.dumps({"s": time.perf_counter() - t, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_corpus(folder: Path, n_facts: int) -> None:
    """Demo corpora from successive seeds, ids suffixed per seed, until n_facts facts are written.

    Each seed draws new values, documents and evidence (copies of one small corpus would let
    per-value caches hide the real cost); noise rates are the demo's. One seed at a time keeps
    the generator's memory flat.
    """
    from clap.demo import corpus as demo_data

    folder.mkdir(parents=True, exist_ok=True)
    written, r = 0, 0
    with open(folder / "facts.jsonl", "w") as ff, open(folder / "chunks.jsonl", "w") as fc:
        while written < n_facts:
            corpus = demo_data.generate(seed=7 + r, scale=1.0)
            for c in corpus["chunks"]:
                fc.write(json.dumps(c | {"chunk_id": f"{c['chunk_id']}~{r}", "doc_id": f"{c['doc_id']}~{r}"},
                                    ensure_ascii=False) + "\n")
            for f in corpus["facts"][: n_facts - written]:
                row = f | {"record_id": f"{f['record_id']}~{r}", "doc_id": f"{f['doc_id']}~{r}",
                           "chunk_id": f"{f['chunk_id']}~{r}" if f["chunk_id"] else None}
                ff.write(json.dumps(row, ensure_ascii=False) + "\n")
                written += 1
            r += 1
    with open(folder / "decisions.jsonl", "w") as fd:
        fd.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in demo_data.generate(seed=7)["decisions"])


def measure(mode: str, raw: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, mode, str(raw), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = ap.parse_args()
    print(f"{'facts':>9} | {'clap rows/s':>11} {'clap s':>7} {'clap MB':>8} | {'pandas rows/s':>13} {'pandas s':>8} "
          f"{'pandas MB':>9} | {'time ratio':>10}")
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "raw"
            make_corpus(raw, n)
            c = measure("clap", raw, Path(tmp) / "assets")
            p = measure("pandas", raw, Path(tmp) / "none")
            print(f"{n:>9} | {n / c['s']:>11,.0f} {c['s']:>7.2f} {c['rss_mb']:>8.0f} | {n / p['s']:>13,.0f} "
                  f"{p['s']:>8.2f} {p['rss_mb']:>9.0f} | {c['s'] / p['s']:>9.2f}x")


if __name__ == "__main__":
    main()
