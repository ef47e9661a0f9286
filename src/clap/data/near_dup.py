"""Near-duplicate search by MinHash LSH bands, a block of texts at a time.

    near = near_duplicates(train_texts, holdout_texts, threshold=0.8, num_perm=64)   # one bool per train text

The same answer as datasketch's `MinHashLSH` (its own optimiser turns the threshold into bands × rows;
a train text is a candidate when one band of its signature equals, byte for byte, that band of a holdout
text's), without a MinHash object per text or the LSH's dictionaries: signatures are computed a block
at a time (`MinHash.bulk`) and only the holdout's band keys are kept, so memory follows the holdout and
the block, not the batch. Blocks are independent — the unit a Ray `map_batches` would spread. Used by
`clap materialize` for the train/holdout overlap check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
from datasketch import MinHash
from datasketch.lsh import _optimal_param

from clap import normalize as nz

BLOCK = 4096


def shingles(text: str) -> set[str]:
    """Word (or CJK character) 3-grams of the folded, lower-cased text."""
    s = nz.fold(text).lower()
    toks = re.findall(r"[a-z0-9]+|[\u4e00-\u9fff]", s)
    return {" ".join(toks[i:i + 3]) for i in range(max(1, len(toks) - 2))}


def signatures(texts: list[str], num_perm: int) -> np.ndarray:
    """(len(texts), num_perm) MinHash signatures, seed 1 (the seed materialize has always used)."""
    if not texts:
        return np.zeros((0, num_perm), dtype=np.uint64)
    hashed = MinHash.bulk([[s.encode() for s in shingles(t)] for t in texts], num_perm=num_perm, seed=1)
    return np.vstack([m.hashvalues for m in hashed]).astype(np.uint64)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[list[bytes]]:
    """Per band, each text's slice of the signature as bytes (equal bytes = a shared bucket)."""
    out = []
    for b in range(bands):
        part = np.ascontiguousarray(signature[:, b * rows:(b + 1) * rows])
        out.append(part.view(np.dtype((np.void, part.shape[1] * part.itemsize))).ravel().tolist())
    return out


def near_duplicates(train: Iterable[str], holdout: Iterable[str], threshold: float, num_perm: int) -> list[bool]:
    bands, rows = _optimal_param(threshold, num_perm, 0.5, 0.5)  # datasketch MinHashLSH's default weights
    if bands < 2:  # as MinHashLSH: one band is an exact-signature match, not a similarity search
        raise ValueError(f"threshold {threshold} with {num_perm} permutations leaves {bands} band: use more permutations")
    buckets: list[set[bytes]] = [set() for _ in range(bands)]
    for block in _blocks(holdout):
        for b, keys in enumerate(band_keys(signatures(block, num_perm), bands, rows)):
            buckets[b].update(keys)
    near: list[bool] = []
    for block in _blocks(train):
        hit = np.zeros(len(block), dtype=bool)
        for b, keys in enumerate(band_keys(signatures(block, num_perm), bands, rows)):
            hit |= np.fromiter((k in buckets[b] for k in keys), dtype=bool, count=len(keys))
        near += hit.tolist()
    return near


def _blocks(texts: Iterable[str]):
    block = []
    for t in texts:
        block.append(t)
        if len(block) == BLOCK:
            yield block
            block = []
    if block:
        yield block
