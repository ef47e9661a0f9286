"""A table row says what each of its numbers is, in every format that has tables: its values carry their column
headers, multi-row headers combine, a section row's label leads the rows under it, signs and footnote markers stay
as written (clap.data.ingest.grid)."""

import pytest
from tests.helpers.documents import write_pdf

from clap.data.ingest.blocks import read_document
from clap.data.ingest.grid import period_of_value, qualify
from clap.domain.quantities import normalize_period

# A real annual-report table (TAT-QA, dev split): a caption row over the years, then the years.
CAPTIONED = [["", "", "Years Ended September 30,", ""], ["", "2019", "2018", "2017"],
             ["Fixed Price", "$  1,452.4", "$  1,146.2", "$  1,036.9"], ["Other", "44.1", "56.7", "70.8"],
             ["Total sales", "$1,496.5", "$1,202.9", "$1,107.7"]]
WANT = ["Years Ended September 30,", "2019 | 2018 | 2017",
        "Fixed Price | 2019: $ 1,452.4 | 2018: $ 1,146.2 | 2017: $ 1,036.9",
        "Other | 2019: 44.1 | 2018: 56.7 | 2017: 70.8", "Total sales | 2019: $1,496.5 | 2018: $1,202.9 | 2017: $1,107.7"]


def texts(grid):
    return [text for _, text, _ in qualify(grid)]


@pytest.mark.parametrize("grid, want", [
    (CAPTIONED, WANT),
    # a section row's label leads the rows under it
    ([["", "2019", "2018"], ["Total assets:", "", ""], ["AMER", "$624", "$640"], ["EMEA", "12", "(3)"]],
     ["2019 | 2018", "Total assets:", "Total assets: AMER | 2019: $624 | 2018: $640", "Total assets: EMEA | 2019: 12 | 2018: (3)"]),
    # footnote markers and a % column survive as written; an empty cell is left out
    ([["", "FY19", "FY18", "% Change"], ["Order intake1", "1,234", "", "13.2%"]],
     ["FY19 | FY18 | % Change", "Order intake1 | FY19: 1,234 | % Change: 13.2%"]),
    # a lone currency sign joins its amount; a spanned header (None) counts for both columns under it
    ([["", "2019", None, "2018", None], ["Cost of sales", "$", "624", "$", "640"]],
     ["2019 | 2018", "Cost of sales | 2019: $624 | 2018: $640"]),
    # two header rows under spans: quarter over year
    ([["", "Three Months Ended", None, "Nine Months Ended", None], ["", "2019", "2018", "2019", "2018"],
      ["Revenue", "10", "9", "30", "27"]],
     ["Three Months Ended | Nine Months Ended", "2019 | 2018",
      "Revenue | Three Months Ended 2019: 10 | Three Months Ended 2018: 9 | Nine Months Ended 2019: 30 | "
      "Nine Months Ended 2018: 27"]),
    # real pages (TAT-QA dev): a header a page centres over its group of columns, in the group's first cell only,
    # counts for the group when the same headers repeat under each group (footnote markers aside)
    ([["", "2019", "", "2018", ""], ["", "Men", "Women", "Men", "Women"], ["Member aged 65", "86.8", "88.9", "87.3", "89.3"]],
     ["2019 | 2018", "Men | Women", "Member aged 65 | 2019 Men: 86.8 | 2019 Women: 88.9 | 2018 Men: 87.3 | 2018 Women: 89.3"]),
    ([["", "", "Net additions", "", "% of penetration", ""], ["", "Aug 31, 2019", "Aug 31, 2019", "Aug 31, 2018 (1)",
      "Aug 31, 2019", "Aug 31, 2018 (3)"], ["Internet", "446,137", "21,189", "21,417", "50.8", "49.7"]],
     ["Net additions | % of penetration", "Aug 31, 2019 | Aug 31, 2018 (1) | Aug 31, 2018 (3)",
      "Internet | Aug 31, 2019: 446,137 | Net additions Aug 31, 2019: 21,189 | Net additions Aug 31, 2018 (1): 21,417 | "
      "% of penetration Aug 31, 2019: 50.8 | % of penetration Aug 31, 2018 (3): 49.7"]),
    # …and only then: groups that read differently underneath keep their blanks (a column with no header of its own)
    ([["", "", "Fiscal year", "", "% Change"], ["", "2019", "2018", "Actual", "Comp."], ["Orders", "12,749", "11,875", "7 %", "7 %"]],
     ["Fiscal year | % Change", "2019 | 2018 | Actual | Comp.",
      "Orders | 2019: 12,749 | Fiscal year 2018: 11,875 | Actual: 7 % | % Change Comp.: 7 %"]),
    # no header row: the cells as they are
    ([["Current assets", "2,909", "4,585"]], ["Current assets | 2,909 | 4,585"]),
    # words only: no header is guessed
    ([["Term", "Meaning"], ["Rework", "repaired before shipping"]], ["Term | Meaning", "Rework | repaired before shipping"]),
])
def test_a_table_row_is_written_with_its_column_headers(grid, want):
    assert texts(grid) == want


@pytest.mark.parametrize("header, period", [
    ("2019", "2019"), ("FY19", "2019"), ("FY 2019", "2019"), ("Year Ended December 31, 2019", "2019"),
    ("April 26, 2019", "2019"), ("Q3 FY19", "2019Q3"), ("Q1 2023", "2023Q1"), ("2023年第一季度", "2023Q1"),
    ("Fiscal year", "Fiscal year"),
])
def test_period_headers_normalise_like_the_contracts_periods(header, period):
    assert normalize_period(header) == period


