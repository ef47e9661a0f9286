"""Near-duplicate search by MinHash LSH bands, a block of texts at a time, on either engine.

    near = near_duplicates(train_texts, holdout_texts, threshold=0.8, num_perm=64)   # one bool per train text
    near = near_duplicates(train_texts, holdout_texts, 0.8, 64, engine="ray", workers=2, work=Path("data"))

The same answer as datasketch's `MinHashLSH` (its own optimiser turns the threshold into bands × rows;
a train text is a candidate when one band of its signature equals, byte for byte, that band of a holdout
text's), without a MinHash object per text or the LSH's dictionaries: signatures are computed a block
at a time (`MinHash.bulk`) and only the holdout's band keys are kept, so memory follows the holdout and
the block, not the batch. The train side is cut into units of `BLOCK` texts that run where assetize's
units run (clap.data.engine: `workers` processes here, or Ray Data tasks): the train texts and the
holdout's band keys go to Parquet in a temporary folder under `work` (storage every node sees, on a
cluster), each unit reads its row group and the keys, and returns its flags. Used by
`clap materialize` for the train/holdout overlap check.
"""

from __future__ import annotations

import functools
import re
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clap.data.engine import map_units
from clap.domain import quantities as nz

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
    from datasketch import MinHash  # with scipy ≈ 0.5 s: imported where a stage searches, not by every command

    hashed = MinHash.bulk([[s.encode() for s in shingles(t)] for t in texts], num_perm=num_perm, seed=1)
    return np.vstack([m.hashvalues for m in hashed]).astype(np.uint64)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[list[bytes]]:
    """Per band, each text's slice of the signature as bytes (equal bytes = a shared bucket)."""
    out = []
    for b in range(bands):
        part = np.ascontiguousarray(signature[:, b * rows:(b + 1) * rows])
        out.append(part.view(np.dtype((np.void, part.shape[1] * part.itemsize))).ravel().tolist())
    return out


def near_duplicates(train: Iterable[str], holdout: Iterable[str], threshold: float, num_perm: int,
                    engine: str = "local", workers: int = 1, work: Path | None = None) -> list[bool]:
    from datasketch.lsh import _optimal_param

    bands, rows = _optimal_param(threshold, num_perm, 0.5, 0.5)  # datasketch MinHashLSH's default weights
    if bands < 2:  # as MinHashLSH: one band is an exact-signature match, not a similarity search
        raise ValueError(f"threshold {threshold} with {num_perm} permutations leaves {bands} band: use more permutations")
    train = list(train)
    if not train:
        return []
    buckets: list[set[bytes]] = [set() for _ in range(bands)]
    for block in _blocks(holdout):
        for b, keys in enumerate(band_keys(signatures(block, num_perm), bands, rows)):
            buckets[b].update(keys)
    units = -(-len(train) // BLOCK)
    if units == 1 or (engine == "local" and workers == 1):  # runs here: no files to write and read back
        return [hit for block in _blocks(train) for hit in _flags(block, buckets, rows, num_perm)]
    with tempfile.TemporaryDirectory(dir=work, prefix=".near-dup-") as tmp:
        pq.write_table(pa.table({"band": pa.array([b for b, keys in enumerate(buckets) for _ in keys], pa.int16()),
                                 "key": pa.array([k for keys in buckets for k in keys], pa.binary())}),
                       Path(tmp) / "holdout_bands.parquet")
        pq.write_table(pa.table({"text": pa.array(train, pa.string())}), Path(tmp) / "train.parquet",
                       row_group_size=BLOCK)
        flags = map_units(engine, units, functools.partial(_train_unit, tmp, uuid.uuid4().hex, bands, rows, num_perm), workers)
    return [hit for unit in flags for hit in unit]


def _train_unit(folder: str, call: str, bands: int, rows: int, num_perm: int, unit: int) -> list[bool]:
    """One block of train texts (row group `unit`) against the holdout's band keys: a flag per text."""
    texts = pq.ParquetFile(Path(folder) / "train.parquet").read_row_group(unit).column("text").to_pylist()
    return _flags(texts, _holdout_buckets(folder, call, bands), rows, num_perm)


def _flags(texts: list[str], buckets: list[set[bytes]], rows: int, num_perm: int) -> list[bool]:
    """Per text: does one band of its signature fall in the holdout's bucket of that band."""
    hit = np.zeros(len(texts), dtype=bool)
    for b, keys in enumerate(band_keys(signatures(texts, num_perm), len(buckets), rows)):
        hit |= np.fromiter((k in buckets[b] for k in keys), dtype=bool, count=len(keys))
    return hit.tolist()


@functools.lru_cache(maxsize=1)
def _holdout_buckets(folder: str, call: str, bands: int) -> list[set[bytes]]:
    """The holdout's band keys, read once per process for all the units of one call (a Ray worker outlives calls)."""
    table = pq.read_table(Path(folder) / "holdout_bands.parquet")
    buckets: list[set[bytes]] = [set() for _ in range(bands)]
    for b, k in zip(table.column("band").to_pylist(), table.column("key").to_pylist()):
        buckets[b].add(k)
    return buckets


def _blocks(texts: Iterable[str]):
    block = []
    for t in texts:
        block.append(t)
        if len(block) == BLOCK:
            yield block
            block = []
    if block:
        yield block
