"""Target and evidence normalisation (docs/design.md §3): pure functions, never raise on text input.

Values keep the magnitude and unit of the source document with the unit spelled canonically
(`RMB 10k` and `万元` are one unit); comparisons go through base units so that
`6,076.97 万元` equals `60,769,700 元`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

# canonical unit -> (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {
    "元": ("cny", 1.0),
    "千元": ("cny", 1e3),
    "万元": ("cny", 1e4),
    "百万元": ("cny", 1e6),
    "亿元": ("cny", 1e8),
    "%": ("ratio", 1.0),
    "吨": ("mass", 1000.0),
    "千克": ("mass", 1.0),
    "件": ("count", 1.0),
    "万件": ("count", 1e4),
    "天": ("days", 1.0),
    "": ("none", 1.0),
}

# spelling (lower-case, NFKC, single spaces) -> canonical unit
UNIT_ALIASES: dict[str, str] = {
    "元": "元", "yuan": "元", "rmb": "元", "cny": "元", "rmb yuan": "元", "人民币元": "元",
    "千元": "千元", "thousand yuan": "千元", "rmb thousand": "千元", "rmb 1k": "千元", "rmb'000": "千元",
    "万元": "万元", "rmb 10k": "万元", "10k yuan": "万元", "ten thousand yuan": "万元",
    "rmb 10 thousand": "万元", "10,000 yuan": "万元", "人民币万元": "万元",
    "百万元": "百万元", "million yuan": "百万元", "rmb million": "百万元", "rmb mn": "百万元",
    "rmb m": "百万元", "cny million": "百万元", "mn yuan": "百万元",
    "亿元": "亿元", "100 million yuan": "亿元", "rmb 100m": "亿元", "hundred million yuan": "亿元",
    "%": "%", "percent": "%", "pct": "%", "per cent": "%", "百分比": "%",
    "吨": "吨", "t": "吨", "ton": "吨", "tons": "吨", "tonne": "吨", "tonnes": "吨",
    "千克": "千克", "kg": "千克", "公斤": "千克",
    "件": "件", "pcs": "件", "pieces": "件", "units": "件", "unit": "件", "个": "件",
    "万件": "万件", "10k pcs": "万件", "10k units": "万件",
    "天": "天", "day": "天", "days": "天", "日": "天",
    "": "",
}

# ISO 4217 currencies as filings and spreadsheets report them (inline XBRL's `iso4217:USD`, "USD million",
# "$m"): the code, and the code scaled by a multiplier word (`million USD`), one dimension per currency (no
# exchange rates: a value in USD never equals one in EUR). Shares and per-share amounts likewise.
CURRENCIES: dict[str, tuple[str, ...]] = {
    "USD": ("$", "us$", "us dollars", "u.s. dollars"), "EUR": ("€", "euro", "euros"), "GBP": ("£", "pounds sterling"),
    "JPY": (), "CHF": (), "CAD": ("c$",), "AUD": ("a$",), "HKD": ("hk$",), "SGD": ("s$",), "SEK": (), "NOK": (),
    "DKK": (), "INR": (), "KRW": (),
}
_SCALE_WORDS = {"thousand": (1e3, ("k", "'000", "000s", "thousands")), "million": (1e6, ("m", "mn", "mio", "millions")),
                "billion": (1e9, ("bn", "b", "billions"))}
_CURRENCY_ABSORB: dict[tuple[str, float], str] = {}


def _add_currencies() -> None:
    for code, symbols in CURRENCIES.items():
        dim = code.lower()
        UNITS[code] = (dim, 1.0)
        UNITS[f"{code}/shares"] = (f"{dim}_per_share", 1.0)
        for spelling in (code.lower(), *symbols):
            UNIT_ALIASES.setdefault(spelling, code)
            for per in ("/shares", "/share", " per share"):
                UNIT_ALIASES.setdefault(f"{spelling}{per}", f"{code}/shares")
        for word, (factor, short) in _SCALE_WORDS.items():
            canonical = f"{word} {code}"
            UNITS[canonical] = (dim, factor)
            _CURRENCY_ABSORB[(code, factor)] = canonical
            for spelling in (code.lower(), *symbols):
                for w in (word, *short):
                    for alias in (f"{w} {spelling}", f"{spelling} {w}", f"{spelling}{w}" if not spelling.isalpha() else None):
                        if alias:
                            UNIT_ALIASES.setdefault(alias, canonical)
    UNITS["shares"] = ("shares", 1.0)
    for spelling in ("shares", "share"):
        UNIT_ALIASES.setdefault(spelling, "shares")


_add_currencies()

# multiplier words that can sit inside a value or before a unit
MULTIPLIERS: dict[str, float] = {
    "千": 1e3, "万": 1e4, "百万": 1e6, "亿": 1e8, "thousand": 1e3, "k": 1e3,
    "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9,
}
# multiplier applied to a base unit -> canonical unit that absorbs it
_ABSORB = {("元", 1e3): "千元", ("元", 1e4): "万元", ("元", 1e6): "百万元", ("元", 1e8): "亿元",
           ("件", 1e4): "万件"} | _CURRENCY_ABSORB

_NUM = r"[-−]?\(?\s*[-−]?\d+(?:,\d{3})*(?:\.\d+)?\s*\)?"
_MULT_RE = "|".join(sorted((re.escape(m) for m in MULTIPLIERS), key=len, reverse=True))
_VALUE_RE = re.compile(rf"^\s*(?P<num>{_NUM})\s*(?P<mult>{_MULT_RE})?\s*(?P<pct>%)?\s*(?P<rest>.*?)\s*$", re.I)
_SEP = r"[\s,;:|/\-–—~]+"
_LEAD_VALUE = re.compile(rf"^\s*{_NUM}\s*(?:{_MULT_RE})?\s*(?:%|[^\s,;:|/\-–—]*?)?\s*(?:{_SEP})", re.I)
_TRAIL_VALUE = re.compile(rf"(?:{_SEP}){_NUM}\s*(?:{_MULT_RE})?\s*(?:%|[a-z\u4e00-\u9fff]{{0,6}})?\s*$", re.I)


def fold(text: object) -> str:
    """NFKC-fold text (full-width digits and punctuation become ASCII), collapse whitespace;
    None/NaN become ''. ASCII text skips normalisation (NFKC is the identity there)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    return _fold_str(text if isinstance(text, str) else str(text))


