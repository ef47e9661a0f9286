"""Inter-annotator agreement and metric calibration; pure functions over ratings.

Cohen's and Fleiss' kappa come from statsmodels (BSD); Krippendorff's alpha is written here (the
`krippendorff` package is GPL-3.0, which an Apache-2.0 project does not ship) from its definition:
α = 1 − D_o / D_e over pairable values, which tolerates missing ratings and any number of raters.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

Level = Literal["nominal", "interval"]


def _delta(level: Level):
    if level == "nominal":
        return lambda a, b: float(a != b)
    return lambda a, b: (float(a) - float(b)) ** 2


def krippendorff_alpha(units: Sequence[Sequence[Hashable | float | None]], level: Level = "interval") -> float | None:
    """α over `units` (each: the values its raters gave, None for a rater who did not rate it).

    Units with fewer than two values are not pairable and are left out, as the definition says.
    None when fewer than two pairable values remain or every value is the same (α undefined)."""
    delta = _delta(level)
    pairable = [[v for v in u if v is not None] for u in units]
    pairable = [u for u in pairable if len(u) >= 2]
    values = [v for u in pairable for v in u]
    n = len(values)
    if n < 2:
        return None
    d_o = sum(sum(delta(a, b) for i, a in enumerate(u) for j, b in enumerate(u) if i != j) / (len(u) - 1)
              for u in pairable) / n
    if level == "interval":
        x = np.asarray(values, float)
        d_e = float(2 * n * (x ** 2).sum() - 2 * x.sum() ** 2) / (n * (n - 1))
    else:
        counts: dict = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        d_e = (n * n - sum(c * c for c in counts.values())) / (n * (n - 1))
    if d_e == 0:
        return None
    return round(1.0 - d_o / d_e, 6)


def cohen_kappa(a: Sequence, b: Sequence, weighted: bool = False) -> float | None:
    """Cohen's kappa of two raters over the same items (linear weights for ordinal scales)."""
    from statsmodels.stats.inter_rater import cohens_kappa

    if len(a) != len(b):
        raise ValueError("Cohen's kappa needs both raters on the same items")
    cats = sorted(set(a) | set(b))
    if len(a) == 0 or len(cats) < 2:
        return None
    idx = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(a, b):
        table[idx[x], idx[y]] += 1
    k = cohens_kappa(table, wt="linear" if weighted else None, return_results=False)
    return None if math.isnan(k) else round(float(k), 6)


def fleiss_kappa(units: Sequence[Sequence[Hashable]]) -> float | None:
    """Fleiss' kappa; every unit rated by the same number of raters (else use Krippendorff's α)."""
    from statsmodels.stats.inter_rater import aggregate_raters
    from statsmodels.stats.inter_rater import fleiss_kappa as _fleiss

    if not units or len({len(u) for u in units}) != 1 or len(units[0]) < 2:
        return None
    table, _ = aggregate_raters(np.asarray(units, dtype=object).astype(str))
    k = _fleiss(table, method="fleiss")
    return None if math.isnan(k) else round(float(k), 6)


def agreement(units: Sequence[Sequence[Hashable | None]], level: Level) -> dict:
    """The statistic that fits the design: Cohen for two raters on every unit, Fleiss for a fixed number
    of more raters, Krippendorff's α always (it alone tolerates missing ratings)."""
    raters = {len(u) for u in units}
    complete = all(v is not None for u in units for v in u)
    out = {"units": len(units), "raters_per_unit": sorted(raters),
           "krippendorff_alpha": krippendorff_alpha(units, level)}
    if complete and raters == {2}:
        out["cohen_kappa"] = cohen_kappa([u[0] for u in units], [u[1] for u in units], weighted=level == "interval")
    elif complete and len(raters) == 1 and raters != {1}:
        out["fleiss_kappa"] = fleiss_kappa(units)
    return out


def calibration(automatic: Sequence[float], human: Sequence[float], threshold: float = 0.5) -> dict:
    """How far an automatic score (a metric, a reward) can stand in for the human label: Spearman's ρ,
    and the agreement rate of the two when both are cut at `threshold` (human labels scaled to 0..1)."""
    from scipy.stats import spearmanr

    a, h = np.asarray(automatic, float), np.asarray(human, float)
    if len(a) != len(h):
        raise ValueError("calibration needs one automatic score per human label")
    if len(a) < 3:
        return {"n": int(len(a)), "spearman": None, "agreement_rate": None}
    rho = spearmanr(a, h).statistic if a.std() > 0 and h.std() > 0 else float("nan")
    return {"n": int(len(a)), "spearman": None if math.isnan(rho) else round(float(rho), 6),
            "agreement_rate": round(float(((a >= threshold) == (h >= threshold)).mean()), 6)}
