"""Column-at-a-time twins of `normalize`'s scalar functions (pyarrow compute, RE2).

assetize runs these over a million facts at once; the scalar functions stay the definition, and
`tests/data/test_normalize_many.py` checks each twin against its scalar on the tricky cases and on
generated text. Where the two regex engines could disagree — Python's `\\d` takes every Unicode
digit, RE2's only 0-9 — the rows go through the scalar function, so results are the same either
way. Why: with them (and the columnar reader) assetize went from 10.8k to 50k rows/s on 1M
distinct facts (`python benchmarks/bench_assetize.py`, benchmarks/README.md).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clap.domain import quantities as nz

_WORKERS = max(1, min(4, os.cpu_count() or 1))
# everything Python's str.split() splits on that NFKC leaves in place (or maps to a space)
_WS = r"\t\n\x0b\x0c\r\x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
# a whitespace run that is not already one plain space (most are; leaving them alone is 3× faster)
_SPACES = rf"[ {_WS}]*[{_WS}][ {_WS}]*|  +"
# runs of the characters a number can be written with; a run that is one whole number (most are)
# is read in C, any other run by the scalar function
_NOT_NUMBER_CHARS = r"[^0-9(),.\-]+"
_WHOLE_NUMBER = r"^\(?-?[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?\)?$"
_VALUE_RE2 = "(?i)" + nz._VALUE_RE.pattern.replace(r"\d", "[0-9]")
# a decimal digit outside 0-9. RE2's Unicode tables are at least as new as Python's, so every digit
# Python's `\d` reads is caught here (a digit only RE2 knows just sends its row to the scalar path)
_OTHER_DIGIT = r"[^\P{Nd}0-9]"


def strings(values) -> pa.Array:
    """A pyarrow string array from a list/Series/array (None and NaN become null)."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    try:  # text and None only (the common case): 10× faster than checking each value
        return pa.array(values, pa.string(), from_pandas=True)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([v if isinstance(v, str) else None for v in values], pa.string())


