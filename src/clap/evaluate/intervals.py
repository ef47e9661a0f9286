"""How a confidence interval is written, once: every report, log line and gate reason uses it (no numpy here, so
the CLI and the gate import it cheaply)."""

from __future__ import annotations


def ci_bounds(d: dict, digits: int = 3, signed: bool = True) -> str:
    """`[+0.010, +0.200]`: the interval of `d` (a paired-bootstrap result: ci_low, ci_high)."""
    f = f"{'+' if signed else ''}.{digits}f"
    return f"[{d['ci_low']:{f}}, {d['ci_high']:{f}}]"


def ci_text(d: dict, key: str = "delta", digits: int = 3, signed: bool = True) -> str:
    """`+0.123 [+0.010, +0.200]`: `d[key]` with its interval (`signed=False` for a mean: `0.62 [0.50, 0.71]`)."""
    f = f"{'+' if signed else ''}.{digits}f"
    return f"{d[key]:{f}} {ci_bounds(d, digits, signed)}"
