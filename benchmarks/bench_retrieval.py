"""Retrieval: the project's BM25 (bm25s + CJK-aware tokeniser) beside rank_bm25, same corpus, one run.

    .venv/bin/python benchmarks/bench_retrieval.py [--k 3] [--repeat 20]

Queries are every replay question of the materialized batches (gold chunk known); recall@k and
queries/s are printed for both. rank_bm25 gets the same tokeniser, so the ratio isolates the engine;
a second rank_bm25 row with whitespace tokenisation shows what the tokeniser buys on Chinese.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
from rank_bm25 import BM25Okapi

from clap.io import read_jsonl
from clap.retrieval import BM25Index, tokenize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    chunks = pd.read_parquet("data/assets/chunks.parquet")
    cases = [c for p in sorted(Path("data/materialized").glob("*/replay_cases.jsonl")) for c in read_jsonl(p)]
    queries = [c["question"] for c in cases] * args.repeat
    gold = [c["gold_chunk_id"] for c in cases] * args.repeat
    ids = chunks["chunk_id"].tolist()
    out = {}
    t = time.perf_counter()
    idx = BM25Index(ids, chunks["text"].tolist())
    build = time.perf_counter() - t
    t = time.perf_counter()
    hits = idx.search(queries, args.k)
    q = time.perf_counter() - t
    out["clap (bm25s)"] = {"build_s": round(build, 3), "queries_s": round(len(queries) / q, 1),
                           "recall@k": round(sum(g in h for g, h in zip(gold, hits)) / len(gold), 4)}
    for name, tok in (("rank_bm25 (same tokeniser)", tokenize), ("rank_bm25 (whitespace)", lambda s: s.lower().split())):
        t = time.perf_counter()
        bm = BM25Okapi([tok(x) for x in chunks["text"]])
        build = time.perf_counter() - t
        t = time.perf_counter()
        hits = [[ids[i] for i in bm.get_top_n(tok(qq), list(range(len(ids))), n=args.k)] for qq in queries]
        q = time.perf_counter() - t
        out[name] = {"build_s": round(build, 3), "queries_s": round(len(queries) / q, 1),
                     "recall@k": round(sum(g in h for g, h in zip(gold, hits)) / len(gold), 4)}
    out["speedup_queries"] = round(out["clap (bm25s)"]["queries_s"] / out["rank_bm25 (same tokeniser)"]["queries_s"], 1)
    print(json.dumps({"chunks": len(ids), "queries": len(queries), "k": args.k, **out}, indent=2))


if __name__ == "__main__":
    main()
