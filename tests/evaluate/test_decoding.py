import json

import jsonschema
import pytest

from clap.domain import prompts
from clap.domain import quantities as nz
from clap.evaluate.decoding import answer_schema, contract_valid, sentences
from clap.evaluate.generate import Engine
from clap.evaluate.metrics import parse_answer


@pytest.mark.parametrize("text, expected", [
    ("Apex Co. Annual Report 2021, page 1. Revenue for FY2021 was 332,291.58 RMB 10k. Margin was 7.9%.",
     ["Apex Co. Annual Report 2021, page 1.", "Revenue for FY2021 was 332,291.58 RMB 10k.", "Margin was 7.9%."]),
    ("2024年，公司毛利率为42.7%。上年同期（2023年）该指标为38.1%。",
     ["2024年，公司毛利率为42.7%。", "上年同期（2023年）该指标为38.1%。"]),
    ("Same. Same. Other!", ["Same.", "Other!"]),            # duplicates once, order kept
    ("No end mark here", ["No end mark here"]),
    ("v1.2 shipped; then 3.4 followed", ["v1.2 shipped;", "then 3.4 followed"]),
    ("", []),
])
def test_sentences(text, expected):
    assert sentences(text) == expected


CHUNKS = [{"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."},
          {"chunk_id": "c2-p3", "doc_id": "c2", "page": 3, "text": "毛利率为42.7%。"}]


def test_answer_schema_is_built_from_what_the_model_was_shown():
    s = answer_schema(CHUNKS, with_location=True)
    alts = s["anyOf"]
    for alt in alts:
        assert list(alt["properties"]) == [*prompts.ANSWER_KEYS, *prompts.LOCATION_KEYS] == alt["required"]
        assert alt["additionalProperties"] is False
    picks = [(a["properties"]["evidence"]["const"], a["properties"]["value"]["enum"], a["properties"]["unit"]["enum"],
              a["properties"]["chunk_id"]["const"], a["properties"]["page"]["const"]) for a in alts]
    written = sorted(nz.units_named("Revenue was 1,200.5 RMB 10k."))  # its line's RMB at every scale, and none
    assert picks == [  # each sentence with its own numbers, each number with the unit written beside it
        ("Revenue was 1,200.5 RMB 10k.", [1200.5], ["万元"], "c1-p1", 1),
        ("Revenue was 1,200.5 RMB 10k.", [10], written, "c1-p1", 1),   # the 10 of "10k": no unit follows it
        ("Margin was 7%.", [7], ["%"], "c1-p1", 1),                    # as targets write it (7 not 7.0)
        ("毛利率为42.7%。", [42.7], ["%"], "c2-p3", 3)]
    assert answer_schema(CHUNKS[1:], with_location=False)["properties"]["value"] == {"enum": [42.7]}  # one: no anyOf
    free = answer_schema([], with_location=True)["properties"]  # the no-RAG arms: bounded, not extractive
    assert free["evidence"]["maxLength"] > 0 and free["value"] == {"type": "number"} and "enum" not in free["chunk_id"]
    no_numbers = answer_schema([{"text": "Nothing to quote."}], with_location=False)["properties"]
    assert no_numbers["value"] == {"type": "number"}  # no sentence can carry a value: the bounded free shape


