"""Decoding precision: the engine in bf16 beside the same engine in fp32, on the replay's own requests.

    .venv/bin/python benchmarks/bench_precision.py [--n 20] [--batch-size 10] [--adapter models/sft/adapter]

Run in a repository after `dvc repro replay` (it reads the assets, the index, the materialized replay
cases and the candidate pinned by dvc.lock). The requests are the replay's arm A and B: the application
prompt over the retrieved chunks, decoded under the answer schema with locations, greedy, `replay.*`
token limit. Prints seconds per answer for both precisions and how many answers are identical, per arm.
One process at a time, nothing else running: two torch jobs on 2 cores slow each other ~5×.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from clap.config import Params, load
from clap.evaluate.generate import Engine
from clap.integrity import pinned_expectation
from clap.io import read_jsonl
from clap.model import resolve
from clap.retrieval import BM25Index, retrieve
from clap.stages import replay


def requests(cfg: Params, n: int) -> tuple[list, list]:
    chunks = pd.read_parquet("data/assets/chunks.parquet")
    by_id = {c["chunk_id"]: c for c in chunks.to_dict("records")}
    cases = [c for b in cfg.data.batches for c in read_jsonl(Path("data/materialized") / b / "replay_cases.jsonl")]
    cases = cases[:n]
    hits = retrieve(cfg.retrieval, BM25Index.load(Path("data/index/bm25")), chunks, [c["question"] for c in cases])
    return replay.requests(cases, [[by_id[h] for h in hit] for hit in hits], constrained=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--adapter", type=Path, default=Path("models/sft/adapter"))
    args = ap.parse_args()
    cfg = load()
    convs, schemas = requests(cfg, args.n)
    base = resolve(cfg.model)
    expected = pinned_expectation(Path("."), args.adapter)
    answers, report = {}, {"n": len(convs), "batch_size": args.batch_size}
    for dtype in ("float32", "bfloat16"):
        engine = Engine(base, args.adapter, expected, dtype=dtype)  # no answer store: every answer decoded
        engine.generate(convs[:2], use_adapter=False, max_new_tokens=16, batch_size=2, progress=False)  # warm-up
        for arm, use_adapter in (("A base+RAG", False), ("B candidate+RAG", True)):
            t = time.perf_counter()
            gens = engine.generate(convs, use_adapter=use_adapter, max_new_tokens=cfg.replay.max_new_tokens,
                                   batch_size=args.batch_size, progress=False, schemas=schemas)
            seconds = time.perf_counter() - t
            answers[dtype, arm] = [g.text for g in gens]
            report.setdefault(arm, {})[dtype] = {"s_per_answer": round(seconds / len(convs), 2),
                                                 "tokens_s": round(sum(g.new_tokens for g in gens) / seconds, 1)}
        del engine
    for arm in ("A base+RAG", "B candidate+RAG"):
        r = report[arm]
        r["speedup"] = round(r["float32"]["s_per_answer"] / r["bfloat16"]["s_per_answer"], 2)
        same = sum(a == b for a, b in zip(answers["float32", arm], answers["bfloat16", arm]))
        r["identical_answers"] = f"{same}/{len(convs)}"
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
