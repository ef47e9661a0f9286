"""Inline XBRL: facts with entity, concept and label, period, unit, value after format, scale and sign, and the chunk
that shows them, in both namespaces, prefixed or default; each mistake of a filing quarantined with its reason."""

from decimal import Decimal

import pytest
from lxml import etree
from tests.helpers.documents import IXT, ixbrl_document

from clap.data.ingest import ixbrl
from clap.data.ingest.blocks import read_document
from clap.data.ingest.chunking import chunk_blocks

TR1, TR4 = IXT["1.0"], IXT["1.1"]


def extract(tmp_path, text):
    path = tmp_path / "filing.xhtml"
    path.write_text(text, encoding="utf-8")
    doc = read_document(path)
    chunks, where = chunk_blocks(doc.blocks, 800)
    facts, bad = ixbrl.extract_facts(doc, [f"c{w}" for w in where], doc_id="d", batch="b1", lang="en", file="f.xhtml")
    return doc, chunks, facts, bad


@pytest.mark.parametrize("version", ["1.0", "1.1"])
@pytest.mark.parametrize("prefixed", [True, False])
def test_every_numeric_fact_resolved(tmp_path, version, prefixed):
    doc, chunks, facts, bad = extract(tmp_path, ixbrl_document(version, prefixed))
    assert doc.xbrl is not None and bad == []
    got = {(f["metric"], f["period"]): (f["value"], f["unit"], f["page"]) for f in facts}
    assert got == {("Revenues", "FY2024"): (1234, "million USD", 1),
                   ("Revenues (Europe member)", "FY2024"): (456, "million USD", 1),
                   ("Net income loss", "FY2024"): (-35, "million USD", 2),
                   ("Current assets", "2024-12-31"): (2909, "million USD", 2),
                   ("Current assets", "2023-12-31"): (4585, "million USD", 2),
                   ("Total assets", "2024-12-31"): (9120, "million USD", 2),
                   ("Total assets", "2023-12-31"): (8775, "million USD", 2)}
    row = next(f for f in facts if f["metric"] == "Current assets" and f["period"] == "2024-12-31")
    assert row["entity"] == "Acme Holdings plc" and row["entity_identifier"] == "0000123456"
    assert row["concept"] == "us-gaap:AssetsCurrent" and row["value_scaled"] == "2909000000"
    assert row["evidence"] == "Current assets | 2024: 2,909 | 2023: 4,585"
    assert row["evidence"] in chunks[int(row["chunk_id"][1:])].text  # the chunk that shows it
    loss = next(f for f in facts if f["concept"] == "us-gaap:NetIncomeLoss")
    assert loss["value_scaled"] == "-35000000" and loss["period_start"] == "2024-01-01"
    assert len({f["record_id"] for f in facts}) == len(facts)


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_a_filings_mistakes_are_quarantined_never_guessed(tmp_path, version):
    _, _, facts, bad = extract(tmp_path, ixbrl_document(version, True, broken=True))
    assert len(facts) == 7
    assert sorted(b["rule"] for b in bad) == ["hidden_fact", "nil_fact", "unknown_context", "unknown_format"]
    assert all(b["stage"] == "ingest" and b["file"] == "f.xhtml" and b["original"]["why"] for b in bad)


NS = {"ixt": TR4, "old": TR1, "sec": "http://www.sec.gov/inlineXBRL/transformation/2015-08-31"}


@pytest.mark.parametrize("text, fmt, value", [
    ("1,234.5", "ixt:num-dot-decimal", Decimal("1234.5")),
    ("1 234,5", "ixt:num-comma-decimal", Decimal("1234.5")),
    ("1.234.567,89", "ixt:numcommadecimal", Decimal("1234567.89")),
    ("-", "ixt:fixed-zero", Decimal(0)),
    ("—", "ixt:fixed-zero", Decimal(0)),
    ("5 dollars 25 cents", "ixt:num-unit-decimal", Decimal("5.25")),
    ("5 pounds 5 pence", "ixt:num-unit-decimal", Decimal("5.05")),
    ("1,234.5", "old:numcommadot", Decimal("1234.5")),
    ("1.234,5", "old:numdotcomma", Decimal("1234.5")),
    ("-", "old:numdash", Decimal(0)),
    ("1234.5", None, Decimal("1234.5")),
])
def test_numeric_formats(text, fmt, value):
    assert ixbrl.read_number(text, fmt, NS) == value


