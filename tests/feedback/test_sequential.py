"""The SPRT stops on the right side and keeps Wald's error bounds; McNemar and the pairings."""

import numpy as np
import pytest

from clap.feedback.sequential import discordant, mcnemar, pairs_by_key, pairs_in_order, sprt

P0, P1, ALPHA, BETA = 0.35, 0.6, 0.05, 0.1


def _stream(p: float, rng, n: int = 3000) -> list[bool]:
    return list(rng.random(n) < p)


@pytest.mark.parametrize("p, expected", [(0.15, "accept_h0"), (0.9, "accept_h1")])
def test_sprt_stops_on_the_side_of_a_clear_effect(p, expected):
    rng = np.random.default_rng(1)
    res = sprt(_stream(p, rng), P0, P1, ALPHA, BETA)
    assert res.outcome == expected
    assert res.discordant_seen < 40  # a clear effect needs few discordant pairs


def test_sprt_error_rates_stay_within_walds_bounds():
    rng = np.random.default_rng(2)
    runs = 3000
    false_promote = sum(sprt(_stream(P0, rng), P0, P1, ALPHA, BETA).outcome == "accept_h1" for _ in range(runs)) / runs
    false_rollback = sum(sprt(_stream(P1, rng), P0, P1, ALPHA, BETA).outcome == "accept_h0" for _ in range(runs)) / runs
    slack = 3 * np.sqrt(0.05 * 0.95 / runs)
    assert false_promote <= ALPHA / (1 - BETA) + slack
    assert false_rollback <= BETA / (1 - ALPHA) + slack
    assert false_promote > 0.01 and false_rollback > 0.02  # the bounds are near tight, not vacuous


def test_sprt_continues_when_the_evidence_is_short_and_refuses_bad_hypotheses():
    res = sprt([True, False, True], P0, P1, ALPHA, BETA)
    assert res.outcome == "continue" and res.discordant_seen == 3 and res.canary_wins == 2
    with pytest.raises(ValueError, match="p0 < p1"):
        sprt([], 0.6, 0.4, ALPHA, BETA)


def test_pairings_and_discordant_pairs():
    assert pairs_by_key({"a": 1, "b": 0, "c": 1}, {"b": 1, "c": 1, "d": 0}) == [(0, 1), (1, 1)]
    assert pairs_in_order([1, 0, 0], [0, 1]) == [(1, 0), (0, 1)]
    assert discordant([(1, 0), (1, 1), (0, 1), (0, 0)]) == [False, True]


def test_mcnemar_on_a_lopsided_table():
    pairs = [(0, 1)] * 10 + [(1, 1)] * 20 + [(0, 0)] * 5
    out = mcnemar(pairs)
    assert out["canary_only"] == 10 and out["prod_only"] == 0
    assert out["p_value"] == pytest.approx(2 * 0.5 ** 10, abs=1e-6)
    assert mcnemar([(1, 1), (0, 0)])["p_value"] is None


def test_pairs_keep_arrival_order_and_count_pairs_until_a_decision():
    from clap.feedback.sequential import pairs_until

    assert pairs_by_key({"z": 0, "a": 0}, {"z": 1, "a": 0}) == [(0, 1), (0, 0)]
    assert pairs_until([(0, 0), (0, 1), (1, 1), (1, 0)], 2) == 4 and pairs_until([(0, 0)], 1) == 1
