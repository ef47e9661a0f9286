"""Schema-constrained decoding: the JSON schema of an answer, built per request, and its xgrammar grammar.

Evaluation and replay decode the way serving does: vLLM's default structured-output backend is
xgrammar, and `Engine.generate(..., schemas=...)` applies the same grammars through xgrammar's
Hugging Face logits processor. The schema comes from the contract (`prompts.ANSWER_KEYS`, the
canonical units) and, because the task is extractive, from what the model was shown: the evidence is
one sentence of the given sources, the value a number written in *that* sentence, the unit the one
written beside it (a currency sign before it fixes the currency, and the scale its source declares the scale; a
number with no unit beside it takes one its line, a caption or its table's cells write, or none), and `chunk_id` /
`doc_id` / `page` those of the chunk the sentence comes from. A number glued to a word or a bracket (`CO2e`, `Series2000`,
a footnote's `(2)`) is part of a name, never a value. A constrained model can still pick the wrong sentence (a
comparative year, another metric, another company's chunk) or the wrong scale; it can no longer invent a quote,
quote one sentence and take another's number, give a number another unit than its source writes, repeat a key
or write `c08-annual-2022-p2 doc_id=… page=2` as a chunk id.
"""

from __future__ import annotations

import json
import math
import re

from clap.domain.prompts import ANSWER_KEYS, LOCATION_KEYS, RISK_FOCUS, json_number
from clap.domain.quantities import (
    UNITS,
    at_scales,
    currency_units,
    in_a_currency,
    scales_declared,
    signed_currencies,
    stated_quantities,
    units_named,
)

# A sentence ends at 。！？； or at . ! ? ; followed by white space (so 332,291.58 and "Co." inside a
# company name stay whole). A sentence of a source is what an evidence quote may be.
_ABBREVIATIONS = ("Co", "Corp", "Inc", "Ltd", "No", "Nos", "vs", "approx")
_SENTENCE_END = re.compile(r"\s*\n\s*|(?<=[。！？；])|(?<=[.!?;])" + "".join(rf"(?<!\b{a}\.)" for a in _ABBREVIATIONS)
                           + r"\s+")  # a line break ends a sentence too: an ingested chunk's table rows are lines
_ANY_UNIT = tuple(sorted(UNITS))  # a number with no readable unit or sign: the registry's units, in a stable order
MAX_LABEL_CHARS = 40  # entity and metric are short labels; bounds a runaway string (CJK tokenises long)
MAX_PERIOD_CHARS = 16
MAX_FREE_QUOTE_CHARS = 120  # a quote with no source to pick from (the no-RAG arms); bounds its length
MAX_ACTION_CHARS = 100  # a recommended action is one imperative sentence


def sentences(text: str) -> list[str]:
    """The sentences of a source text, in order, without duplicates (pure)."""
    out: list[str] = []
    for part in _SENTENCE_END.split(text):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out


def valued_part(sentence: str) -> str:
    """What of a table line states values (pure): a line whose cells carry column headers (`Total sales | 2019:
    $1,496.5 | 2018: $1,202.9`, clap.data.ingest.grid) states the numbers after each `header: `, not the row label
    or the headers (a year there is never the answer); any other sentence is all values."""
    cells = sentence.split(" | ")
    if len(cells) < 2 or not any(": " in c for c in cells[1:]):
        return sentence
    return " | ".join(c.rpartition(": ")[2] if ": " in c else c for c in cells[1:])


def _readings(sentence: str, unwritten: tuple[str, ...] = _ANY_UNIT,
              scales: frozenset[float] = frozenset()) -> list[tuple[list, list[str]]]:
    """The (values, units) a quote of `sentence` may carry: each number it states (not one glued to a word or a
    bracket, `CO2e`, `Series2000`, `penetration(2)`: `stated_quantities`) with the unit written beside it (`16.5 days`
    → 16.5 with 天), a number after a currency sign with that currency at the scale its source declares (`$1,496.5`
    under `(in millions)` is 1,496.5 million USD; any scale where none is declared: `scales`), other numbers (a year,
    a page, a cell of a table whose unit is in its caption) with `unwritten`: the units its own line and its
    surroundings name, or none (`answer_schema`, from `units_around`); numbers that share their units in one group.
    A sentence without such a number cannot be the evidence of a value."""
    part = valued_part(sentence)
    signed = signed_currencies(part)
    groups: dict[tuple[str, ...], set] = {}
    for number, reading in stated_quantities(part):
        exact = reading is not None and math.isclose(reading.value, abs(number), rel_tol=1e-9)
        code = signed.get(abs(number))
        if exact:
            units = (reading.unit,)
        elif code:
            units = at_scales(tuple(currency_units(code)), scales)
        else:
            units = unwritten
        groups.setdefault(units, set()).add(json_number(number))
    return [(sorted(values), list(units)) for units, values in groups.items()]


