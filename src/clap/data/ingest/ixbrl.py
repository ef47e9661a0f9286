"""Inline XBRL → raw facts: every tagged numeric fact, resolved, with the chunk that shows it as evidence.

    facts, quarantined = extract_facts(doc, chunk_ids_of_blocks, doc_id=..., batch=..., lang=..., file=...)

Inline XBRL 1.0 (`http://www.xbrl.org/2008/inlineXBRL`) and 1.1 (`…/2013/inlineXBRL`), prefixed or as the
default namespace. For each `ix:nonFraction`:
  - entity: the context's identifier, named by the filing's own name fact when it has one
    (`dei:EntityRegistrantName`, `…:EntityCurrentLegalOrRegisteredName`, …);
  - concept (`us-gaap:AssetsCurrent`) and its human label: the table row's own label cell when the fact sits in
    a row, else the concept's name in words (no taxonomy is fetched: ingest runs offline);
  - period from the context: an instant (`2024-12-31`), a year (`FY2024`), a quarter (`2024Q3`) or `start/end`;
  - unit from the unit element (`iso4217:USD` → `USD`, a divide → `USD/shares`, `xbrli:pure`);
  - value after the transformation format (TR1–TR5 registries' numeric formats), scale and sign.
    Written as the raw contract wants it for verification: the number as the document shows it with the scale
    in the unit (`2,909` at scale 6 in USD → value 2909, unit `million USD`; scale −2 of a pure → `%`), so that
    assetize finds it in the evidence chunk; `value_scaled` keeps the full number (2909000000).
A fact the filing gets wrong is quarantined with its reason, never guessed: `unknown_format`, `format_mismatch`,
`unknown_context`, `unknown_unit`, `bad_scale`, `nil_fact`, `hidden_fact` (tagged in `ix:hidden`, shown
nowhere: nothing to quote), `fraction_fact` (`ix:fraction` is not a decimal).
"""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import Decimal, InvalidOperation

from clap.data.ingest.blocks import IX_NAMESPACES, Document, local, namespace, squash
from clap.io import quarantine_record

XBRLI = "http://www.xbrl.org/2003/instance"
XSI_NIL = "{http://www.w3.org/2001/XMLSchema-instance}nil"
_TR = "http://www.xbrl.org/inlineXBRL/transformation/"
# numeric formats per registry (hyphens removed, lower case) -> how the text is read
_DOT, _COMMA, _ZERO, _UNIT = "dot_decimal", "comma_decimal", "zero", "unit_decimal"
FORMATS = {
    _TR + "2010-04-20": {"numcommadot": _DOT, "numspacedot": _DOT, "numdotcomma": _COMMA, "numspacecomma": _COMMA,
                         "numcomma": _COMMA, "numdash": _ZERO},
    _TR + "2011-07-31": {"numdotdecimal": _DOT, "numcommadecimal": _COMMA, "zerodash": _ZERO, "numunitdecimal": _UNIT},
    _TR + "2015-02-26": {"numdotdecimal": _DOT, "numcommadecimal": _COMMA, "zerodash": _ZERO, "numunitdecimal": _UNIT,
                         "numdotdecimalin": _DOT, "numunitdecimalin": _UNIT},
    _TR + "2020-02-12": {"numdotdecimal": _DOT, "numcommadecimal": _COMMA, "fixedzero": _ZERO, "numunitdecimal": _UNIT,
                         "numdotdecimalin": _DOT, "numunitdecimalin": _UNIT, "numdotdecimalapos": _DOT},
    _TR + "2022-02-16": {"numdotdecimal": _DOT, "numcommadecimal": _COMMA, "fixedzero": _ZERO, "numunitdecimal": _UNIT,
                         "numdotdecimalin": _DOT, "numunitdecimalin": _UNIT, "numdotdecimalapos": _DOT},
}
NAME_CONCEPTS = ("entityregistrantname", "entitycurrentlegalorregisteredname", "entityname",
                 "nameofreportingentityordescriptionofnatureoffinancialstatements")
SCALE_WORDS = {0: "", 3: "thousand ", 6: "million ", 9: "billion "}


class FactError(Exception):
    def __init__(self, rule: str, detail: str):
        super().__init__(detail)
        self.rule = rule