@pytest.mark.parametrize("answer, admitted", [
    ({"evidence": "Revenue was 1,200.5 RMB 10k.", "value": 1200.5, "unit": "万元"}, True),
    ({"evidence": "Revenue was 1,200.5 RMB 10k.", "value": 1200.5, "unit": "元"}, False),  # not the unit written
    ({"evidence": "Revenue was 1,200.5 RMB 10k.", "value": 7, "unit": "%"}, False),        # another sentence's number
    ({"evidence": "Margin was 7%.", "value": 7, "unit": "%", "chunk_id": "c2-p3", "page": 3}, False),  # wrong chunk
    ({"evidence": "Revenue was 1,200.5.", "value": 1200.5, "unit": "万元"}, False),         # not a sentence shown
])
def test_answer_schema_ties_value_unit_and_location_to_the_quote(answer, admitted):
    full = {"entity": "A", "metric": "m", "period": "2021", "chunk_id": "c1-p1", "doc_id": "c1", "page": 1} | answer
    doc_id = "c2" if full["chunk_id"] == "c2-p3" else "c1"
    ordered = {k: full[k] for k in (*prompts.ANSWER_KEYS, *prompts.LOCATION_KEYS)} | {"doc_id": doc_id}
    errors = list(jsonschema.Draft202012Validator(answer_schema(CHUNKS, with_location=True)).iter_errors(ordered))
    assert (not errors) is admitted


GOOD = {"entity": "A", "metric": "m", "period": "2021", "evidence": "e", "value": 1.5, "unit": "%"}


@pytest.mark.parametrize("answer, with_location, ok", [
    (GOOD, False, True),
    ({**GOOD, "value": "1.5"}, False, False),             # a string is not a number
    ({**GOOD, "value": True}, False, False),              # nor is a bool
    ({**GOOD, "unit": "RMB"}, False, False),              # not a canonical unit
    ({**GOOD, "entity": " "}, False, False),              # empty label
    ({k: GOOD[k] for k in reversed(GOOD)}, False, False),  # keys out of contract order
    ({**GOOD, "extra": 1}, False, False),
    ({**GOOD, "chunk_id": "c", "doc_id": "d", "page": 2}, True, True),
    ({**GOOD, "chunk_id": "c", "doc_id": "d", "page": "2"}, True, False),
    (None, False, False),
])
def test_contract_valid(answer, with_location, ok):
    assert contract_valid(answer, with_location) is ok


def test_constrained_generation_keeps_a_random_model_inside_the_schema(tiny_dir):
    """A random model answers garbage; under the grammar the garbage is a contract-valid, extractive answer."""
    engine = Engine(tiny_dir)
    convs = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("What was revenue?", CHUNKS)),
             prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("毛利率?", CHUNKS[1:]))]
    schemas = [answer_schema(CHUNKS, True), answer_schema(CHUNKS[1:], True)]
    free = engine.generate(convs, use_adapter=False, max_new_tokens=40, batch_size=2, progress=False)
    assert not any(contract_valid(parse_answer(g.text), True) for g in free)
    gens = engine.generate(convs, use_adapter=False, max_new_tokens=400, batch_size=2, progress=False, schemas=schemas)
    for g, schema in zip(gens, schemas):
        answer = json.loads(g.text)
        assert contract_valid(answer, with_location=True), g.text
        jsonschema.validate(answer, schema)  # the quote, its number and unit, its chunk: one alternative
    with pytest.raises(ValueError, match="1 schemas for 2 conversations"):
        engine.generate(convs, use_adapter=False, schemas=schemas[:1], progress=False)


def test_constrained_batches_decode_as_one_by_one(tiny_dir):
    """Token by token (`jump_forward` off, the default), the engine's own loop — per-row grammars in a left-padded
    batch, rows leaving it as their answers close — gives the answers of a one-prompt-at-a-time
    `generate` loop with xgrammar's logits processor."""
    from clap.evaluate.generate import plain_generate_loop

    engine = Engine(tiny_dir)
    convs = [prompts.messages(prompts.system_extract(["万元", "%"]), prompts.extraction_prompt("Revenue?", c)) for c in CHUNKS]
    schemas = [answer_schema([c], with_location=False) for c in CHUNKS]
    got = [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=60, batch_size=2, progress=False,
                                           schemas=schemas)]
    assert got == plain_generate_loop(engine.model, engine.tok, convs, 60, schemas, engine.grammars)


