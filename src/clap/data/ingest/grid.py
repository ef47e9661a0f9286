"""A document's table as a grid of cells → lines that say what each number is.

    lines = qualify([["", "Years Ended September 30,", None, None],
                     ["", "2019", "2018", "2017"],
                     ["Cost of sales", "$624", "$640", "$556"]])
    # header lines, then "Cost of sales | 2019: $624 | 2018: $640 | 2017: $556"

A table row reaches the model as one line; without its column headers (the years, far above it or in another
chunk) a row `Cost of sales | $624 | $640 | $556` does not say which number is 2019's, and a model that quoted the
right row still took another column's value. So every data row is written with each value's column header
(`2019: $624`), and a row that sits under a section row (a label with no values, "Total assets:") carries that
label ("Total assets: AMER | …"). Measured on real annual-report pages (benchmarks/bench_tatqa.py).

The grid is what a reader sees: one list of cells per row, in column order; `None` marks a cell covered by the
span (colspan, Word's gridSpan) of the cell to its left. Header rows are the leading rows whose value cells hold
no amount (words, years, dates, fiscal periods); several header rows combine top to bottom per column, a spanned
header cell counting for every column under it (and a header a page centres over a group of columns, written in the
group's first cell, for the group: `spread_group_headers`), and a header row with a single caption over the value
columns ("Years Ended September 30,") is a caption of all of them: it is written in the header line, not repeated
in every cell. Cells are written as the page writes them (currency signs, footnote markers, brackets); a lone
currency sign in a cell of its own ("$" | "624", as filings often set it) joins the amount after it.
Pure functions: no I/O.
"""

from __future__ import annotations

import re

from clap.domain.quantities import header_period, value_in_text

_AMOUNT = re.compile(r"[(\-−–]?\s*[$€£¥]?\s*\(?\d[\d,.\u00a0' ]*\)?\s*%?\)?\s*[*†‡]?\d?$")
# a header cell that is a period, not an amount: 2019, FY19, FY 2019, Q3 2019, 2019/20, a date
_PERIOD = re.compile(r"^(?:(?:fiscal\s+|fy\s*)?(?:19|20)\d{2}(?:\s*[/–-]\s*\d{2,4})?|fy\s*\d{2}|q[1-4]\s*(?:fy)?\s*\d{2,4}"
                     r"|\d{1,2}[./-]\d{1,2}[./-]\d{2,4})[*†‡]?\d?$", re.I)
_DASH = {"-", "—", "–", "−", "n/a", "nm", "n.m.", "*"}
_CURRENCY_SIGNS = {"$", "€", "£", "¥", "us$", "hk$", "c$", "a$", "rmb"}
MAX_HEADER_ROWS = 4


def is_amount(cell: str) -> bool:
    """A cell that states a number (an amount, a ratio, a count), as opposed to a label or a period."""
    text = cell.strip()
    return bool(text) and not _PERIOD.match(text) and bool(_AMOUNT.match(text))


def _is_value(cell: str) -> bool:
    return is_amount(cell) or cell.strip().lower() in _DASH


def _text(cell: str | None) -> str:
    return " ".join((cell or "").replace("\u00a0", " ").split())


def _join_currency(row: list[str | None]) -> list[str]:
    """A lone currency sign joins the amount in the next non-empty cell (its own cell becomes empty); a lone `%` or
    `)` joins the amount before it."""
    cells = [_text(c) for c in row]
    for i, cell in enumerate(cells):
        if cell.lower() in _CURRENCY_SIGNS:
            j = next((k for k in range(i + 1, len(cells)) if cells[k]), None)
            if j is not None and is_amount(cells[j]):
                cells[j], cells[i] = f"{cell}{cells[j]}", ""
        elif cell in ("%", ")", "%)"):
            j = next((k for k in range(i - 1, 0, -1) if cells[k]), None)
            if j is not None and is_amount(cells[j]):
                cells[j], cells[i] = f"{cells[j]}{cell}", ""
    return cells


def _header_row_count(rows: list[list[str]]) -> int:
    """How many leading rows are headers: rows with no amount in a value column, before the first row that has one
    (at most MAX_HEADER_ROWS; none when no later row has an amount, or when the table starts with data)."""
    count, titled = 0, False
    for row in rows[:MAX_HEADER_ROWS + 1]:
        if any(is_amount(c) for c in row[1:]) or titled and not any(row[1:]):  # data, or a section row
            break
        titled = titled or any(row[1:])
        count += 1
    if count > MAX_HEADER_ROWS or count == len(rows):
        return 0
    return count


_FOOTNOTE = re.compile(r"\s*(?:\(\d{1,2}\)|[*†‡]+)$")