def _in_parts(fn, arr: pa.Array) -> list:
    """fn over slices of a large array in threads (pyarrow kernels release the GIL): [(offset, result)]."""
    step = -(-len(arr) // _WORKERS)
    if _WORKERS == 1 or len(arr) < 20_000:
        return [(0, fn(arr))]
    offsets = list(range(0, len(arr), step))
    with ThreadPoolExecutor(_WORKERS) as pool:
        return list(zip(offsets, pool.map(lambda k: fn(arr.slice(k, step)), offsets)))


def fold_many(values) -> pa.Array:
    """`fold` for a column: NFKC, '−' → '-', whitespace runs → one space, trimmed; null → ''."""
    arr = strings(values)
    return pa.concat_arrays([part for _, part in _in_parts(_fold_part, arr)]) if len(arr) else _fold_part(arr)


def _fold_part(arr: pa.Array) -> pa.Array:
    arr = pc.utf8_normalize(arr, "NFKC")
    if pc.any(pc.match_substring(arr, "−")).as_py():
        arr = pc.replace_substring(arr, "−", "-")
    arr = pc.replace_substring_regex(arr, _SPACES, " ")
    return pc.fill_null(pc.utf8_trim(arr, " "), "")


def _odd_digits(folded: pa.Array) -> np.ndarray:
    """Rows holding a digit outside 0-9 (Python's \\d reads them, RE2's does not)."""
    return np.asarray(pc.fill_null(pc.match_substring_regex(folded, _OTHER_DIGIT), False), dtype=bool)


def _signed(tokens: pa.Array) -> np.ndarray:
    """`_parse_number` for number tokens without spaces: float64, NaN where empty or not finite."""
    negative = pc.or_(pc.or_(pc.starts_with(tokens, "-"), pc.starts_with(tokens, "(-")),
                      pc.and_(pc.starts_with(tokens, "("), pc.ends_with(tokens, ")")))
    digits = pc.replace_substring(pc.utf8_trim(tokens, "()-"), ",", "")
    digits = pc.if_else(pc.equal(digits, ""), pa.scalar(None, pa.string()), digits)
    values = np.asarray(pc.fill_null(pc.cast(digits, pa.float64()), np.nan), dtype="float64")
    values = np.where(np.asarray(pc.fill_null(negative, False), dtype=bool), -values, values)
    return np.where(np.isfinite(values), values, np.nan)


def numbers_many(folded: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """`numbers_in_folded` for a column of folded texts: (row index, number) pairs, in text order."""
    parts = _in_parts(_numbers_part, folded)
    return (np.concatenate([rows + offset for offset, (rows, _) in parts]),
            np.concatenate([values for _, (_, values) in parts]))


def _numbers_part(folded: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    runs = pc.split_pattern_regex(folded, _NOT_NUMBER_CHARS)
    run_rows = np.asarray(pc.list_parent_indices(runs), dtype=np.int64)
    flat = pc.utf8_trim(pc.list_flatten(runs), ",.")  # a leading/trailing , or . never belongs to a number
    whole = np.asarray(pc.match_substring_regex(flat, _WHOLE_NUMBER), dtype=bool)
    odd = _odd_digits(folded)
    fast = np.flatnonzero(whole & ~odd[run_rows]) if odd.any() else np.flatnonzero(whole)
    rest = np.flatnonzero(~whole)  # runs like "2020-2021" or "-": the scalar reads those holding a digit
    rest = rest[np.asarray(pc.match_substring_regex(flat.take(pa.array(rest)), "[0-9]"), dtype=bool) & ~odd[run_rows[rest]]]
    parts = [(run_rows[fast], fast, np.zeros(len(fast), np.int64), _signed(flat.take(pa.array(fast))))]
    scalar = [(int(run_rows[k]), int(k), flat[int(k)].as_py()) for k in rest]
    scalar += [(int(i), 0, folded[int(i)].as_py()) for i in np.flatnonzero(odd)]
    for row, k, text in scalar:
        found = np.array(nz.numbers_in_folded(text), dtype="float64")
        parts.append((np.full(len(found), row), np.full(len(found), k), np.arange(len(found)), found))
    rows, run, sub, values = (np.concatenate(x) for x in zip(*parts))
    keep = ~np.isnan(values)
    rows, run, sub, values = rows[keep], run[keep], sub[keep], values[keep]
    if scalar:  # the fast runs are already in text order; merge the others in
        order = np.lexsort((sub, run, rows))
        rows, values = rows[order], values[order]
    return rows.astype(np.int64), values


def pairs(rows: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, k) for every number k of text owner[i] (owner -1: no text); `rows` sorted, as numbers_many gives them."""
    starts = np.searchsorted(rows, owner, "left")
    lengths = np.searchsorted(rows, owner, "right") - starts
    lengths[owner < 0] = 0
    which = np.repeat(np.arange(len(owner)), lengths)
    return which, np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) + starts[which]


def values_among(row_values: np.ndarray, rows: np.ndarray, numbers: np.ndarray, owner: np.ndarray | None = None,
                 rel_tol: float = 1e-6) -> np.ndarray:
    """`value_among` per row: does row i's value equal (sign aside) one of the numbers of text
    `owner[i]` (default: text i)?"""
    which, k = pairs(rows, np.arange(len(row_values)) if owner is None else owner)
    a, b = np.abs(row_values[which]), np.abs(numbers[k])
    hit = np.zeros(len(row_values), dtype=bool)
    hit[which[np.abs(a - b) <= np.maximum(rel_tol * np.maximum(a, b), 1e-9)]] = True
    return hit


def _value_text(v) -> str | None:
    """The text parse_quantity reads for a value: JSON numbers as repr(float), bools and non-finite as nothing."""
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        try:
            f = float(v)
        except OverflowError:
            return None
        return repr(f) if math.isfinite(f) else None
    return str(v)


def parse_quantities(values: list, units: list) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """`parse_quantity(value, unit)` per row: (value float64, canonical unit or None when unparsed,
    the value text folded — what the parser read).

    Values go through RE2 (JSON numbers as the text the scalar reads for them), and the unit words
    around the number are resolved once per distinct spelling; text the engines could read
    differently (digits outside 0-9, several minus signs) goes through the scalar function.
    """
    n = len(values)
    out_value, out_unit = np.full(n, np.nan), np.full(n, None, dtype=object)
    if not n:
        return out_value, out_unit, pa.array([], pa.string())
    folded = fold_many([_value_text(v) for v in values])
    m = pc.extract_regex(folded, _VALUE_RE2)
    num = pc.replace_substring(m.field("num"), " ", "")
    odd = _odd_digits(folded) | np.asarray(pc.fill_null(pc.greater(pc.count_substring(num, "-"), 1), False), dtype=bool)
    number = _signed(pc.fill_null(num, ""))
    unit_codes = pc.dictionary_encode(strings(units))  # few distinct spellings
    unit_text = pc.fill_null(fold_many(unit_codes.dictionary).take(unit_codes.indices), "")
    key = pc.binary_join_element_wise(pc.fill_null(m.field("rest"), ""), unit_text,
                                      pc.fill_null(m.field("pct"), ""), pc.fill_null(m.field("mult"), ""), "\x1f")
    codes = pc.dictionary_encode(key)  # fold turns \x1f into a space, so it cannot occur inside a part
    resolved = [nz._resolve_unit(rest, unit, bool(pct), mult.lower())
                for rest, unit, pct, mult in (k.split("\x1f") for k in codes.dictionary.to_pylist())]
    known = np.array([r is not None for r in resolved] + [False], dtype=bool)
    unit_of = np.array([r[0] if r else None for r in resolved] + [None], dtype=object)
    mult_of = np.array([1.0 if r is None or r[2] else r[1] for r in resolved] + [1.0])
    code = np.asarray(pc.fill_null(codes.indices, -1), dtype=np.int64)
    ok = np.asarray(m.is_valid(), dtype=bool) & known[code] & ~np.isnan(number) & ~odd
    mult = mult_of[code[ok]]
    out_value[ok] = np.where(mult == 1.0, number[ok], number[ok] * mult)
    out_unit[ok] = unit_of[code[ok]]
    for i in np.flatnonzero(odd).tolist():
        q = nz.parse_quantity(values[i], units[i] or "")
        if q is not None:
            out_value[i], out_unit[i] = q.value, q.unit
    return out_value, out_unit, folded