def test_jump_forward_appends_forced_text_in_one_pass(tiny_dir, monkeypatch):
    """With jump-forward, what the grammar forces costs one decoder pass, not one per token: far fewer
    passes than answer tokens, and every answer still meets its schema."""
    engine = Engine(tiny_dir, jump_forward=True)
    decoder = engine.model.model
    passes = []
    monkeypatch.setattr(decoder, "forward", lambda *a, _f=decoder.forward, **k: passes.append(1) or _f(*a, **k))
    convs = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("What was revenue?", CHUNKS)),
             prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("毛利率?", CHUNKS[1:]))]
    schemas = [answer_schema(CHUNKS, True), answer_schema(CHUNKS[1:], True)]
    gens = engine.generate(convs, use_adapter=False, max_new_tokens=400, batch_size=2, progress=False, schemas=schemas)
    for g, schema in zip(gens, schemas):
        jsonschema.validate(json.loads(g.text), schema)
    assert len(passes) < max(g.new_tokens for g in gens) / 2


@pytest.mark.parametrize("prompt, fields", [
    ('Case: x\nCause fields: {"b": 1, "a": 30}', ["a", "b"]),
    ("Case: x\nCause fields: not json", []),
    ("Case: no fields", []),
])
def test_decision_schema_offers_the_case_s_cause_fields(prompt, fields):
    from clap.domain.prompts import DECISION_KEYS, RISK_FOCUS, decision_cause_fields
    from clap.evaluate.decoding import decision_schema

    assert decision_cause_fields(prompt) == fields
    schema = decision_schema(decision_cause_fields(prompt))
    assert tuple(schema["properties"]) == DECISION_KEYS and schema["additionalProperties"] is False
    assert schema["properties"]["risk_focus"]["enum"] == list(RISK_FOCUS)
    assert schema["properties"]["cause"].get("enum", None) == (fields or None)
    assert decision_schema(fields, ["Act"])["properties"]["action"] == {"enum": ["Act"]}


@pytest.mark.parametrize("sentence, values", [
    ("Total sales | 2019: $1,496.5 | 2018: $1,202.9", "$1,496.5 | $1,202.9"),   # headers and label state no value
    ("Operating leases (1) | 2019 (1): 27.0", "27.0"),
    ("Current assets | 2,909 | 4,585", "Current assets | 2,909 | 4,585"),    # no headers: as it was
    ("Revenue grew 12% in 2019: a record.", "Revenue grew 12% in 2019: a record."),  # prose is all values
])
def test_a_qualified_table_line_states_only_the_numbers_after_its_headers(sentence, values):
    from clap.evaluate.decoding import valued_part

    assert valued_part(sentence) == values



TABLE = {"text": "Years Ended September 30,\nTotal sales | 2019: $1,496.5\nOther | 2019: 44.1\n"
                 "Total sales | % Change: 24.4%\nReported as CO2 equivalent\nNet additions | % of penetration(2)(3)\n"
                 "Series2000 revenue was 12 days late"}


@pytest.mark.parametrize("evidence, values, units", [
    ("Total sales | 2019: $1,496.5", [1496.5], nz.currency_units("USD")),   # `$`: dollars at any scale, never euros
    ("Other | 2019: 44.1", [44.1], sorted(["", "%", *nz.currency_units("USD")])),  # no sign: the table's units,
                                                                             # not the days a sentence counts
    ("Total sales | % Change: 24.4%", [24.4], ["%"]),
    ("Series2000 revenue was 12 days late", [12], ["天"]),                   # the model's name is no value
    ("Reported as CO2 equivalent", None, None),                            # a name's digit: nothing to state
    ("Net additions | % of penetration(2)(3)", None, None),                # footnote markers: nothing to state
])
def test_a_quote_offers_the_numbers_it_states_with_the_units_its_signs_allow(evidence, values, units):
    alts = [a["properties"] for a in answer_schema([TABLE], with_location=False)["anyOf"]
            if a["properties"]["evidence"]["const"] == evidence]
    assert [(a["value"]["enum"], a["unit"]["enum"]) for a in alts] == ([(values, units)] if values else [])


