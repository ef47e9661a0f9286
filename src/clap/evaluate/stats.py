"""Paired bootstrap confidence intervals and latency percentiles; pure numpy."""

from __future__ import annotations

import numpy as np


def paired_bootstrap(baseline: list[float], candidate: list[float], n: int = 1000, ci: float = 0.95,
                     seed: int = 0) -> dict:
    """Mean delta (candidate − baseline) over paired samples with a percentile bootstrap CI."""
    b, c = np.asarray(baseline, float), np.asarray(candidate, float)
    if b.shape != c.shape:
        raise ValueError("paired bootstrap needs the same samples for both models")
    if len(b) == 0:
        return {"delta": None, "ci_low": None, "ci_high": None, "n": 0}
    d = c - b
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return {"delta": round(float(d.mean()), 6), "ci_low": round(float(lo), 6), "ci_high": round(float(hi), 6),
            "n": int(len(d))}


def p95(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 95)), 2) if len(values) else None


def p50(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 50)), 2) if len(values) else None
