import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clap.domain import quantities as nz


@pytest.mark.parametrize("value, unit, expected", [
    ("6,076.97", "万元", (6076.97, "万元")),
    ("６，０７６．９７", "万元", (6076.97, "万元")),
    ("(35.0)", "万元", (-35.0, "万元")),
    ("（35.0）", "RMB 10k", (-35.0, "万元")),
    ("-12", "10k yuan", (-12.0, "万元")),
    ("1.2亿", "元", (1.2, "亿元")),
    ("1.2亿", "", (1.2e8, "")),
    ("12.5%", "", (12.5, "%")),
    ("12.5", "percent", (12.5, "%")),
    ("3.4 million", "yuan", (3.4, "百万元")),
    ("1,234.5", "million yuan", (1234.5, "百万元")),
    (6076.97, "RMB 10k", (6076.97, "万元")),
    ("90", "tons", (90.0, "吨")),
])
def test_parse_quantity(value, unit, expected):
    q = nz.parse_quantity(value, unit)
    assert q is not None
    assert math.isclose(q.value, expected[0]) and q.unit == expected[1]


@pytest.mark.parametrize("value, unit", [("n/a", "万元"), ("", "万元"), ("12", "furlongs"), (float("nan"), "元"), (True, "元")])
def test_parse_quantity_rejects(value, unit):
    assert nz.parse_quantity(value, unit) is None


def test_unit_converted_equality():
    assert nz.same_quantity(nz.parse_quantity("6,076.97", "万元"), nz.parse_quantity("60,769,700", "元"))
    assert nz.same_quantity(nz.parse_quantity("1.2亿", "元"), nz.parse_quantity("12,000", "万元"))
    assert not nz.same_quantity(nz.parse_quantity("12", "%"), nz.parse_quantity("12", "万元"))
    assert not nz.same_quantity(nz.parse_quantity("6,076.97", "万元"), nz.parse_quantity("6,076.97", "元"))


@pytest.mark.parametrize("label, clean, changed", [
    ("6,076.97，原材料采购总额占比", "原材料采购总额占比", True),
    ("6,076.97 - share of raw material purchases", "share of raw material purchases", True),
    ("Revenue 1,234.5 million", "Revenue", True),
    ("12.5%：毛利率", "毛利率", True),
    ("Operating revenue", "Operating revenue", False),
    ("2023 revenue", "2023 revenue", False),
    ("Top 5 customers share", "Top 5 customers share", False),
    ("原材料采购总额占比", "原材料采购总额占比", False),
])
def test_clean_metric_label(label, clean, changed):
    assert nz.clean_metric_label(label) == (clean, changed)


def test_numbers_and_terms_in_text():
    text = "2023年，公司营业收入为6,076.97万元。上年同期为(35.0)万元。"
    assert nz.value_in_text(6076.97, text) and nz.value_in_text(-35.0, text)
    assert not nz.value_in_text(6076.98, text)
    assert nz.terms_in_text("营业收入", text) and not nz.terms_in_text("净利润", text)
    assert nz.terms_in_text("Gross margin", "Gross margin for FY2021 was 7.9%.")


@given(st.text(), st.text())
def test_parse_never_raises(value, unit):
    nz.parse_quantity(value, unit)
    nz.clean_metric_label(value)
    nz.numbers_in(value)
    nz.terms_in_text(value, unit)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_formatted_numbers_round_trip(x):
    x = round(x, 2)
    q = nz.parse_quantity(f"{x:,.2f}", "万元")
    assert q is not None and math.isclose(q.value, x, abs_tol=1e-6)