_MONTH_DAY = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2}\b", re.I)


def states_a_quantity(sentence: str) -> bool:
    """Whether a line states a quantity of its own (pure). A caption, a heading or a header row does not: a year, a
    date's day or a scale's `000` is no quantity (`2019 | 2018`, `Year ended December 31,`, `US$’000`)."""
    numbers = stated_quantities(_MONTH_DAY.sub(" ", valued_part(sentence)))
    return any(not (n.is_integer() and (1900 <= n <= 2100 or n == 0)) for n, _ in numbers)


def units_around(lines: list[str]) -> frozenset[str]:
    """The units a number with no unit beside it may take from its surroundings, besides those its own line names
    (pure): the units the source's captions and headings name (`US$’000`, `Emissions reported in tonnes CO2e*`: lines
    that state no quantity of their own), the units and currencies its table's cells are written with, and none.
    Not the units another line states its own numbers in: a paragraph's `1.5% per annum`, or a `£1` in another row's
    label, says nothing of a life-expectancy cell. A table writes `$` and `%` on its first and total rows only, so
    the units its cells are written with count for all. A header row's cell that heads a column (`% of penetration`,
    which the column's cells carry beside their numbers: `… | % of penetration August 31, 2019: 50.8`) speaks for
    that column only, but for the currency it names (a table has one: `$ CHANGE` says its amounts are dollars); one
    no cell carries (`(in millions of €)` over the label column) for the whole table."""
    headed = " ".join(cell.rpartition(": ")[0] for line in lines if valued_part(line) != line
                      for cell in line.split(" | ")[1:])
    around = {""}
    for line in lines:
        part = valued_part(line)
        if part == line and not states_a_quantity(line):  # a row with an empty cell (`Dividend shares | 2018: –`)
            for cell in line.split(" | "):                 # is a row: its label names its own measure
                around |= {u for u in units_named(cell) if cell not in headed or in_a_currency(u)}
        if " | " in line:  # a table's cells: the units written beside them, and their currency signs
            around |= {reading.unit for _, reading in stated_quantities(part) if reading is not None}
            around |= {u for code in set(signed_currencies(part).values()) for u in currency_units(code)}
    return frozenset(around)


def answer_schema(sources: list[dict], with_location: bool) -> dict:
    """JSON schema of one answer to a question over `sources` (chunks with text, and for the
    application chain chunk_id / doc_id / page).

    With sources the answer is extractive: one alternative per sentence of the sources (and reading of its
    numbers), in which the evidence is that sentence, the value a number it writes, the unit the one written
    beside that number, and the location the chunk the sentence comes from. The model chooses the sentence
    and writes entity, metric and period; it can no longer quote one sentence and take another's number.
    No sources (the no-RAG arms) leaves evidence, value and location free but bounded: the model must
    still answer in the contract's shape."""
    short = {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS}
    head = {"entity": short, "metric": short,
            "period": {"type": "string", "minLength": 1, "maxLength": MAX_PERIOD_CHARS}}
    alternatives: dict[str, dict] = {}
    for src in sources:
        location = ({"chunk_id": {"const": src["chunk_id"]}, "doc_id": {"const": src["doc_id"]},
                     "page": {"const": int(src["page"])}} if with_location else {})
        lines = sentences(src["text"])
        around, scales = units_around(lines), scales_declared(src["text"])  # once per source
        for quote in lines:
            named = around | units_named(quote)
            unwritten = at_scales(tuple(u for u in _ANY_UNIT if u in named), scales)
            for values, units in _readings(quote, unwritten, scales):
                props = head | {"evidence": {"const": quote}, "value": {"enum": values}, "unit": {"enum": units}}
                alt = _object(props | location)
                alternatives.setdefault(json.dumps(alt, ensure_ascii=False, sort_keys=True), alt)
    if alternatives:
        return _one_of(list(alternatives.values()))
    props = head | {"evidence": {"type": "string", "minLength": 1, "maxLength": MAX_FREE_QUOTE_CHARS},
                    "value": {"type": "number"}, "unit": {"enum": sorted(UNITS)}}
    if with_location:
        props |= {"chunk_id": short, "doc_id": short, "page": {"type": "integer", "minimum": 1}}
    return _object(props)


