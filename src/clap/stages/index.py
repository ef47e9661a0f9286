"""index: build the BM25 retrieval index over all chunks and report recall@k per batch.

    clap index                 (DVC stage `index`, writes data/index/)

Recall is measured on every batch's replay questions: is the gold chunk (and the gold doc/page)
among the top k? The index is saved as numpy arrays without pickle.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from clap import paths
from clap.config import Params, Retrieval
from clap.io import atomic_dir, check_output_dir, read_jsonl, require_inputs, write_json
from clap.retrieval import BM25Index, retrieve
from clap.stages.spec import StageSpec


def run(r: Retrieval, assets: Path, materialized: Path, out: Path, batches: list[str]) -> dict:
    """`r`: the `retrieval` section (its recall is measured at `k`); `batches`: `data.batches`."""
    check_output_dir(out, (assets, materialized))
    chunks = pd.read_parquet(Path(assets) / "chunks.parquet")
    bm25 = BM25Index(chunks["chunk_id"].tolist(), chunks["text"].tolist())
    where = {c: (d, int(p)) for c, d, p in zip(chunks["chunk_id"], chunks["doc_id"], chunks["page"])}
    recall = {}
    for b in batches:
        cases = read_jsonl(Path(materialized) / b / "replay_cases.jsonl")
        if not cases:
            continue
        hits = retrieve(r, bm25, chunks, [c["question"] for c in cases])
        recall[b] = {
            f"recall@{r.k}_chunk": round(sum(c["gold_chunk_id"] in h for c, h in zip(cases, hits)) / len(cases), 4),
            f"recall@{r.k}_doc_page": round(sum((c["gold_doc_id"], c["gold_page"]) in {where[x] for x in h}
                                                                 for c, h in zip(cases, hits)) / len(cases), 4),
            "n": len(cases)}
    with atomic_dir(out, (assets, materialized)) as tmp:
        bm25.save(tmp / "bm25")
        write_json(tmp / "retrieval_metrics.json", {"mode": r.mode, "k": r.k,
                                                    "per_batch": recall})
    return recall


def main(params: Params, assets: Path = paths.ASSETS, materialized: Path = paths.MATERIALIZED,
         out: Path = paths.INDEX) -> list[str]:
    """Build the retrieval index over all chunks; report recall@k of the gold chunk per batch."""
    batches = params.data.batches
    require_inputs([(assets, "dvc repro assetize"), *[(materialized / b, f"dvc repro materialize@{b}") for b in batches]])
    return [f"{b}: " + ", ".join(f"{k}={v}" for k, v in r.items())
            for b, r in run(params.retrieval, assets, materialized, out, batches).items()]


STAGE = StageSpec(name="index", group="data", main=main)
