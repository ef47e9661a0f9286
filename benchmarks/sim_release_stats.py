"""The statistics a release rests on, simulated: interval coverage at the gate's sample sizes, and the canary's
false-alarm rate under repeated looks — CLAP's method beside the one it replaced, from the same draws.

    python benchmarks/sim_release_stats.py                 # 2000 draws per case (about a minute on 2 cores)
    python benchmarks/sim_release_stats.py --draws 500

Coverage: the share of 95 % intervals that hold the true mean delta, on bounded, skewed per-sample deltas like
the metrics' (n = 12, the demo's holdout per batch; n = 21, its decision cases): the percentile bootstrap against
CLAP's expanded BCa (`clap.evaluate.stats.paired_bootstrap`). False alarm: a canary exactly as good as prod (H1 on
the discordant pairs, prod's latency distribution), analysed after every request; the share that fail, for CLAP's
analysis (`clap.feedback.canary_analysis.analyze`) beside the rule it replaced (p95 ratio re-checked at every
look, failure allowed before `min_requests`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clap.config import Canary, compose, typed  # noqa: E402
from clap.evaluate.stats import p95, paired_bootstrap  # noqa: E402
from clap.feedback import canary_analysis  # noqa: E402


def draws(name: str, rng, k: int, n: int):
    if name == "three-point {-1/3, 0, 2/3}":
        return rng.choice([-1 / 3, 0.0, 2 / 3], (k, n), p=[0.15, 0.6, 0.25]), -0.05 + 2 / 3 * 0.25
    if name == "5-field fractions":
        return (rng.binomial(5, 0.8, (k, n)) - rng.binomial(5, 0.6, (k, n))) / 5, 0.2
    if name == "skewed gain":
        big = rng.random((k, n)) < 0.25
        return np.where(big, rng.uniform(0.3, 1.0, (k, n)), rng.uniform(-0.1, 0.05, (k, n))), 0.25 * 0.65 - 0.75 * 0.025
    return rng.beta(2, 5, (k, n)) - rng.beta(5, 5, (k, n)), 2 / 7 - 0.5


def coverage(k: int) -> list[dict]:
    rows = []
    for n in (12, 21):
        for name in ("three-point {-1/3, 0, 2/3}", "5-field fractions", "skewed gain", "beta(2,5) - beta(5,5)"):
            rng = np.random.default_rng(7)
            d, mu = draws(name, rng, k, n)
            pct = bca = 0
            for i, row in enumerate(d):
                means = row[rng.integers(0, n, (1000, n))].mean(axis=1)
                lo, hi = np.quantile(means, [0.025, 0.975])
                pct += lo <= mu <= hi
                r = paired_bootstrap(np.zeros(n), row, n=1000, seed=i)
                bca += r["ci_low"] - 1e-9 <= mu <= r["ci_high"] + 1e-9
            rows.append({"n": n, "deltas": name, "percentile": round(pct / k, 3), "clap_bca_expanded": round(bca / k, 3)})
    return rows


def old_rule_failed(requests: list[dict], c: Canary) -> bool:
    """The replaced latency rule: p95 ratio over everything served so far, at every look, no minimum."""
    lat = {a: [r["latency_ms"] for r in requests if r["arm"] == a] for a in ("prod", "canary")}
    return bool(lat["prod"] and lat["canary"] and p95(lat["canary"]) / p95(lat["prod"]) > c.max_latency_ratio)


def false_alarm(runs: int, horizon: int = 80) -> dict:
    cfg = typed(compose(conf=Path(__file__).resolve().parents[1] / "conf"))
    cfg.evaluate.bootstrap = 100
    c = cfg.canary
    rng = np.random.default_rng(11)
    clap_failed = old_failed = 0
    for _ in range(runs):
        rows = []
        for i in range(horizon):
            if rng.random() < 0.4:
                canary = int(rng.random() < c.p_better)
                prod = 1 - canary
            else:
                prod = canary = int(rng.random() < 0.5)
            for arm, o in (("prod", prod), ("canary", canary)):
                rows.append(({"request_id": f"{arm}-{i}", "request_hash": f"q{i}", "arm": arm, "version": arm,
                              "latency_ms": float(rng.lognormal(6.0, 0.6))}, {"request_id": f"{arm}-{i}", "outcome": o}))
        clap_done = old_done = False
        for n in range(1, horizon + 1):
            requests, feedback = [r for r, _ in rows[:2 * n]], [f for _, f in rows[:2 * n]]
            if not clap_done:
                verdict = canary_analysis.analyze(requests, feedback, cfg)["verdict"]
                if verdict != "inconclusive":
                    clap_done, clap_failed = True, clap_failed + (verdict == "failed")
            if not old_done and old_rule_failed(requests, c):
                old_done, old_failed = True, old_failed + 1
            if clap_done and old_done:
                break
    nominal = c.beta / (1 - c.alpha) + c.alpha
    return {"runs": runs, "looks": "after every request", "horizon_requests_per_arm": horizon,
            "nominal_bound": round(nominal, 3), "clap": round(clap_failed / runs, 3),
            "old_latency_rule_alone": round(old_failed / runs, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    cov = coverage(args.draws)
    print(f"{'n':>3}  {'per-sample deltas':<28} {'percentile':>10} {'CLAP (expanded BCa)':>20}")
    for r in cov:
        print(f"{r['n']:>3}  {r['deltas']:<28} {r['percentile']:>10.3f} {r['clap_bca_expanded']:>20.3f}")
    fa = false_alarm(args.runs)
    print(f"canary as good as prod, analysed after every request ({fa['runs']} runs, ≤ {fa['horizon_requests_per_arm']} "
          f"requests per arm): CLAP fails {fa['clap']:.3f} (bound {fa['nominal_bound']}); the old latency rule alone "
          f"fails {fa['old_latency_rule_alone']:.3f}")
    print(json.dumps({"coverage": cov, "false_alarm": fa}))


if __name__ == "__main__":
    main()