_WRITTEN_METRIC = re.compile(r'"metric"\s*:\s*("(?:[^"\\]|\\.)*")')


def written_metric(text: str) -> str | None:
    """The metric an answer being written names, once its string is closed (pure): `{"entity": "X", "metric":
    "Total equity", "pe` → `Total equity`; None before (`{"entity": "X", "metric": "Total eq`)."""
    match = _WRITTEN_METRIC.search(text)
    return None if match is None else json.loads(match.group(1))


def _one_of(alternatives: list[dict]) -> dict:
    """A schema of one of `alternatives` (one alternative is itself)."""
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def _folded(text: str) -> str:
    return " ".join(text.casefold().split())


def _holds(text: str, words: str) -> bool:
    """Whether folded `text` holds folded `words` as words: not inside a Latin word or number (`co2e` is not in
    `kgco2e`); Chinese, written without spaces, has no such boundary."""
    return re.search(rf"(?<![0-9a-z]){re.escape(words)}(?![0-9a-z])", text) is not None


def names_metric(quote: str, metric: str, rows: bool, exactly: bool = False) -> bool:
    """Whether a quotable line names `metric` (pure; case and spacing aside). Among table rows (`rows`: the sources
    have some) a row names it by its label (`Total Other operating expenses | 2019: $166.3` names `Other operating
    expenses`), `exactly` when the label, or the last part of a qualified label, is the metric (`Equity: Total equity`
    is `Total equity`); a sentence does not name it: a paragraph that mentions `an average life expectancy for a
    pensioner retiring at age 65` is not the row that states it. In sources without rows (prose) a sentence names it
    by containing it. A metric is held as words, never inside one: `CO2e` is not named by `Ratio (KgCO2e per £1)`."""
    folded = _folded(metric)
    if not folded:
        return False
    if not rows:
        return _holds(_folded(quote), folded)
    if valued_part(quote) == quote:
        return False
    label = _folded(quote.split(" | ")[0])
    return folded in (label, label.rpartition(": ")[2]) if exactly else _holds(label, folded)


def narrowable(schema: dict | None) -> bool:
    """Whether `schema` is an extractive answer's with quotes to choose from (`answer_schema` with sources): one
    alternative per quote, each with its evidence fixed. A decision's, an agent turn's or a free answer's is not."""
    alternatives = (schema or {}).get("anyOf")
    return bool(alternatives) and all("const" in a.get("properties", {}).get("evidence", {}) for a in alternatives)


def naming_alternatives(schema: dict, metric: str) -> dict | None:
    """An answer schema narrowed to the quotes that name the metric the answer wrote (pure), or None when it stands:
    no quote names it, every quote does, or the schema is not an extractive answer's (`answer_schema` with sources).

    Why: the answer writes its metric before its evidence (the contract's key order), and a small model then quotes a
    near namesake: `"metric": "Total equity"` with the evidence `Total assets | 2019: 383,665`, where the row
    `Equity: Total equity | 2019: 228,144` names what it said it answers. When some quote names that metric, the
    evidence is one that does (`generate.evidence_names_metric`): the rows it is the label of when there are any
    (`Other operating expenses`, not `Total Other operating expenses`), else the rows whose label holds it, or in
    prose the sentences that do; when none does (`"metric": "Number"` over rows labelled `Options granted in the
    year`), the model's choice among all quotes stands."""
    if not narrowable(schema):
        return None
    alternatives = schema["anyOf"]
    quotes = {a["properties"]["evidence"]["const"] for a in alternatives}  # a quote has an alternative per unit group
    rows = any(valued_part(q) != q for q in quotes)
    naming = ({q for q in quotes if names_metric(q, metric, rows, exactly=True)}
              or {q for q in quotes if names_metric(q, metric, rows)})
    if not naming or naming == quotes:
        return None
    return _one_of([a for a in alternatives if a["properties"]["evidence"]["const"] in naming])