@lru_cache(maxsize=1 << 17)
def _fold_str(s: str) -> str:
    if not s.isascii():
        s = unicodedata.normalize("NFKC", s).replace("−", "-")
    return " ".join(s.split())


def canonical_unit(unit_raw: object) -> str | None:
    """Canonical spelling of a unit, or None when the unit is not known."""
    key = fold(unit_raw).lower().replace("（", "(").strip(" .")
    return UNIT_ALIASES.get(key)


def _has_separator_or_decimal(num: str) -> bool:
    return "," in num or "." in num


@dataclass(frozen=True)
class Quantity:
    """A parsed value in the source's magnitude with a canonical unit."""

    value: float
    unit: str

    def base(self) -> tuple[str, float] | None:
        dim = UNITS.get(self.unit)
        return None if dim is None else (dim[0], self.value * dim[1])


def _parse_number(num: str) -> float | None:
    s = num.replace(" ", "")
    negative = s.startswith("(") and s.endswith(")") or s.lstrip("(").startswith("-")
    digits = s.strip("()").lstrip("-").strip("()").replace(",", "")
    try:
        v = float(digits)
    except ValueError:
        return None
    if not math.isfinite(v):
        return None
    return -v if negative else v


def parse_quantity(value_raw: object, unit_raw: object = "") -> Quantity | None:
    """Parse a value as written (`6,076.97`, `1.2亿`, `(35.0)`, `12.5%`) with its unit as written.

    Returns None when the value is not a number or the unit is unknown. A multiplier inside the
    value is absorbed into the unit when a canonical unit exists for it (`1.2亿` + `元` → 1.2 亿元),
    otherwise multiplied out.
    """
    if isinstance(value_raw, bool):
        return None
    if isinstance(value_raw, (int, float)):
        try:
            number = float(value_raw)
        except OverflowError:  # an integer beyond float range
            return None
        if not math.isfinite(number):
            return None
        text = repr(number)
    else:
        text = fold(value_raw)
    m = _VALUE_RE.match(text)
    if not m:
        return None
    value = _parse_number(m.group("num"))
    if value is None:
        return None
    resolved = _resolve_unit(m.group("rest"), fold(unit_raw), bool(m.group("pct")), (m.group("mult") or "").lower())
    if resolved is None:
        return None
    unit, value_mult, absorbed = resolved
    if absorbed:
        return Quantity(value, unit)
    return Quantity(value * value_mult if value_mult != 1.0 else value, unit)