@pytest.mark.parametrize("evidence, value, unit, admitted", [
    ("Total sales | 2019: $1,496.5", 1496.5, "million USD", True),
    ("Total sales | 2019: $1,496.5", 1496.5, "million EUR", False),       # `$` is not euros
    ("Total sales | 2019: $1,496.5", 1496.5, "", False),                  # nor a count
    ("Other | 2019: 44.1", 44.1, "million USD", True),
    ("Other | 2019: 44.1", 44.1, "", True),
    ("Reported as CO2 equivalent", 2, "", False),                         # CO2's 2
    ("Net additions | % of penetration(2)(3)", -3, "million USD", False),  # a footnote's (3)
])
def test_an_answer_states_a_number_its_quote_states(evidence, value, unit, admitted):
    answer = {"entity": "A", "metric": "m", "period": "2019", "evidence": evidence, "value": value, "unit": unit}
    errors = list(jsonschema.Draft202012Validator(answer_schema([TABLE], with_location=False)).iter_errors(answer))
    assert (not errors) is admitted


RIGHTS = {"text": "2019 | 2018\nNO. OF RIGHTS\nOutstanding at end of period | 2019: 13,477,758"}


@pytest.mark.parametrize("unit, admitted", [
    ("", True),                                                          # a count: the page writes no unit
    ("件", False), ("%", False), ("千克", False),                          # units the page never writes
    ("million USD", False), ("USD", False), ("万元", False), ("USD/shares", False),  # no currency on the page
])
def test_a_number_without_a_unit_beside_it_takes_one_its_source_writes_or_none(unit, admitted):
    answer = {"entity": "A", "metric": "m", "period": "2019", "evidence": "Outstanding at end of period | 2019: 13,477,758",
              "value": 13477758, "unit": unit}
    errors = list(jsonschema.Draft202012Validator(answer_schema([RIGHTS], with_location=False)).iter_errors(answer))
    assert (not errors) is admitted
    # the same line under a caption that writes `$'000` is thousands of dollars: not euros, not another scale
    money = {"text": "$'000\n" + RIGHTS["text"]}
    dollars = jsonschema.Draft202012Validator(answer_schema([money], with_location=False))
    assert not list(dollars.iter_errors({**answer, "unit": "thousand USD"}))
    for other in ("thousand EUR", "USD", "million USD"):
        assert list(dollars.iter_errors({**answer, "unit": other}))


# Real report pages (TAT-QA dev, MIT), shortened: what a cell's surroundings say of its unit.
BAD_DEBT = ("Year ended December 31,\n2019 | 2018 | 2017\nBeginning balance | 2019: $(1.3)\nBad debt expense | 2019: (1.6)\n"
            "The rollforward of allowance for doubtful accounts is as follows (in millions):")
LIFE = ("2019 | 2018\nMen | Women\nYears\nMember aged 65 (current life expectancy) | 2019 Men: 86.8\n"
        "The Group has assumed a long-term rate of improvement of 1.5% per annum.")
OPTIONS = ("2019 | 2018\nNumber\nOptions granted in the year | 2019: 452,695\nDividend shares awarded | 2019: 9,749\n"
           "Dividend shares awarded | 2018: –\n"
           "The weighted average market value per ordinary share was 445.0p.")
EMISSIONS = ("Emissions reported in tonnes CO2e*\nEmissions from: | FY19** | FY18**\n"
             "Total gross emissions (Scope 1 and 2) | FY19**: 87,128\nRatio (KgCO2e per £1 sales revenue) | FY19**: 0.060")
SHARE = "(In thousands, except per share data)\nRevenue | 2019: $5,300\nEarnings per share | 2019: $0.52"
PERCENT = "2019 | 2018\nSales | 2019: 100.0 %\nGross profit | 2019: 40.0"
MIXED = "Revenue | 2019: $12,000\nIMFT sales to Intel were $731 million."
PENETRATION = ("Net additions (losses) | % of penetration(2)(3)\nAugust 31, 2019 | August 31, 2018 (1)\n"
               "Internet service customers | Net additions (losses) August 31, 2019: 21,189\n"
               "Internet service customers | % of penetration(2)(3) August 31, 2019: 50.8")