def read_number(text: str, fmt: str | None, nsmap: dict) -> Decimal:
    """The decimal a fact's text stands for under its `format` (a QName resolved through `nsmap`); no format:
    the text must be a plain decimal (the spec's default)."""
    text = squash(text)
    if fmt is None:
        if not re.fullmatch(r"\d+(\.\d+)?", text):
            raise FactError("format_mismatch", f"{text!r} is not a plain decimal and the fact has no format")
        return Decimal(text)
    prefix, _, name = fmt.rpartition(":")
    ns = nsmap.get(prefix or None)
    kind = FORMATS.get(ns, {}).get(name.replace("-", "").lower())
    if kind is None:
        raise FactError("unknown_format", f"{fmt} ({ns or 'undeclared prefix'}) is not a numeric format of the "
                                          "inline XBRL transformation registries")
    if kind == _ZERO:
        if not re.fullmatch(r"[-‐‑‒–—―−]*", text.replace(" ", "")):
            raise FactError("format_mismatch", f"{text!r} under {fmt} must be a dash")
        return Decimal(0)
    if kind == _UNIT:
        m = re.fullmatch(r"(\d[\d,.' \u00a0]*)\D+?(\d{1,2})\D*", text) or re.fullmatch(r"(\d[\d,.' \u00a0]*)\D*", text)
        if not m:
            raise FactError("format_mismatch", f"{text!r} is not a number with units under {fmt}")
        whole = re.sub(r"\D", "", m.group(1))
        frac = m.group(2) if m.lastindex and m.lastindex >= 2 else "0"
        return Decimal(f"{whole}.{frac.zfill(2)}")  # "5 dollars 5 cents" is 5.05
    grouped, decimal = (r"[, ']", r"\.") if kind == _DOT else (r"[. ']", ",")  # a thousands separator, the decimal mark
    text = text.replace("\u00a0", " ")
    if not re.fullmatch(rf"\d{{1,3}}(?:{grouped}?\d{{3}})*(?:{decimal}\d+)?|\d+(?:{decimal}\d+)?", text):
        raise FactError("format_mismatch", f"{text!r} does not read as a number under {fmt}")
    whole, *frac = re.split(decimal, text, maxsplit=1)
    return Decimal(re.sub(r"\D", "", whole) + (f".{frac[0]}" if frac else ""))


def _period(ctx) -> tuple[str, dict]:
    period = next((c for c in ctx.iter() if local(c.tag) == "period"), None)
    if period is None:
        raise FactError("unknown_context", f"context {ctx.get('id')} has no period")
    parts = {local(c.tag): (c.text or "").strip()[:10] for c in period}
    if "instant" in parts:
        return parts["instant"], {"period_instant": parts["instant"]}
    if "startdate" in parts and "enddate" in parts:
        start, end = date.fromisoformat(parts["startdate"]), date.fromisoformat(parts["enddate"])
        days = (end - start).days
        label = (f"FY{end.year}" if 350 <= days <= 380 else f"{end.year}Q{(end.month - 1) // 3 + 1}"
                 if 85 <= days <= 95 else f"{start.isoformat()}/{end.isoformat()}")
        return label, {"period_start": start.isoformat(), "period_end": end.isoformat()}
    if "forever" in parts:
        return "forever", {}
    raise FactError("unknown_context", f"context {ctx.get('id')} has an unreadable period")


def _contexts(root) -> dict[str, dict]:
    out = {}
    for ctx in root.iter(f"{{{XBRLI}}}context"):
        ident = next((c for c in ctx.iter(f"{{{XBRLI}}}identifier")), None)
        try:
            label, fields = _period(ctx)
        except (FactError, ValueError) as exc:
            out[ctx.get("id")] = {"error": str(exc)}
            continue
        members = {m.get("dimension"): squash("".join(m.itertext())) for m in ctx.iter()
                   if local(m.tag) in ("explicitmember", "typedmember")}
        out[ctx.get("id")] = {"identifier": squash(ident.text or "") if ident is not None else "", "period": label,
                              "dimensions": members, **fields}
    return out


def _measure(el) -> str:
    text = squash(el.text or "")
    prefix, _, name = text.rpartition(":")
    return name or text


def _units(root) -> dict[str, str]:
    out = {}
    for unit in root.iter(f"{{{XBRLI}}}unit"):
        num = [_measure(m) for m in unit.iter(f"{{{XBRLI}}}unitNumerator") for m in m.iter(f"{{{XBRLI}}}measure")]
        den = [_measure(m) for m in unit.iter(f"{{{XBRLI}}}unitDenominator") for m in m.iter(f"{{{XBRLI}}}measure")]
        if num and den:
            out[unit.get("id")] = f"{'*'.join(num)}/{'*'.join(den)}"
        else:
            out[unit.get("id")] = "*".join(_measure(m) for m in unit if local(m.tag) == "measure")
    return out


def humanize(concept: str) -> str:
    """`us-gaap:CashAndCashEquivalentsAtCarryingValue` → `Cash and cash equivalents at carrying value`."""
    name = concept.rpartition(":")[2]
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|\d+", name) or [name]
    text = " ".join(w if w.isupper() and len(w) > 1 else w.lower() for w in words)
    return text[:1].upper() + text[1:]


def _row_label(block) -> str | None:
    """A table row's label cell ("Current assets | 2,909 | 4,585" → "Current assets")."""
    if block is None or block.kind != "table_row":
        return None
    first = block.text.split(" | ")[0]
    return first if re.search(r"[^\W\d_]", first) and not re.search(r"\d{2,}", first) else None