@lru_cache(maxsize=4096)
def _resolve_unit(rest: str, unit_text: str, pct: bool, mult_word: str) -> tuple[str, float, bool] | None:
    """(canonical unit, multiplier to apply to the value, whether the unit absorbed the multiplier).

    Depends only on the words around the number, which repeat across rows: cached.
    """
    if pct:
        unit_text = "%"
    elif rest:
        unit_text = f"{rest} {unit_text}".strip() if unit_text and canonical_unit(rest) is None else (unit_text or rest)
    unit = canonical_unit(unit_text)
    if unit is None:
        unit, inner = _split_unit_multiplier(unit_text)
        if unit is None:
            return None
        value_mult = inner
    else:
        value_mult = 1.0
    if mult_word:
        value_mult *= MULTIPLIERS[mult_word]
    if value_mult != 1.0:
        absorbed = _ABSORB.get((_base_of(unit), UNITS[unit][1] * value_mult))
        if absorbed:
            return absorbed, 1.0, True
    return unit, value_mult, False


def _base_of(unit: str) -> str:
    dim = UNITS[unit][0]
    return {"cny": "元", "count": "件"}.get(dim) or (dim.upper() if dim.upper() in CURRENCIES else unit)


def _split_unit_multiplier(unit_text: str) -> tuple[str | None, float]:
    """`million yuan`-like spellings that are not in the alias table: multiplier word + unit."""
    low = unit_text.lower()
    for word in sorted(MULTIPLIERS, key=len, reverse=True):
        if low.startswith(word):
            tail = canonical_unit(low[len(word):].strip())
            if tail is not None:
                return tail, MULTIPLIERS[word]
    return None, 1.0


def same_quantity(a: Quantity | None, b: Quantity | None, rel_tol: float = 1e-4) -> bool:
    """True when both quantities have the same dimension and equal values in base units."""
    if a is None or b is None:
        return False
    ba, bb = a.base(), b.base()
    if ba is None or bb is None or ba[0] != bb[0]:
        return False
    return math.isclose(ba[1], bb[1], rel_tol=rel_tol, abs_tol=1e-9)


def clean_metric_label(label: object) -> tuple[str, bool]:
    """Strip a value-bearing prefix or suffix from a metric label.

    `6,076.97，原材料采购总额占比` → (`原材料采购总额占比`, True);
    `Revenue 1,234.5 million` → (`Revenue`, True); `2023 revenue` is left alone (a bare integer
    followed by a space is a year or a count, not a value).
    """
    s = fold(label)
    changed = False
    m = _LEAD_VALUE.match(s)
    if m and (_has_separator_or_decimal(m.group(0)) or re.search(r"[,;:|\-–—]", m.group(0))):
        s, changed = s[m.end():].strip(), True
    m = _TRAIL_VALUE.search(s)
    if m and m.start() > 0 and _has_separator_or_decimal(m.group(0).strip(" ,;:|/-–—~")):
        s, changed = s[: m.start()].strip(), True
    return s.strip(" ,;:|/-–—~"), changed


def metric_key(label: object) -> str:
    """Comparison key for metric labels: folded, lower-case, no spaces or punctuation."""
    return re.sub(r"[\W_]+", "", fold(label).lower())


# the lookahead lets the engine skip positions that cannot start a number (2.2× faster on chunk texts)
_NUM_PARTS = re.compile(r"(?=[(\-−\d])(\()?([-−])?(\d+(?:,\d{3})*(?:\.\d+)?)(\))?")


@lru_cache(maxsize=1 << 16)
def _numbers_cached(text: str) -> tuple[float, ...]:
    return numbers_in_folded(fold(text))


def numbers_in_folded(folded: str) -> tuple[float, ...]:
    """`numbers_in` for a text that is already `fold`ed (no second fold, no cache)."""
    out = []
    for opening, minus, digits, closing in _NUM_PARTS.findall(folded):
        v = float(digits.replace(",", ""))
        if math.isfinite(v):
            out.append(-v if minus or (opening and closing) else v)
    return tuple(out)