@pytest.mark.parametrize("line, value, period", [
    ("Total sales | 2019: $1,496.5 | 2018: $1,202.9", 1202.9, "2018"),
    ("Revenue | Three Months Ended April 26, 2019: 10 | FY18: 9", 9, "2018"),
    ("Revenue | % Change: 12% | 2019: 100", 12, None),  # the header names no period
    ("Current assets | 2,909 | 4,585", 2909, None),     # no header at all
])
def test_a_fact_takes_its_period_from_its_values_column_header(line, value, period):
    assert period_of_value(line, value) == period


def test_html_table_rows_carry_headers_with_colspan_and_sections(tmp_path):
    (tmp_path / "p.html").write_text(
        "<html><body><p>Sales by contract type.</p><table>"
        "<tr><td></td><td colspan='3'>Years Ended September 30,</td></tr>"
        "<tr><td></td><th>2019</th><th>2018</th><th>2017</th></tr>"
        "<tr><td>Revenue:</td><td></td><td></td><td></td></tr>"
        "<tr><td>Fixed Price</td><td>$ 1,452.4</td><td>$ 1,146.2</td><td>$ 1,036.9</td></tr>"
        "</table></body></html>", encoding="utf-8")
    rows = [(b.kind, b.text) for b in read_document(tmp_path / "p.html").blocks if b.kind != "paragraph"]
    assert rows == [("table_header", "Years Ended September 30,"), ("table_header", "2019 | 2018 | 2017"),
                    ("table_row", "Revenue:"),
                    ("table_row", "Revenue: Fixed Price | 2019: $ 1,452.4 | 2018: $ 1,146.2 | 2017: $ 1,036.9")]


def test_docx_table_rows_carry_headers_with_grid_spans(tmp_path):
    import docx

    d = docx.Document()
    d.add_paragraph("Sales by contract type.")
    table = d.add_table(rows=3, cols=4)
    for row, cells in zip(table.rows, [["", "Years Ended September 30,", "", ""], ["", "2019", "2018", "2017"],
                                       ["Total sales", "$1,496.5", "$1,202.9", "$1,107.7"]]):
        for cell, text in zip(row.cells, cells):
            cell.text = text
    table.cell(0, 1).merge(table.cell(0, 3))  # the caption spans the three year columns (gridSpan)
    table.cell(0, 1).text = "Years Ended September 30,"
    d.save(str(tmp_path / "p.docx"))
    rows = [b.text for b in read_document(tmp_path / "p.docx").blocks if b.kind.startswith("table")]
    assert rows == ["Years Ended September 30,", "2019 | 2018 | 2017",
                    "Total sales | 2019: $1,496.5 | 2018: $1,202.9 | 2017: $1,107.7"]


def test_markdown_table_rows_carry_headers(tmp_path):
    (tmp_path / "p.md").write_text("Sales by contract type.\n\n| | 2019 | 2018 |\n|---|---|---|\n"
                                   "| Fixed Price | $ 1,452.4 | $ 1,146.2 |\n| Other | 44.1 | 56.7 |\n", encoding="utf-8")
    rows = [(b.kind, b.text) for b in read_document(tmp_path / "p.md").blocks if b.kind != "paragraph"]
    assert rows == [("table_header", "2019 | 2018"), ("table_row", "Fixed Price | 2019: $ 1,452.4 | 2018: $ 1,146.2"),
                    ("table_row", "Other | 2019: 44.1 | 2018: 56.7")]


def test_pdf_number_columns_under_a_line_of_years_carry_them(tmp_path):
    doc = read_document(write_pdf(tmp_path / "p.pdf", [
        ["Balance sheet", "The group's assets at year end are shown below.", "2019 2018",
         "Current assets 2,909 4,585", "Goodwill 1,200 1,150"]]))
    assert [(b.kind, b.text) for b in doc.blocks if b.kind.startswith("table")] == [
        ("table_header", "2019 | 2018"), ("table_row", "Current assets | 2019: 2,909 | 2018: 4,585"),
        ("table_row", "Goodwill | 2019: 1,200 | 2018: 1,150")]


def test_the_cells_layout_writes_one_line_per_value_with_its_row_label_and_header():
    grid = [["", "2019", "2018"], ["Total assets:", "", ""], ["AMER", "$624", "$640"], ["Notes", "see below", ""]]
    assert [t for _, t, _ in qualify(grid, "cells")] == [
        "2019 | 2018", "Total assets:", "Total assets: AMER | 2019: $624", "Total assets: AMER | 2018: $640",
        "Total assets: Notes | see below"]
    assert [t for _, t, _ in qualify([["Current assets", "2,909", "4,585"]], "cells")] == \
        ["Current assets | 2,909 | 4,585"]  # no header row: nothing to name the values by, the row stays whole
    assert period_of_value("Total assets: AMER | 2018: $640", 640) == "2018"


def test_html_cells_layout_keeps_each_inline_xbrl_fact_on_its_own_line(tmp_path):
    from tests.helpers.documents import ixbrl_document

    from clap.data.ingest.blocks import Limits

    (tmp_path / "f.xhtml").write_text(ixbrl_document("1.1", True), encoding="utf-8")
    doc = read_document(tmp_path / "f.xhtml", Limits(table_layout="cells"))
    for block in doc.blocks:
        for fact in block.facts:
            assert "".join(fact.itertext()).strip() in block.text