def answer_naming_metric(schema: dict | None, text: str) -> dict | None:
    """The narrowed schema a finished answer must be decoded again under (pure): its evidence does not name the
    metric it wrote while another quote does (`naming_alternatives`); None when the answer stands. For a decoder
    that cannot change a request's grammar mid-answer (vLLM): under greedy decoding the second answer is the one a
    narrowing decoder (`generate.MetricNarrowing`) gives in one pass, since the head is written under the same
    grammar both times."""
    metric = written_metric(text) if schema is not None else None
    narrowed = None if metric is None else naming_alternatives(schema, metric)
    if narrowed is None:
        return None
    try:
        evidence = json.loads(text).get("evidence")
    except (ValueError, AttributeError):
        return narrowed
    kept = {a["properties"]["evidence"]["const"] for a in narrowed.get("anyOf", [narrowed])}
    return None if isinstance(evidence, str) and evidence in kept else narrowed


def _object(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def decision_schema(cause_fields: list[str], actions: list[str] | None = None) -> dict:
    """JSON schema of a recommendation: the action one of the playbook's `actions` (a bounded free
    sentence without one), the cause one of the case's cause fields, the risk focus one of the
    contract's (`prompts.RISK_FOCUS`); keys in `prompts.DECISION_KEYS` order."""
    return _object({"action": {"enum": list(actions)} if actions else
                    {"type": "string", "minLength": 1, "maxLength": MAX_ACTION_CHARS},
                    "cause": {"enum": list(cause_fields)} if cause_fields else
                    {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS},
                    "risk_focus": {"enum": list(RISK_FOCUS)}})


def contract_valid(answer: dict | None, with_location: bool = False) -> bool:
    """Whether a parsed answer has exactly the contract's keys, in order, with values of the right type (pure)."""
    keys = ANSWER_KEYS + (LOCATION_KEYS if with_location else ())
    if not isinstance(answer, dict) or tuple(answer) != keys:
        return False
    text_ok = all(isinstance(answer[k], str) and answer[k].strip() for k in ("entity", "metric", "period", "evidence"))
    number_ok = isinstance(answer["value"], int | float) and not isinstance(answer["value"], bool)
    location_ok = not with_location or (isinstance(answer["chunk_id"], str) and isinstance(answer["doc_id"], str)
                                        and isinstance(answer["page"], int) and not isinstance(answer["page"], bool))
    return text_ok and number_ok and answer["unit"] in UNITS and location_ok


def compile_schema_text(compiler, schema_text: str):
    """A JSON schema's grammar as every CLAP decoder compiles it: compact separators (the training targets are
    `json.dumps` output, keys in contract order) and no keys the schema does not name. `GrammarCache` and the serving
    compile worker (`clap.serve.grammar_worker`) both compile through here, so their grammars are the same."""
    return compiler.compile_json_schema(schema_text, any_whitespace=False, strict_mode=True)


def schema_text(schema: dict) -> str:
    """The text a schema is compiled from and cached under (keys in the schema's own order)."""
    return json.dumps(schema, ensure_ascii=False, sort_keys=False)


class GrammarCache:
    """Compiles schemas for one tokenizer with xgrammar, once per distinct schema (the 4,096 used last are kept).
    `adopt` takes a grammar compiled elsewhere (`clap serve` compiles a request's schema in a child process it can
    stop); the cache is shared by the server's threads, so it is guarded by a lock."""

    SIZE = 4096

    def __init__(self, tokenizer, vocab_size: int):
        import threading
        from collections import OrderedDict

        import xgrammar as xgr

        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=2)
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()

    def has(self, schema: dict) -> bool:
        with self._lock:
            return schema_text(schema) in self._cache

    def adopt(self, schema: dict, compiled) -> None:
        """Keep `compiled` (the grammar of `schema`, compiled by `compile_schema_text` elsewhere) as if compiled here."""
        text = schema_text(schema)
        with self._lock:
            self._cache[text] = compiled
            self._cache.move_to_end(text)
            while len(self._cache) > self.SIZE:
                self._cache.popitem(last=False)

    def compiled(self, schema: dict):
        text = schema_text(schema)
        with self._lock:
            if (hit := self._cache.get(text)) is not None:
                self._cache.move_to_end(text)
                return hit
        compiled = compile_schema_text(self._compiler, text)  # outside the lock: a compile takes its time
        self.adopt(schema, compiled)
        return compiled

    def processor(self, schemas: list[dict]):
        """A fresh logits processor for one `generate` call, one grammar per row."""
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor([self.compiled(s) for s in schemas])