def numbers_in(text: object) -> list[float]:
    """Every number written in a text, as written (separators and parentheses understood).
    Cached: chunk texts are checked once per fact that cites them."""
    return list(_numbers_cached(text if isinstance(text, str) else fold(text)))


def value_in_text(value: float, text: object, rel_tol: float = 1e-6) -> bool:
    """True when the value (in the source's magnitude) is written in the text."""
    return value_among(value, numbers_in(text), rel_tol)


def value_among(value: float, numbers, rel_tol: float = 1e-6) -> bool:
    """True when the value equals (sign aside, to rel_tol) one of the numbers found in a text."""
    return any(math.isclose(abs(value), abs(v), rel_tol=rel_tol, abs_tol=1e-9) for v in numbers)


_UNIT_STOP = re.compile(r"[;:!?()\[\]{}。；：！？（）、\"]|,(?!\d{3})|\.(?!\d)|\s{2,}")


def written_quantities(text: object) -> list[tuple[float, Quantity | None]]:
    """Every number written in a text (signed, as `numbers_in` reads it) with the quantity the words right
    after it make of it — `16.5 days` → 16.5 天, `1,200.5 RMB 10k` → 1200.5 万元 — or None where no
    readable unit follows (a year, a page number, a unit written in a header). The reading stops at the
    clause's end. Pure; what admission's unit check and the per-quote answer grammar read units from.
    Cached: the grammar reads the same retrieved sentences for every arm and round."""
    return [(number, reading) for number, reading, _ in _written_cached(text if isinstance(text, str) else fold(text))]


def _glued(folded: str, start: int) -> bool:
    """Is the number that starts at `start` glued to a letter or a closing bracket before it (part of a name)?"""
    before = folded[start - 1] if start else " "
    return before.isascii() and (before.isalpha() or before in ")]")


@lru_cache(maxsize=1 << 16)
def _written_cached(text: str) -> tuple[tuple[float, Quantity | None, bool], ...]:
    """(number, reading, glued to a name) for every number of a text: what `written_quantities` and
    `stated_quantities` both read, scanned once."""
    folded = fold(text)
    out: list[tuple[float, Quantity | None, bool]] = []
    for m in _NUM_PARTS.finditer(folded):
        opening, minus, digits, closing = m.groups()
        number = float(digits.replace(",", ""))
        if not math.isfinite(number):
            continue
        tail = folded[m.end():m.end() + 24]
        stop = _UNIT_STOP.search(tail)
        tail = tail[:stop.start()] if stop else tail
        reading = None
        for end in sorted({i for i in range(1, len(tail) + 1) if i == len(tail) or tail[i] == " "
                           or not tail[i - 1].isascii()}, reverse=True):
            q = parse_quantity(digits, tail[:end].strip())
            if q is not None and q.unit != "":
                reading = q
                break
        out.append((-number if minus or (opening and closing) else number, reading, _glued(folded, m.start())))
    return tuple(out)


def stated_quantities(text: object) -> list[tuple[float, Quantity | None]]:
    """`written_quantities` less the numbers that are part of a name or a footnote marker: glued to a letter or a
    closing bracket before them (`CO2e`, `Series2000`, `FY19`, `COVID-19`, `penetration(2)(3)`). What a text states
    as quantities: the answer grammar offers only these as values. Pure."""
    return [(number, reading) for number, reading, glued in _written_cached(text if isinstance(text, str) else fold(text))
            if not glued]


def unit_agrees(value: float, unit: str, text: object) -> bool | None:
    """Does `text` write `value` with `unit` (equal in base units)? None when the value is written
    without a readable unit beside it (nothing to disagree with).

    The admission check against poisoned exports: a row whose unit was shifted (`元` for `万元`)
    still has its number in the source, but the source writes another unit next to it.
    """
    want = Quantity(abs(value), unit)
    seen_unit = False
    for number, reading in written_quantities(text):
        if reading is None or not math.isclose(abs(number), abs(value), rel_tol=1e-6, abs_tol=1e-9):
            continue
        seen_unit = True
        if same_quantity(Quantity(abs(number), reading.unit), want):
            return True
    return False if seen_unit else None


def terms_in_text(metric: object, text: object) -> bool:
    """True when the key terms of a metric label are findable in a text.

    Chinese labels must appear as a substring; English labels need every content word (≥ 3 letters).
    assetize checks a million rows with `metric_terms` once per label and `terms_found` per row.
    """
    terms = metric_terms(metric)
    t = fold(text).lower()
    return terms_found(terms, t, metric_key(t) if terms is not None and terms.cjk else "")


