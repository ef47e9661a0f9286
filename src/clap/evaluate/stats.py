"""Paired confidence intervals and latency percentiles.

Every CI the gate reads comes from `paired_bootstrap`: the bias-corrected and accelerated (BCa) bootstrap
of the mean paired difference (`scipy.stats.bootstrap`, resampling the sample index so both models keep
their pairing), with Hesterberg's small-sample expansion of the nominal level. The plain percentile
bootstrap under-covers at the sizes the gate lives on (12 held-out samples per batch, 12–21 decision
cases): on bounded, skewed per-sample deltas it covers 0.88–0.92 of the time at a nominal 0.95; the
expanded BCa interval covers ≥ 0.93 (`tests/evaluate/test_stats.py` simulates it). The expansion
widens the level to 1 − α′ with α′ = 2·Φ(−√(n/(n−1))·t₍₁₋α/₂, n−1₎, which tends to α as n grows.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np


@functools.cache
def _scipy_stats():
    """scipy.stats, imported on first use: it takes about 1.3 s, and the CLI imports this module for every command."""
    from scipy import stats

    return stats


def expanded_level(ci: float, n: int) -> float:
    """The confidence level the bootstrap is run at so that its interval covers `ci` at sample size `n`
    (Hesterberg 2015, "What teachers should know about the bootstrap", §5: the expanded percentile interval)."""
    if n < 2:
        return ci
    alpha = 1.0 - ci
    z = math.sqrt(n / (n - 1)) * float(_scipy_stats().t.ppf(1 - alpha / 2, n - 1))
    return 1.0 - 2.0 * float(_scipy_stats().norm.cdf(-z))


def paired_bootstrap(baseline: list[float], candidate: list[float], n: int = 1000, ci: float = 0.95,
                     seed: int = 0) -> dict:
    """Mean delta (candidate − baseline) over paired samples, with its expanded-BCa CI (`n` resamples).

    Degenerate samples — one pair, or every pair with the same delta — have no spread to resample: the
    interval is the point. Values are rounded to 6 decimals, as the metric files carry them."""
    b, c = np.asarray(baseline, float), np.asarray(candidate, float)
    if b.shape != c.shape:
        raise ValueError("paired bootstrap needs the same samples for both models")
    if len(b) == 0:
        return {"delta": None, "ci_low": None, "ci_high": None, "n": 0}
    if not (np.isfinite(b).all() and np.isfinite(c).all()):
        raise ValueError("paired bootstrap needs finite values (a NaN or inf sample has no mean)")
    d = c - b
    mean = float(d.mean())
    if len(d) < 2 or float(np.ptp(d)) == 0.0:
        lo = hi = mean
    else:
        with warnings.catch_warnings():  # BCa on a nearly degenerate sample warns and falls back to NaN: handled below
            warnings.simplefilter("ignore")
            res = _scipy_stats().bootstrap((d,), np.mean, n_resamples=n, confidence_level=expanded_level(ci, len(d)),
                                method="BCa", vectorized=True, axis=-1, rng=np.random.default_rng(seed),
                                batch=None if len(d) <= 1000 else 64)  # the jackknife is n × n: batch it when n is large
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isfinite(lo) and math.isfinite(hi)):  # BCa undefined (e.g. all resamples equal the mean)
            lo, hi = float(d.min()), float(d.max())
        lo, hi = min(lo, mean), max(hi, mean)
    return {"delta": round(mean, 6), "ci_low": round(lo, 6), "ci_high": round(hi, 6), "n": int(len(d))}


def mean_interval(values: list[float], n: int = 1000, ci: float = 0.95, seed: int = 0) -> dict:
    """The mean of `values` with its expanded-BCa interval: `paired_bootstrap` against zero, as {mean, ci_low,
    ci_high, n} (mean None and n 0 when there is nothing to average)."""
    d = paired_bootstrap([0.0] * len(values), values, n=n, ci=ci, seed=seed)
    return {"mean": d["delta"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "n": d["n"]}


def expected_calibration_error(probabilities: list[float], outcomes: list[float], bins: int = 10) -> float | None:
    """ECE: over `bins` equal-width bins of the predicted probability, the mean |mean outcome − mean probability|
    weighted by the bin's share of samples (outcomes in 0..1: a share of raters who said correct counts as such).
    None without samples."""
    p, y = np.asarray(probabilities, float), np.asarray(outcomes, float)
    if p.shape != y.shape:
        raise ValueError("calibration needs one outcome per probability")
    if len(p) == 0:
        return None
    which = np.minimum((p * bins).astype(int), bins - 1)
    return round(float(sum(abs(y[which == b].mean() - p[which == b].mean()) * (which == b).mean()
                           for b in range(bins) if (which == b).any())), 6)


def p95(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 95)), 2) if len(values) else None


def p50(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 50)), 2) if len(values) else None