def _unit_and_value(measure: str, shown: Decimal, scale: int) -> tuple[str, Decimal]:
    if measure.isupper() and len(measure) == 3 and scale in SCALE_WORDS:  # an ISO 4217 currency
        return f"{SCALE_WORDS[scale]}{measure}", shown
    if measure == "pure":
        return ("%", shown) if scale == -2 else ("", shown.scaleb(scale))
    return measure, shown.scaleb(scale)


def _number(d: Decimal):
    return int(d) if d == d.to_integral_value() and abs(d) < 1 << 53 else float(d)


def extract_facts(doc: Document, block_chunks: list[str], *, doc_id: str, batch: str, lang: str,
                  file: str) -> tuple[list[dict], list[dict]]:
    """(raw facts, quarantine records) of one inline XBRL document; `block_chunks[i]` is the chunk id of block i."""
    root = doc.xbrl
    contexts, units = _contexts(root), _units(root)
    names = {}
    for el in root.iter():
        if (isinstance(el.tag, str) and namespace(el.tag) in IX_NAMESPACES and local(el.tag) == "nonnumeric"
                and (el.get("name") or "").rpartition(":")[2].lower() in NAME_CONCEPTS):
            ctx = contexts.get(el.get("contextRef"), {})
            names.setdefault(ctx.get("identifier"), squash("".join(el.itertext())))
    shown = {id(el): (i, block) for i, block in enumerate(doc.blocks) for el in block.facts}
    facts, bad = [], []
    elements = [el for el in root.iter() if isinstance(el.tag, str) and namespace(el.tag) in IX_NAMESPACES
                and local(el.tag) in ("nonfraction", "fraction")]
    for n, el in enumerate(elements):
        concept = el.get("name") or ""
        original = {"concept": concept, "contextRef": el.get("contextRef"), "unitRef": el.get("unitRef"),
                    "format": el.get("format"), "scale": el.get("scale"), "sign": el.get("sign"),
                    "text": squash("".join(el.itertext())), "id": el.get("id")}
        try:
            fact = _fact(el, concept, contexts, units, names, shown.get(id(el)), block_chunks)
        except FactError as exc:
            bad.append(quarantine_record("ingest", file, n, exc.rule, concept or None, original | {"why": str(exc)}))
            continue
        facts.append({"record_id": f"{doc_id}-{el.get('id') or f'f{n}'}", "batch": batch, "doc_id": doc_id,
                      "lang": lang, **fact})
    return facts, bad


def _fact(el, concept, contexts, units, names, where, block_chunks) -> dict:
    if local(el.tag) == "fraction":
        raise FactError("fraction_fact", "ix:fraction holds a numerator and a denominator, not one decimal")
    if el.get(XSI_NIL) in ("true", "1"):
        raise FactError("nil_fact", "the fact is nil: it reports no value")
    ctx = contexts.get(el.get("contextRef"))
    if ctx is None or "error" in ctx:
        raise FactError("unknown_context", ctx["error"] if ctx else f"contextRef {el.get('contextRef')!r} names no context")
    measure = units.get(el.get("unitRef"))
    if not measure:
        raise FactError("unknown_unit", f"unitRef {el.get('unitRef')!r} names no unit")
    try:
        scale = int(el.get("scale") or 0)
    except ValueError:
        raise FactError("bad_scale", f"scale {el.get('scale')!r} is not an integer") from None
    if where is None:
        raise FactError("hidden_fact", "tagged in ix:hidden, shown nowhere in the document: no evidence to quote")
    try:
        shown = read_number("".join(el.itertext()), el.get("format"), el.nsmap)
    except InvalidOperation:
        raise FactError("format_mismatch", "not a decimal") from None
    if el.get("sign") == "-":
        shown = -shown
    unit, value = _unit_and_value(measure, shown, scale)
    block_no, block = where
    dims = ctx["dimensions"]
    label = _row_label(block) or humanize(concept)
    if dims:
        label = f"{label} ({', '.join(humanize(v) for v in dims.values())})"
    entity = names.get(ctx["identifier"]) or ctx["identifier"]
    return {"page": block.page, "chunk_id": block_chunks[block_no], "entity": entity, "metric": label,
            "period": ctx["period"], "value": _number(value), "unit": unit, "evidence": block.text,
            "concept": concept, "entity_identifier": ctx["identifier"], "context": el.get("contextRef"),
            "unit_measure": measure, "scale": scale, "decimals": el.get("decimals"),
            "value_scaled": format(shown.scaleb(scale), "f"), "dimensions": json.dumps(dims, sort_keys=True) if dims else None,
            **{k: ctx.get(k) for k in ("period_instant", "period_start", "period_end")}}