@pytest.mark.parametrize("value, unit, text, agrees", [
    (26309.45, "万元", "Net profit for FY2021 was 26,309.45 RMB 10k.", True),
    (26309.45, "元", "Net profit for FY2021 was 26,309.45 RMB 10k.", False),    # shifted by 10⁴
    (-6478.72, "万元", "Net profit for FY2021 was -6,478.72 RMB 10k.", True),
    (6076.97, "万元", "原材料采购总额为6,076.97万元，占比", True),                   # full-width comma ends the unit
    (6076.97, "万元", "原材料采购总额为6,076.97万元较上年增长", True),               # CJK words run on
    (22.5, "件", "2021年，公司平均交付延迟为22.5天。", False),
    (24.3, "%", "Gross margin for FY2021 was 24.3%.", True),
    (3.4, "百万元", "sales were 3.4 million yuan, up", True),
    (3400000, "元", "sales were 3.4 million yuan", None),                        # value not written as such
    (12.0, "吨", "revenue was 12", None),                                       # no unit beside it
])
def test_unit_agrees(value, unit, text, agrees):
    assert nz.unit_agrees(value, unit, text) is agrees


@pytest.mark.parametrize("text, expected", [
    ("Average delivery delay for FY2021 was 16.5 days.", [(2021.0, None), (16.5, ("天", 16.5))]),
    ("Net profit for FY2021 was -6,478.72 RMB 10k.", [(2021.0, None), (-6478.72, ("万元", 6478.72)), (10.0, None)]),  # the 10 of "10k" read as written
    ("2021年，公司平均交付延迟为22.5天。", [(2021.0, None), (22.5, ("天", 22.5))]),        # 年 is no unit
    ("原材料采购总额为6,076.97万元，占比12%", [(6076.97, ("万元", 6076.97)), (12.0, ("%", 12.0))]),
    ("Loss was (35.0) tons; page 2", [(-35.0, ("吨", 35.0)), (2.0, None)]),            # brackets are a minus
    ("sales were 3.4 million yuan", [(3.4, ("百万元", 3.4))]),                          # the multiplier word absorbed
    ("shipped 3.2 million tons", [(3.2, ("吨", 3.2e6))]),                              # ... or multiplied out
    ("No numbers here.", []),
])
def test_written_quantities(text, expected):
    got = [(n, None if q is None else (q.unit, q.value)) for n, q in nz.written_quantities(text)]
    assert got == expected


@pytest.mark.parametrize("header, period", [
    ("2019", "2019"), ("FY19**", "2019"), ("2019 (1)", "2019"), ("2019 Men", "2019"),
    ("Three Months Ended April 26, 2019", "2019"), ("Q1 2019", "2019Q1"), ("Net additions (losses) August 31, 2019", "2019"),
    ("% Change", None), ("Total", None), ("", None),     # no year: no period, not the folded text
])
def test_a_column_header_names_a_period_or_none(header, period):
    assert nz.header_period(header) == period


@pytest.mark.parametrize("text, signed", [
    ("Total sales | 2019: $1,496.5", {1496.5: "USD"}),
    ("Fixed Price | 2019: $ 1,452.4", {1452.4: "USD"}),                 # a space after the sign
    ("Net loss | 2019: $ (1,234)", {1234.0: "USD"}),                    # a negative in brackets: sign aside
    ("€12.3 and £4 and US$ 5 and HK$7", {12.3: "EUR", 4.0: "GBP", 5.0: "USD", 7.0: "HKD"}),  # longer signs first
    ("Other | 2019: 44.1", {}),                                         # no sign: nothing said of the currency
    ("costs 3$ each", {}),                                              # a sign after the number is not before it
])
def test_a_currency_sign_before_a_number_names_its_currency(text, signed):
    assert nz.signed_currencies(text) == signed


def test_an_amount_in_a_currency_has_that_currency_at_every_scale_and_per_share():
    assert nz.currency_units("USD") == ["USD", "USD/shares", "thousand USD", "million USD", "billion USD"]
    assert nz.currency_units("XYZ") == []


USD_ALL, EUR_ALL = (frozenset(nz.currency_units(c)) for c in ("USD", "EUR"))
CNY_ALL = frozenset(u for u, (dim, _) in nz.UNITS.items() if dim == "cny")