EUROS = "(in millions of €) | 2019 | 2018\nOrders | 2019: 12,749\nOrders | 2018: 11,875"
BCE = "OPERATING REVENUES | Q4 2019 | $ CHANGE | % CHANGE\nBell Wireless | Q4 2019: 2,493\nBell Wireless | $ CHANGE: 86\n" \
      "Bell Wireless | % CHANGE: 3.6%"


@pytest.mark.parametrize("text, evidence, value, units", [
    (BAD_DEBT, "Bad debt expense | 2019: (1.6)", -1.6, ["", "USD/shares", "million USD"]),  # the `$` rows' currency,
    (BAD_DEBT, "Beginning balance | 2019: $(1.3)", -1.3, ["USD/shares", "million USD"]),  # at the declared scale
    (LIFE, "Member aged 65 (current life expectancy) | 2019 Men: 86.8", 86.8, [""]),  # a paragraph's % is its own
    (OPTIONS, "Options granted in the year | 2019: 452,695", 452695, [""]),        # another row's label names shares
    (EMISSIONS, "Total gross emissions (Scope 1 and 2) | FY19**: 87,128", 87128, ["", "吨"]),  # the caption's tonnes,
    (EMISSIONS, "Ratio (KgCO2e per £1 sales revenue) | FY19**: 0.060", 0.06, nz.currency_units("GBP") + ["", "吨"]),
    (SHARE, "Earnings per share | 2019: $0.52", 0.52, ["USD/shares", "thousand USD"]),  # per share at any scale
    (PERCENT, "Gross profit | 2019: 40.0", 40, ["", "%"]),                      # `%` on a table's first row
    (MIXED, "Revenue | 2019: $12,000", 12000, nz.currency_units("USD")),        # `$731 million` declares nothing
    (PENETRATION, "Internet service customers | Net additions (losses) August 31, 2019: 21,189", 21189, [""]),  # the
    (PENETRATION, "Internet service customers | % of penetration(2)(3) August 31, 2019: 50.8", 50.8, ["", "%"]),  # %
    (EUROS, "Orders | 2019: 12,749", 12749, ["", "EUR/shares", "million EUR"]),  # column's header is its own; a
                                                                                # header row's caption is the table's
    (BCE, "Bell Wireless | Q4 2019: 2,493", 2493, ["", *nz.currency_units("USD"), "%"]),  # `$ CHANGE`: the table's
                                                                                        # currency; the cells' `%`
])
def test_a_cell_takes_the_units_its_table_and_captions_write_at_the_scale_they_declare(text, evidence, value, units):
    alts = [a["properties"] for a in answer_schema([{"text": text}], with_location=False)["anyOf"]
            if a["properties"]["evidence"]["const"] == evidence and value in a["properties"]["value"]["enum"]]
    assert [sorted(a["unit"]["enum"], key=str) for a in alts] == [sorted(units, key=str)]


@pytest.mark.parametrize("line, states", [
    ("2019 | 2018 | 2017", False), ("Year ended December 31,", False), ("US$’000", False), ("Years", False),
    ("Emissions reported in tonnes CO2e*", False), ("Bad debt expense | 2019: (1.6)", True),
    ("Green tariff | FY19**: -27,603", True), ("long-term rate of improvement of 1.5% per annum", True),
])
def test_a_caption_header_row_or_heading_states_no_quantity_of_its_own(line, states):
    from clap.evaluate.decoding import states_a_quantity

    assert states_a_quantity(line) is states


def test_a_number_past_float_s_range_is_no_value_and_no_crash():
    props = answer_schema([{"text": "Revenue was $" + "9" * 400 + " and 5 days."}], with_location=False)["properties"]
    assert props["value"] == {"enum": [5]} and props["unit"] == {"enum": ["天"]}


