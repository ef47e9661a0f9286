"""Decoding batch size on the replay's own requests: seconds for the same answers at several batch sizes.

    .venv/bin/python benchmarks/bench_batch_size.py [--n 40] [--sizes 10,20,40] [--adapter models/sft/adapter]

Run in a repository after `dvc repro index train_sft` (it reads the assets, the index, the materialized replay
cases and the candidate pinned by dvc.lock), nothing else running. The requests are replay arms B (candidate +
RAG) and A (base + RAG): the application prompt over the retrieved chunks, greedy under the answer schema,
`replay.max_new_tokens`, through `Engine.generate` (length-sorted batches, the engine's grammar loop, bf16 where
native, no answer store). Prints seconds per arm and size, and how many answers equal those of the first size:
in bf16 a row's answer can depend on the batch it is padded into.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from bench_precision import requests
from clap.evaluate.generate import Engine
from clap.integrity import pinned_expectation


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--sizes", default="10,20,40")
    ap.add_argument("--adapter", type=Path, default=Path("models/sft/adapter"))
    args = ap.parse_args()
    cfg = yaml.safe_load(Path("params.yaml").read_text())
    sizes = [int(s) for s in args.sizes.split(",")]
    convs, schemas = requests(cfg, args.n)
    engine = Engine(Path("models/base"), args.adapter, pinned_expectation(Path("."), args.adapter), dtype="auto")
    engine.generate(convs[:2], use_adapter=False, max_new_tokens=8, batch_size=2, progress=False)  # warm-up
    for arm, use_adapter in (("B candidate+RAG", True), ("A base+RAG", False)):
        answers = {}
        for size in sizes:
            t = time.perf_counter()
            gens = engine.generate(convs, use_adapter=use_adapter, max_new_tokens=cfg["replay"]["max_new_tokens"],
                                   batch_size=size, progress=False, schemas=schemas)
            seconds = time.perf_counter() - t
            answers[size] = [g.text for g in gens]
            same = sum(a == b for a, b in zip(answers[sizes[0]], answers[size]))
            print(f"{arm:16s} batch {size:3d}: {seconds:6.1f} s, {seconds / len(convs):.2f} s/answer, "
                  f"{len(convs) / seconds * 60:.1f} answers/min, same answers as batch {sizes[0]}: {same}/{len(convs)}",
                  flush=True)


if __name__ == "__main__":
    main()
