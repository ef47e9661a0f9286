"""How an interval is written (`clap.evaluate.intervals`), and that nothing else in `src/` writes one inline."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import clap
from clap.evaluate.intervals import ci_bounds, ci_text

SRC = Path(clap.__file__).parent


@pytest.mark.parametrize("d, kwargs, text", [
    ({"delta": 0.1234, "ci_low": 0.01, "ci_high": 0.2}, {}, "+0.123 [+0.010, +0.200]"),
    ({"delta": -0.05, "ci_low": -0.1, "ci_high": 0.0}, {"digits": 2}, "-0.05 [-0.10, +0.00]"),
    ({"delta": 0.62, "ci_low": 0.5, "ci_high": 0.71}, {"digits": 2, "signed": False}, "0.62 [0.50, 0.71]"),
])
def test_ci_text(d, kwargs, text):
    assert ci_text(d, **kwargs) == text
    assert ci_bounds(d, **kwargs) == text[text.index("["):]


def inline_intervals(source: str) -> list[int]:
    """Lines of f-strings that format both `ci_low` and `ci_high` themselves, with a format spec (`:+.3f`): a
    report's interval. A message quoting the raw numbers (`{obj['ci_low']}`, evidence validation) is not one."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            keys = {k.value for v in node.values if isinstance(v, ast.FormattedValue) and v.format_spec is not None
                    for k in ast.walk(v.value) if isinstance(k, ast.Constant)}
            if {"ci_low", "ci_high"} <= keys:
                lines.append(node.lineno)
    return lines


def test_every_interval_is_written_by_the_one_formatter():
    found = [f"{path.relative_to(SRC)}:{line}" for path in sorted(SRC.rglob("*.py"))
             if path.name != "intervals.py" for line in inline_intervals(path.read_text(encoding="utf-8"))]
    assert not found, f"write these with clap.evaluate.intervals: {found}"


def test_the_inline_check_can_fail():
    source = ("x = f\"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]\"\n"
              "y = f\"interval [{d['ci_low']}, {d['ci_high']}] does not hold its point\"\n")
    assert inline_intervals(source) == [1]