@pytest.mark.parametrize("text, fmt, rule", [
    ("twelve", "sec:numwordsen", "unknown_format"),       # a registry CLAP does not read
    ("12", "ixt:num-roman", "unknown_format"),            # not a format of the registry
    ("12", "nope:num-dot-decimal", "unknown_format"),      # undeclared prefix
    ("1,234", None, "format_mismatch"),                    # no format: a plain decimal only
    ("(35)", "ixt:num-dot-decimal", "format_mismatch"),   # the sign is an attribute, not text
    ("12", "ixt:fixed-zero", "format_mismatch"),
    ("1.234,5", "old:numcommadot", "format_mismatch"),
])
def test_formats_that_do_not_read(text, fmt, rule):
    with pytest.raises(ixbrl.FactError) as err:
        ixbrl.read_number(text, fmt, NS)
    assert err.value.rule == rule


@pytest.mark.parametrize("measure, shown, scale, unit, value", [
    ("USD", Decimal(2909), 6, "million USD", Decimal(2909)),
    ("EUR", Decimal(12), 3, "thousand EUR", Decimal(12)),
    ("GBP", Decimal(7), 0, "GBP", Decimal(7)),
    ("USD", Decimal(7), 2, "USD", Decimal(700)),           # no word for the scale: multiplied out
    ("pure", Decimal("12.5"), -2, "%", Decimal("12.5")),
    ("pure", Decimal("0.125"), 0, "", Decimal("0.125")),
    ("shares", Decimal(3), 6, "shares", Decimal(3000000)),
    ("USD/shares", Decimal("1.5"), 0, "USD/shares", Decimal("1.5")),
])
def test_value_and_unit_keep_the_number_the_document_shows(measure, shown, scale, unit, value):
    assert ixbrl._unit_and_value(measure, shown, scale) == (unit, value)


@pytest.mark.parametrize("concept, label", [
    ("us-gaap:CashAndCashEquivalentsAtCarryingValue", "Cash and cash equivalents at carrying value"),
    ("ifrs-full:Revenue", "Revenue"),
    ("uk-bus:EntityCurrentLegalOrRegisteredName", "Entity current legal or registered name"),
    ("us-gaap:EPS2024Diluted", "EPS 2024 diluted"),
])
def test_concept_labels_in_words(concept, label):
    assert ixbrl.humanize(concept) == label


def test_units_divide_and_contexts_with_durations():
    root = etree.fromstring(b"""<r xmlns:xbrli="http://www.xbrl.org/2003/instance" xmlns:iso4217="http://www.xbrl.org/2003/iso4217">
      <xbrli:unit id="eps"><xbrli:divide><xbrli:unitNumerator><xbrli:measure>iso4217:USD</xbrli:measure></xbrli:unitNumerator>
      <xbrli:unitDenominator><xbrli:measure>xbrli:shares</xbrli:measure></xbrli:unitDenominator></xbrli:divide></xbrli:unit>
      <xbrli:context id="q3"><xbrli:entity><xbrli:identifier scheme="s">E1</xbrli:identifier></xbrli:entity>
      <xbrli:period><xbrli:startDate>2024-07-01</xbrli:startDate><xbrli:endDate>2024-09-30</xbrli:endDate></xbrli:period></xbrli:context>
      <xbrli:context id="odd"><xbrli:entity><xbrli:identifier scheme="s">E1</xbrli:identifier></xbrli:entity>
      <xbrli:period><xbrli:startDate>2024-01-01</xbrli:startDate><xbrli:endDate>2024-06-30</xbrli:endDate></xbrli:period></xbrli:context>
      </r>""")
    assert ixbrl._units(root) == {"eps": "USD/shares"}
    contexts = ixbrl._contexts(root)
    assert contexts["q3"]["period"] == "2024Q3" and contexts["odd"]["period"] == "2024-01-01/2024-06-30"
