"""Sequential comparison of two arms on binary outcomes: Wald's SPRT on discordant pairs, with McNemar.

Only pairs where the arms disagree carry evidence about which is better. Among them, p is the chance
the canary is the one that succeeded. The SPRT tests H0: p = p0 (the canary is worse: rollback)
against H1: p = p1 (the canary is at least as good: promote) after every discordant pair, and stops
at the first crossing of Wald's bounds A = log((1 − β) / α), B = log(β / (1 − α)). Wald's
inequalities bound the error rates whatever the stopping time: P(promote | p0) ≤ α / (1 − β) and
P(rollback | p1) ≤ β / (1 − α). Pairs are the same request answered by both arms (shadow traffic), or,
with split traffic, the i-th outcome of each arm in arrival order (Wald's pairing of two binomial
streams: the i-th pairs are independent, so the test keeps its guarantees).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

Outcome = Literal["accept_h1", "accept_h0", "continue"]


@dataclass(frozen=True)
class SprtResult:
    outcome: Outcome
    llr: float
    upper: float            # accept H1 at llr ≥ upper
    lower: float            # accept H0 at llr ≤ lower
    discordant_seen: int    # discordant pairs read before stopping (all of them when it never stopped)
    canary_wins: int
    prod_wins: int

    def as_dict(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


def check_hypotheses(p0: float, p1: float, alpha: float, beta: float) -> None:
    if not (0 < p0 < p1 < 1):
        raise ValueError(f"SPRT needs 0 < p0 < p1 < 1 (got p0={p0}, p1={p1})")
    if not (0 < alpha < 0.5 and 0 < beta < 0.5):
        raise ValueError(f"SPRT needs error rates in (0, 0.5) (got alpha={alpha}, beta={beta})")


def sprt(canary_won: Iterable[bool], p0: float, p1: float, alpha: float, beta: float) -> SprtResult:
    """Run Wald's SPRT over the discordant pairs in order (True: the canary won the pair)."""
    check_hypotheses(p0, p1, alpha, beta)
    upper, lower = math.log((1 - beta) / alpha), math.log(beta / (1 - alpha))
    win, loss = math.log(p1 / p0), math.log((1 - p1) / (1 - p0))
    llr, wins, losses = 0.0, 0, 0
    for won in canary_won:
        wins, losses = wins + bool(won), losses + (not won)
        llr += win if won else loss
        if llr >= upper or llr <= lower:
            return SprtResult("accept_h1" if llr >= upper else "accept_h0", llr, upper, lower, wins + losses, wins,
                              losses)
    return SprtResult("continue", llr, upper, lower, wins + losses, wins, losses)


def pairs_by_key(prod: dict[str, int], canary: dict[str, int]) -> list[tuple[int, int]]:
    """(prod, canary) outcomes of the requests both arms answered, in the canary's arrival order (the
    dicts keep insertion order): a sequential test reads its evidence in the order it came."""
    return [(prod[k], canary[k]) for k in canary if k in prod]


def pairs_in_order(prod: Sequence[int], canary: Sequence[int]) -> list[tuple[int, int]]:
    """(prod, canary) outcomes paired by arrival order (split traffic); the longer arm's tail waits."""
    return list(zip(prod, canary))


def pairs_until(pairs: Sequence[tuple[int, int]], discordant_seen: int) -> int:
    """How many pairs had arrived when the `discordant_seen`-th discordant pair did (all, if never)."""
    seen = 0
    for i, (p, c) in enumerate(pairs, start=1):
        seen += bool(p) != bool(c)
        if seen == discordant_seen:
            return i
    return len(pairs)


def discordant(pairs: Sequence[tuple[int, int]]) -> list[bool]:
    """For each pair where the arms disagree, in order: did the canary win it."""
    return [bool(c) for p, c in pairs if bool(p) != bool(c)]


def mcnemar(pairs: Sequence[tuple[int, int]]) -> dict:
    """McNemar's exact test on the 2×2 table of paired outcomes (statsmodels)."""
    from statsmodels.stats.contingency_tables import mcnemar as _mcnemar

    table = [[0, 0], [0, 0]]
    for p, c in pairs:
        table[int(bool(p))][int(bool(c))] += 1
    b, c = table[1][0], table[0][1]
    if b + c == 0:
        return {"prod_only": 0, "canary_only": 0, "p_value": None}
    res = _mcnemar(table, exact=True)
    return {"prod_only": b, "canary_only": c, "p_value": round(float(res.pvalue), 6)}