@dataclass(frozen=True)
class MetricTerms:
    """What `terms_in_text` looks for in a text, computed once per metric label."""

    cjk: bool
    key: str
    words: tuple[str, ...]


def metric_terms(metric: object) -> MetricTerms | None:
    """The terms of a label (None for an empty label, which is found nowhere)."""
    m = fold(metric).lower()
    if not m:
        return None
    return MetricTerms(bool(re.search(r"[\u4e00-\u9fff]", m)), metric_key(m), tuple(re.findall(r"[a-z]{3,}", m)))


def terms_found(terms: MetricTerms | None, text_lower: str, text_key: str) -> bool:
    """`terms_in_text` on a text already folded and lower-cased, and its `metric_key`."""
    if terms is None:
        return False
    if terms.cjk:
        return terms.key in text_key
    return bool(terms.words) and all(w in text_lower for w in terms.words)


_QUARTER = re.compile(r"Q([1-4])|第([一二三四1-4])季度", re.I)


_FY_SHORT = re.compile(r"\bFY\s*'?(\d{2})\b", re.I)


def normalize_period(period_raw: object) -> str:
    """`FY2023`, `FY23`, `2023年`, `２０２３`, `Year Ended December 31, 2023`, `April 26, 2023` → `2023`;
    `2023年第一季度`/`Q1 2023`/`Q1 FY23` → `2023Q1`; no year → folded text."""
    s = fold(period_raw)
    year = re.search(r"(19|20)\d{2}", s)
    short = _FY_SHORT.search(s) if not year else None
    if not year and not short:
        return s
    y = year.group(0) if year else f"20{short.group(1)}"
    q = _QUARTER.search(s)
    if not q:
        return y
    n = q.group(1) or q.group(2)
    return f"{y}Q{n if n.isdigit() else '一二三四'.index(n) + 1}"


_PERIOD = re.compile(r"(19|20)\d{2}(Q[1-4])?")


def header_period(header: object) -> str | None:
    """The period a table's column header names, normalised like a fact's period (`2019`, `FY19`, `2019 (1)`,
    `Three Months Ended April 26, 2019` → `2019`; `Q1 2019` → `2019Q1`); None when it names no year (`% Change`,
    `Total`). What ingest's `period_of_value` reads a fact's period with."""
    period = normalize_period(header)
    return period if _PERIOD.fullmatch(period) else None


# A currency sign written before a number: `$1,496.5`, `$ (1,234)`, `US$ 5`, `€12.3`; the longer signs first.
_SIGN_CODE = {s: code for code, symbols in CURRENCIES.items() for s in symbols if not s.replace(".", "").isalpha()}
_SIGNED_NUMBER = re.compile(r"(?<![a-z])(" + "|".join(re.escape(s) for s in sorted(_SIGN_CODE, key=len, reverse=True))
                            + r")\s*\(?\s*[-−]?(\d+(?:,\d{3})*(?:\.\d+)?)", re.I)


def signed_currencies(text: object) -> dict[float, str]:
    """Each number written right after a currency sign, with the sign's ISO code (`Total | 2019: $1,496.5` →
    {1496.5: 'USD'}; sign aside, as `value_among` compares). The sign says the currency, not the scale: a table in
    millions writes `$1,496.5` for 1,496.5 million USD. Pure."""
    out: dict[float, str] = {}
    for m in _SIGNED_NUMBER.finditer(fold(text).lower()):
        out.setdefault(float(m.group(2).replace(",", "")), _SIGN_CODE[m.group(1)])
    return out


def currency_units(code: str) -> list[str]:
    """The units an amount in currency `code` can have, in registry order: the code at every scale and per share."""
    dims = (code.lower(), f"{code.lower()}_per_share")
    return [u for u, (dim, _) in UNITS.items() if dim in dims]


# What a text may write a unit with: each spelling of the registry (`tonnes`, `%`, `US$`, `万元`, `RMB`), a word of
# letters counted only as a whole word (`eur` in `Europe` is not euros, a lone `t` is no tonne), and `dollars` /
# `yen` / `¥`, which name a currency without a registry spelling of their own. A currency named once stands for that
# currency at every scale and per share: a caption says `$` or `US$’000` once for a whole table.
_CURRENCY_DIMENSIONS = frozenset(d for d, _ in UNITS.values()
                                 if d == "cny" or d.removesuffix("_per_share").upper() in CURRENCIES)
