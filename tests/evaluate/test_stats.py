"""The intervals the gate trusts mean what they say at the sizes it decides on (n = 12)."""

import numpy as np
import pytest

from clap.evaluate.stats import expanded_level, paired_bootstrap

N = 12  # the demo's holdout per batch


def _three_point(rng, k):
    return rng.choice([-1 / 3, 0.0, 2 / 3], (k, N), p=[0.15, 0.6, 0.25]), -0.05 + 2 / 3 * 0.25


def _fractions(rng, k):  # per-sample score on 5 fields: a fraction in [0, 1] each, the delta in [-1, 1]
    return (rng.binomial(5, 0.8, (k, N)) - rng.binomial(5, 0.6, (k, N))) / 5, 0.2


def _skewed_gain(rng, k):  # most samples barely move, a quarter gain a lot: the shape of a good adapter's deltas
    big = rng.random((k, N)) < 0.25
    return np.where(big, rng.uniform(0.3, 1.0, (k, N)), rng.uniform(-0.1, 0.05, (k, N))), 0.25 * 0.65 - 0.75 * 0.025


def _beta_gap(rng, k):
    return rng.beta(2, 5, (k, N)) - rng.beta(5, 5, (k, N)), 2 / 7 - 0.5


@pytest.mark.parametrize("draw", [_three_point, _fractions, _skewed_gain, _beta_gap])
def test_coverage_at_n12_on_bounded_skewed_deltas(draw):
    rng = np.random.default_rng(20261203)
    deltas, true_mean = draw(rng, 800)
    covered = 0
    for i, row in enumerate(deltas):
        r = paired_bootstrap(np.zeros(N), row, n=1000, ci=0.95, seed=i)
        covered += r["ci_low"] - 1e-9 <= true_mean <= r["ci_high"] + 1e-9
    assert covered / len(deltas) >= 0.93, covered / len(deltas)


def test_percentile_bootstrap_would_under_cover_here():
    """The reason for BCa: the plain percentile interval misses the 0.93 floor on the same draws."""
    rng = np.random.default_rng(20261203)
    deltas, true_mean = _fractions(rng, 800)
    covered = 0
    for row in deltas:
        means = row[rng.integers(0, N, (1000, N))].mean(axis=1)
        lo, hi = np.quantile(means, [0.025, 0.975])
        covered += lo <= true_mean <= hi
    assert covered / len(deltas) < 0.93


@pytest.mark.parametrize("baseline, candidate, expected", [
    ([], [], {"delta": None, "ci_low": None, "ci_high": None, "n": 0}),
    ([0.5], [0.7], {"delta": 0.2, "ci_low": 0.2, "ci_high": 0.2, "n": 1}),
    ([0.1, 0.2, 0.3], [0.1, 0.2, 0.3], {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": 3}),
    ([0.0] * 4, [0.25] * 4, {"delta": 0.25, "ci_low": 0.25, "ci_high": 0.25, "n": 4}),
])
def test_degenerate_samples(baseline, candidate, expected):
    assert paired_bootstrap(baseline, candidate) == expected


def test_interval_holds_the_point_and_is_reproducible():
    rng = np.random.default_rng(1)
    b, c = rng.random(12), rng.random(12)
    r = paired_bootstrap(b, c, seed=3)
    assert r["ci_low"] <= r["delta"] <= r["ci_high"]
    assert paired_bootstrap(b, c, seed=3) == r


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_samples_are_refused(bad):
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([0.1, 0.2], [0.3, bad])


def test_expansion_tends_to_the_nominal_level():
    assert expanded_level(0.95, 12) > 0.975
    assert abs(expanded_level(0.95, 10_000) - 0.95) < 1e-3


@pytest.mark.parametrize("probabilities, outcomes, ece", [
    ([0.05, 0.95], [0.0, 1.0], 0.05),                 # confident and right: off by the 5 % each claims
    ([1.0, 1.0], [0.0, 0.0], 1.0),                    # certain and always wrong
    ([0.7] * 10, [1.0] * 7 + [0.0] * 3, 0.0),         # 70 % said, 70 % true
    ([0.25, 0.25, 0.75, 0.75], [0.0, 1.0, 1.0, 1.0], 0.25),  # two bins: |0.5−0.25|·½ + |1−0.75|·½
    ([0.9, 0.9], [0.5, 0.5], 0.4),                    # half the raters said correct: counts as 0.5
    ([], [], None),
])
def test_expected_calibration_error(probabilities, outcomes, ece):
    from clap.evaluate.stats import expected_calibration_error

    got = expected_calibration_error(probabilities, outcomes)
    assert got == (None if ece is None else pytest.approx(ece))
