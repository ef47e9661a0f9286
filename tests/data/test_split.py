"""The split a batch is trained and judged on (clap.data.split): who is held out, and caps that stay put."""

import pandas as pd
import pytest

from clap.data.split import capped, in_eval


@pytest.mark.parametrize("fraction, held", [(0.0, 0), (1.0, 200)])
def test_in_eval_at_the_ends_holds_out_none_or_all(fraction, held):
    assert sum(in_eval(f"doc-{i}", fraction, 13) for i in range(200)) == held


def test_in_eval_is_a_fixed_draw_near_its_fraction():
    keys = [f"doc-{i}" for i in range(2000)]
    drawn = [in_eval(k, 0.2, 13) for k in keys]
    assert drawn == [in_eval(k, 0.2, 13) for k in keys]  # the same every run: a page never changes sides
    assert 0.17 < sum(drawn) / len(keys) < 0.23
    assert drawn != [in_eval(k, 0.2, 14) for k in keys]  # another seed, another split


def _pool(n: int, repaired: set[str] = frozenset()) -> pd.DataFrame:
    ids = [f"r{i:03d}" for i in range(n)]
    return pd.DataFrame({"record_id": ids, "repaired": [r in repaired for r in ids]})


def test_a_capped_sample_keeps_its_rows_when_the_pool_grows_and_takes_repaired_rows_first():
    """The caps (train, holdout, replay) rank rows by a fixed per-record hash: a row joining the batch displaces
    at most one chosen row (a seeded draw over the pool reshuffled them all), and repaired rows come first."""
    first = capped(_pool(40), 12, seed=7, salt="holdout")
    assert len(first) == 12 and list(first["record_id"]) == sorted(first["record_id"])
    assert capped(_pool(40), 12, seed=7, salt="holdout").equals(first)
    grown = capped(_pool(41), 12, seed=7, salt="holdout")
    assert len(set(first["record_id"]) - set(grown["record_id"])) <= 1
    repaired = {"r040", "r041"}
    with_repairs = capped(_pool(42, repaired), 12, seed=7, salt="holdout")
    assert repaired <= set(with_repairs["record_id"]) and len(set(first["record_id"]) - set(with_repairs["record_id"])) == 2
    assert not capped(_pool(40), 12, seed=7, salt="train").equals(first)  # each cap ranks with its own salt
    assert capped(_pool(10), 12, seed=7, salt="holdout").equals(_pool(10))  # under the cap: every row