_EXTRA_SPELLINGS = {"dollar": ("USD",), "dollars": ("USD",), "yen": ("JPY",), "¥": ("JPY", "元")}


def _spelled_units() -> dict[str, tuple[str, ...]]:
    """spelling → the canonical units it stands for (a currency's: `currency_units`, every scale and per share)."""
    def family(unit: str) -> tuple[str, ...]:
        dim = UNITS[unit][0].removesuffix("_per_share")
        return tuple(currency_units(dim.upper())) if dim in _CURRENCY_DIMENSIONS else (unit,)

    spelled = {a: family(u) for a, u in UNIT_ALIASES.items() if a and not re.fullmatch(r"[a-z]", a)}
    return spelled | {a: tuple(x for code in codes for x in family(code)) for a, codes in _EXTRA_SPELLINGS.items()}


_SPELLED_UNITS = _spelled_units()
_UNIT_SPELLING = re.compile("|".join(
    rf"(?<![a-z]){re.escape(a)}(?![a-z])" if a[0].isalpha() and a.isascii() else re.escape(a)
    for a in sorted(_SPELLED_UNITS, key=len, reverse=True)))


@lru_cache(maxsize=4096)
def _units_named_cached(text: str) -> frozenset[str]:
    return frozenset({"", *(u for m in _UNIT_SPELLING.finditer(fold(text).lower()) for u in _SPELLED_UNITS[m.group(0)])})


# How a page declares the scale of its amounts once for a whole table: `(in millions)`, `$ in thousands`, `Amounts in
# thousands of U.S. dollars`, `in € millions`, `US$’000`, `$000`, `€m`, `£bn`. A quantity's own word (`$731 million`)
# is no declaration: it is that number's unit, read beside it.
_SCALE_FACTORS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "000": 1e3, "m": 1e6, "mn": 1e6, "bn": 1e9}
_DECLARED_SCALE = re.compile(
    r"\bin\s+(?:(?:[a-z]{1,3})?[$€£¥]\s*)?(thousand|million|billion)s?\b"
    r"|(?:[’'`]|[$€£¥]\s?)(000)s?\b|\b(000)s\b"
    r"|[$€£¥]\s?(m|mn|bn)\b")


_AMOUNT_DIMENSIONS = frozenset(d for d in _CURRENCY_DIMENSIONS if not d.endswith("_per_share"))


def in_a_currency(unit: str) -> bool:
    """Whether a canonical unit is money: a currency at any scale or per share (`million USD`, `USD/shares`, `万元`)."""
    return UNITS[unit][0] in _CURRENCY_DIMENSIONS


def scales_declared(text: object) -> frozenset[float]:
    """The scales `text` declares for amounts written without one (`(in millions)` → {1e6}, `US$’000` → {1e3}); empty
    when it declares none. A table's cells are written at the scale its caption declares: TAT-QA's annotators read
    `(1.6)` under `(in millions)` as 1.6 million (`clap.evaluate.decoding` offers only that scale). Pure."""
    return _scales_declared_cached(fold(text).lower())


@lru_cache(maxsize=4096)
def _scales_declared_cached(folded: str) -> frozenset[float]:  # a chunk's text is read again for every schema
    return frozenset(_SCALE_FACTORS[next(g for g in m.groups() if g)] for m in _DECLARED_SCALE.finditer(folded))


def at_scales(units: tuple[str, ...], scales: frozenset[float]) -> tuple[str, ...]:
    """`units` less the amounts in a currency at a scale outside `scales` (per-share amounts and other units stay);
    all of `units` when `scales` is empty (nothing declared, nothing ruled out). Pure."""
    if not scales:
        return units
    return tuple(u for u in units
                 if UNITS[u][0] not in _AMOUNT_DIMENSIONS or UNITS[u][1] in scales)


def units_named(text: object) -> frozenset[str]:
    """The canonical units `text` writes anywhere, and `""` (no unit): what a number the text writes without a unit
    beside it may be measured in — a table of rights that names no unit states counts, a table under `US$’000`
    amounts in US dollars at any scale (`clap.evaluate.decoding`). Pure."""
    return _units_named_cached(text if isinstance(text, str) else fold(text))
