"""Near-duplicate search by LSH bands in blocks: the same answer as datasketch's MinHashLSH."""

import random

import pytest
from datasketch import MinHash, MinHashLSH

from clap.data import near_dup
from clap.data.near_dup import near_duplicates, shingles


def _datasketch(train, holdout, threshold, num_perm):
    def minhash(text):
        m = MinHash(num_perm=num_perm, seed=1)
        for s in shingles(text):
            m.update(s.encode())
        return m

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    for i, text in enumerate(holdout):
        lsh.insert(str(i), minhash(text))
    return [bool(lsh.query(minhash(t))) for t in train]


def _texts(seed):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(60)] + list("营业收入净利润毛利率")
    holdout = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(40)]
    train = [h.replace(h.split()[0], "changed", 1) for h in holdout[:15]]  # near copies
    train += [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(40)]  # unrelated
    train += ["", holdout[3], "w1"]  # empty, an exact copy, one token
    return train, holdout


@pytest.mark.parametrize(("threshold", "num_perm"), [(0.8, 64), (0.5, 128), (0.9, 32)])
def test_bands_in_blocks_answer_as_datasketch_lsh(threshold, num_perm, monkeypatch, tmp_path):
    monkeypatch.setattr(near_dup, "BLOCK", 7)  # many blocks on both sides
    train, holdout = _texts(threshold)
    got = near_duplicates(train, holdout, threshold, num_perm, work=tmp_path)
    assert got == _datasketch(train, holdout, threshold, num_perm)
    assert got[len(train) - 2] and 0 < sum(got) < len(train)
    assert not list(tmp_path.iterdir())  # the units' files are gone with the call


def test_blocks_in_two_worker_processes_answer_as_one(monkeypatch):
    monkeypatch.setattr(near_dup, "BLOCK", 7)  # 9 units over a pool of 2 spawned processes
    train, holdout = _texts(0.8)
    assert near_duplicates(train, holdout, 0.8, 64, workers=2) == near_duplicates(train, holdout, 0.8, 64)


def test_nothing_on_either_side():
    assert near_duplicates([], ["a b c"], 0.8, 64) == []
    assert near_duplicates(["a b c"], [], 0.8, 64) == [False]


def test_a_threshold_that_leaves_one_band_is_refused_as_datasketch_does():
    with pytest.raises(ValueError, match="1 band"):
        near_duplicates(["a b c"], ["a b c"], 0.95, 32)