@pytest.mark.parametrize("text, named", [
    ("Total sales | 2019: $1,496.5", USD_ALL), ("US$’000", USD_ALL), ("amounts in USD", USD_ALL),
    ("in dollars", USD_ALL), ("U.S. dollars", USD_ALL), ("in millions of euros", EUR_ALL), ("€m", EUR_ALL),
    ("HK$1", frozenset(nz.currency_units("HKD"))),                     # the longer sign, not `$`
    ("单位：万元", CNY_ALL), ("RMB 5", CNY_ALL),
    ("Emissions reported in tonnes CO2e*", {"吨"}), ("Discount rate (%)", {"%"}), ("Primary service units", {"件"}),
    ("NO. OF RIGHTS", set()), ("Number of customers", set()), ("(in millions)", set()),   # a scale alone is no unit
    ("Europe grew", set()), ("don't 5 t", set()), ("", set()), (None, set()),        # no word inside a word, no lone t
])
def test_a_text_names_the_units_it_spells_and_a_currency_at_every_scale(text, named):
    assert nz.units_named(text) == frozenset({"", *named})


@pytest.mark.parametrize("text, scales", [
    ("(in millions)", {1e6}), ("($ in thousands)", {1e3}), ("Amounts in thousands of U.S. dollars", {1e3}),
    ("in € millions", {1e6}), ("in millions of euros", {1e6}), ("(In thousands, except per share data)", {1e3}),
    ("US$’000", {1e3}), ("$'000", {1e3}), ("$000", {1e3}), ("£000s", {1e3}), ("€m", {1e6}), ("£bn", {1e9}),
    ("in thousands; debt in millions", {1e3, 1e6}),                       # two declared: either
    ("IMFT sales were $731 million", set()),                              # a quantity's own unit declares nothing
    ("Revenue grew in 2019", set()), ("maintained 5,000 stores", set()), ("", set()), (None, set()),
])
def test_a_page_declares_the_scale_of_its_amounts_once(text, scales):
    assert nz.scales_declared(text) == frozenset(scales)


@pytest.mark.parametrize("unit, money", [
    ("million USD", True), ("USD/shares", True), ("万元", True), ("元", True), ("GBP", True),
    ("%", False), ("", False), ("shares", False), ("吨", False), ("天", False),
])
def test_a_unit_is_money_in_any_currency_at_any_scale_or_per_share(unit, money):
    assert nz.in_a_currency(unit) is money


@pytest.mark.parametrize("scales, kept", [
    ({1e6}, ["USD/shares", "million USD", "%", ""]),                      # per share and other units stay
    ({1e3, 1e6}, ["USD/shares", "thousand USD", "million USD", "千元", "%", ""]),
    (set(), [*nz.currency_units("USD"), "元", "千元", "万元", "%", ""]),     # nothing declared: nothing ruled out
    ({1e3}, ["USD/shares", "thousand USD", "千元", "%", ""]),             # yuan too: `RMB’000` is 千元
])
def test_an_amount_keeps_only_the_declared_scales(scales, kept):
    units = (*nz.currency_units("USD"), "元", "千元", "万元", "%", "")
    assert list(nz.at_scales(units, frozenset(scales))) == [u for u in units if u in kept]


@pytest.mark.parametrize("text, stated", [
    ("CO2 equivalent", []), ("Series2000 revenue", []), ("% of penetration(2)(3)", []),   # names and footnote markers
    ("COVID-19 hit 12% of sales", [12.0]), ("FY19 was 45.1 days", [45.1]), ("Q3 2019", [2019.0]),
    ("2019: (1.6)", [2019.0, -1.6]), ("$(9,982)", [-9982.0]), ("毛利率为42.7%。", [42.7]),   # a CJK word is no name
    ("332,291.58 RMB 10k", [332291.58, 10.0]),
    ("x " + "9" * 400 + " and 5", [5.0]),                  # a number past float's range is no quantity, and no crash
])
def test_a_text_states_the_numbers_not_glued_to_a_name(text, stated):
    assert [n for n, _ in nz.stated_quantities(text)] == stated
    assert len(nz.stated_quantities(text)) <= len(nz.written_quantities(text))