# Shortened real pages (TAT-QA dev, MIT: benchmarks/data/tatqa) and a demo report's prose.
PARENT_EQUITY = """US$’000
Total assets | 2019: 383,665
Total assets | 2018: 336,032
Total current liabilities | 2019: 154,619
Equity: Retained profits | 2019: 79,918
Equity: Total equity | 2019: 228,144
Equity: Total equity | 2018: 243,668
Altium Limited has provided financial guarantees amounting to US$261,518 (2018: US$283,752)."""
EMISSIONS = """Emissions reported in tonnes CO2e*
Combustion of fuel and operation of facilities (Scope 1) | FY19**: 59,495
Total gross emissions (Scope 1 and 2) | FY19**: 87,128
Green tariff | FY19**: -27,603
Total net emissions (Scope 1 and 2) | FY19**: 59,525"""
LIFE = """Years
Member aged 65 (current life expectancy) | 2019 Men: 86.8
Member aged 45 (life expectancy at age 65) | 2019 Men: 88.5
These tables translate into an average life expectancy for a pensioner retiring at age 65 as follows:"""
OPTIONS = """Number
Options granted in the year | 2019: 452,695
Outstanding at 31 March | 2019: 2.978,478
The number of options outstanding and exercisable as at 31 March was as follows:"""
OPEX = """Total Other operating expenses | 2019 (1): $166.3
Other operating expenses | 2019 (1): 27.0
Net losses on sales or disposals of assets | 2019 (1): 45.1"""
PROSE = "2022年，公司原材料采购总额为223,654.50万元。2022年，公司期末原材料库存为24,823.7吨。"


def _quotes(schema: dict | None) -> set[str] | None:
    if schema is None:
        return None
    return {a["properties"]["evidence"]["const"] for a in schema.get("anyOf", [schema])}


@pytest.mark.parametrize("text, written", [
    ('{"entity": "The company", "metric": "Total equity", "pe', "Total equity"),
    ('{"entity": "The company", "metric": "Total eq', None),           # still open
    ('{"entity": "The company", "metric": ', None),
    ('{"entity": "a \\"metric\\": \\"x\\"", "metric": "Sales \\"net\\"", ', 'Sales "net"'),  # an escaped quote
    ('{"entity": "公司", "metric": "期末原材料库存", ', "期末原材料库存"),
])
def test_the_written_metric_is_read_once_its_string_closes(text, written):
    from clap.evaluate.decoding import written_metric

    assert written_metric(text) == written


@pytest.mark.parametrize("text, metric, quotes", [
    # rows name a metric by their label: the row the answer says it answers, not its near namesake
    (PARENT_EQUITY, "Total equity", {"Equity: Total equity | 2019: 228,144", "Equity: Total equity | 2018: 243,668"}),
    (PARENT_EQUITY, "  total   EQUITY ", {"Equity: Total equity | 2019: 228,144",
                                          "Equity: Total equity | 2018: 243,668"}),  # case and spacing aside
    (PARENT_EQUITY, "Total assets", {"Total assets | 2019: 383,665", "Total assets | 2018: 336,032"}),
    (EMISSIONS, "Total gross emissions (Scope 1 and 2)", {"Total gross emissions (Scope 1 and 2) | FY19**: 87,128"}),
    (EMISSIONS, "Scope 1", {"Combustion of fuel and operation of facilities (Scope 1) | FY19**: 59,495",
                            "Total gross emissions (Scope 1 and 2) | FY19**: 87,128",
                            "Total net emissions (Scope 1 and 2) | FY19**: 59,525"}),
    (OPEX, "Other operating expenses", {"Other operating expenses | 2019 (1): 27.0"}),  # the row it is the label of
    (OPEX, "operating expenses", {"Other operating expenses | 2019 (1): 27.0",           # else those holding it
                                  "Total Other operating expenses | 2019 (1): $166.3"}),
    (PARENT_EQUITY, "Net income", None),          # no quote names it: every quote stays open
    (EMISSIONS + "\nRatio (KgCO2e per £1 sales revenue) | FY19**: 0.060", "CO2e", None),  # never inside a word
    (EMISSIONS, "emission", None),
    (PROSE, "原材料库存", {"2022年，公司期末原材料库存为24,823.7吨。"}),  # Chinese has no word boundary to keep
    (PARENT_EQUITY, "", None),
    (LIFE, "Average life expectancy", None),      # among rows only a paragraph mentions it: not the row stating it
    (OPTIONS, "Number", None),                    # a header line and a paragraph, no row label
    (LIFE, "life expectancy", {"Member aged 65 (current life expectancy) | 2019 Men: 86.8",
                               "Member aged 45 (life expectancy at age 65) | 2019 Men: 88.5"}),  # rows, not the paragraph
    (PROSE, "2022年", None),                      # every quote names it: nothing to narrow
    (PROSE, "期末原材料库存", {"2022年，公司期末原材料库存为24,823.7吨。"}),  # prose: a sentence names it by containing it
])
def test_the_evidence_is_narrowed_to_the_quotes_that_name_the_written_metric(text, metric, quotes):
    from clap.evaluate.decoding import naming_alternatives

    narrowed = naming_alternatives(answer_schema([{"text": text}], with_location=False), metric)
    assert _quotes(narrowed) == quotes