def spread_group_headers(upper: list[str], lowest: list[str]) -> list[str]:
    """An upper header row that names groups of columns in each group's first cell only (`2019 | | 2018 |` over
    `Men | Women | Men | Women`: a header centred over its columns, as a page's text layer places it), with each blank
    given its group's name. Only where the groups have one width, run to the table's last column and read the same
    lowest header under each (footnote markers aside): a header repeated under each of several headers is the mark
    of a span. Any other row is returned as it is: there a blank may be a column with no header of its own
    (`| Fiscal year | | % Change` over `2019 | 2018 | Actual | Comp.`). Pure."""
    width = len(upper)
    starts = [j for j in range(1, width) if upper[j]]
    if len(starts) < 2 or len(lowest) != width:
        return upper
    size = starts[1] - starts[0]
    if size < 2 or any(b - a != size for a, b in zip(starts, starts[1:])) or starts[-1] + size != width:
        return upper
    groups = [[_FOOTNOTE.sub("", lowest[j]) for j in range(s, s + size)] for s in starts]
    if not all(groups[0]) or any(g != groups[0] for g in groups[1:]):
        return upper
    spread = list(upper)
    for s in starts:
        spread[s + 1:s + size] = [upper[s]] * (size - 1)
    return spread


def _column_headers(header_rows: list[list[str | None]], width: int) -> tuple[list[str], list[str]]:
    """(per value column, its combined header without the captions; the captions over all value columns)."""
    parts: list[list[str]] = [[] for _ in range(width)]
    captions: list[str] = []
    rows_text = []
    for row in header_rows:
        filled = list(row) + [""] * (width - len(row))
        for j in range(1, width):  # a spanned cell counts for every column under it
            if filled[j] is None:
                filled[j] = filled[j - 1]
        rows_text.append([_text(c) for c in filled])
    for i, texts in enumerate(rows_text):
        if i < len(rows_text) - 1:  # a group's header written in its first column counts for the whole group
            texts = spread_group_headers(texts, rows_text[-1])
        values = [t for t in texts[1:] if t]
        if len(set(values)) == 1 and width > 2 and not _PERIOD.match(values[0]):
            captions.append(values[0])  # one caption over the value columns
            continue
        for j in range(1, width):
            if texts[j] and (not parts[j] or parts[j][-1] != texts[j]):
                parts[j].append(texts[j])
    return [" ".join(p) for p in parts], captions


LAYOUTS = ("row", "cells")


def qualify(grid: list[list[str | None]], layout: str = "row") -> list[tuple[str, str, int]]:
    """The lines of one table, each as (kind, text, the grid row it comes from): `table_header` lines first (the
    header rows as written, a caption included), then the data rows with the label of the section row above them —
    `layout` "row": one line per row, `label | header: value | …`; "cells": one line per value, `label | header:
    value` (a quote then names one number, and choosing the quote chooses the column). A table without header rows
    keeps its rows' cells as they are (`a | b | c`)."""
    width = max((len(r) for r in grid), default=0)
    if width == 0:
        return []
    rows = [_join_currency(list(r) + [""] * (width - len(r))) for r in grid]
    n_head = _header_row_count(rows) if width > 1 else 0
    headers, _ = _column_headers(grid[:n_head], width) if n_head else ([""] * width, [])
    out: list[tuple[str, str, int]] = []
    for r, row in enumerate(rows[:n_head]):
        cells = [c for i, c in enumerate(row) if c and c not in row[:i]]
        if cells:
            out.append(("table_header", " | ".join(cells), r))
    section = ""
    for r, row in enumerate(rows[n_head:], start=n_head):
        label, values = row[0], row[1:]
        if not any(values):
            if label:
                section = label if n_head else section
                out.append(("table_row", label, r))
            continue
        if not label and not any(_is_value(v) for v in values):  # a header-like row inside the body
            out.append(("table_row", " | ".join(v for v in values if v), r))
            continue
        if section and label:
            label = f"{section} {label}" if section.endswith(":") else f"{section}: {label}"
        cells = [label] if label else []
        for j, value in enumerate(values, start=1):
            if value:
                cells.append(f"{headers[j]}: {value}" if headers[j] and _is_value(value) else value)
        if layout == "cells" and n_head and label and len(cells) > 2:
            out += [("table_row", f"{label} | {cell}", r) for cell in cells[1:]]
        else:
            out.append(("table_row", " | ".join(cells), r))
    return out


def period_of_value(line: str, value: float) -> str | None:
    """The period a qualified row's column header gives the cell that writes `value` (`2019: $624` → `2019`,
    `FY19: …` → `2019`, `Three Months Ended April 26, 2019: …` → `2019`); None when no header names a year."""
    for cell in line.split(" | ")[1:]:
        head, sep, written = cell.rpartition(": ")
        if sep and value_in_text(value, written):
            return header_period(head)
    return None