def test_only_an_extractive_answer_s_schema_narrows():
    from clap.evaluate.decoding import decision_schema, naming_alternatives

    assert naming_alternatives(answer_schema([], with_location=False), "Revenue") is None       # no sources
    assert naming_alternatives(answer_schema([{"text": "Revenue was 5%."}], with_location=False), "Revenue") is None
    assert naming_alternatives(decision_schema(["supplier"], ["Audit it."]), "supplier") is None
    located = answer_schema([{"chunk_id": "c1", "doc_id": "d", "page": 2, "text": PARENT_EQUITY}], with_location=True)
    kept = naming_alternatives(located, "Total equity")["anyOf"]
    assert {a["properties"]["chunk_id"]["const"] for a in kept} == {"c1"}   # the location travels with its quote


@pytest.mark.parametrize("answer, again", [
    ({"metric": "Total equity", "evidence": "Total assets | 2019: 383,665"}, True),     # a near namesake: again
    ({"metric": "Total equity", "evidence": "Equity: Total equity | 2018: 243,668"}, False),  # names it: stands
    ({"metric": "Net income", "evidence": "Total assets | 2019: 383,665"}, False),      # no quote names it
])
def test_a_finished_answer_is_decoded_again_only_when_its_evidence_misses_a_named_metric(answer, again):
    from clap.evaluate.decoding import answer_naming_metric

    schema = answer_schema([{"text": PARENT_EQUITY}], with_location=False)
    text = json.dumps({"entity": "The company", **answer, "period": "2019", "value": 1, "unit": ""})
    narrowed = answer_naming_metric(schema, text)
    assert (narrowed is not None) is again
    if again:
        assert _quotes(narrowed) == {"Equity: Total equity | 2019: 228,144", "Equity: Total equity | 2018: 243,668"}
    assert answer_naming_metric(None, text) is None
    assert answer_naming_metric(schema, '{"entity": "The company", "metr') is None   # cut before its metric


def test_only_an_answer_with_quotes_to_choose_from_is_narrowable():
    from clap.evaluate.decoding import decision_schema, narrowable

    assert narrowable(answer_schema([{"text": PARENT_EQUITY}], with_location=False))
    assert not narrowable(answer_schema([{"text": "Revenue was 5%."}], with_location=False))  # one quote: nothing to pick
    assert not narrowable(answer_schema([], with_location=False))
    assert not narrowable(decision_schema(["supplier"], ["Audit it."]))
    assert not narrowable({"anyOf": [{"type": "object", "properties": {"name": {"const": "lookup"}}}]})  # a tool call
    assert not narrowable(None)
