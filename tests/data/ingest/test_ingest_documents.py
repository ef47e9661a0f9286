"""Every document format, read into blocks with page, section and kind; every unreadable document named with its
reason; the chunker's structure rules."""

import pytest
from tests.helpers.documents import write_docx, write_encrypted_pdf, write_image_only_pdf, write_pdf

from clap.data.ingest.blocks import BadDocument, Block, read_document, table_row
from clap.data.ingest.chunking import chunk_blocks, split_long


def kinds(doc):
    return [(b.kind, b.page, b.text) for b in doc.blocks]


@pytest.mark.parametrize("line, row", [
    ("Current assets 2,909 4,585", "Current assets | 2,909 | 4,585"),
    ("Defect rate (%) 1.8 2.4", "Defect rate (%) | 1.8 | 2.4"),
    ("2024 2023", "2024 | 2023"),
    ("Net loss (35) (12)", "Net loss | (35) | (12)"),
    ("Revenue grew by 12 percent in 2024.", None),  # prose: one number at the end
    ("Revenue was 1,234 in 2024", None),            # one trailing number
    ("Founded in 1999, sold in 2005.", None),
])
def test_a_line_of_numbers_reads_as_a_table_row(line, row):
    assert table_row(line) == row


def test_pdf_pages_headings_paragraphs_and_table_rows(tmp_path):
    doc = read_document(write_pdf(tmp_path / "r.pdf", [
        ["Annual report", "Revenue grew strongly in the year and margins held up well.", "Current assets 2,909 4,585"],
        ["Outlook", "Management expects steady output."]]))
    assert kinds(doc) == [("heading", 1, "Annual report"),
                          ("paragraph", 1, "Revenue grew strongly in the year and margins held up well."),
                          ("table_row", 1, "Current assets | 2,909 | 4,585"),
                          ("heading", 2, "Outlook"), ("paragraph", 2, "Management expects steady output.")]
    assert [b.section for b in doc.blocks] == ["Annual report"] * 3 + ["Outlook"] * 2
    assert doc.format == "pdf" and doc.date is not None and doc.date[:2] in ("19", "20")


@pytest.mark.parametrize("make, reason", [
    (write_encrypted_pdf, "encrypted"),
    (write_image_only_pdf, "no_text_layer"),
    (lambda p: p.write_bytes(b"%PDF-1.7\nthis is not a pdf") or p, "corrupt"),
])
def test_unreadable_pdfs_are_named_with_their_reason(tmp_path, make, reason):
    path = tmp_path / "bad.pdf"
    make(path)
    with pytest.raises(BadDocument) as err:
        read_document(path)
    assert err.value.reason == reason


def test_html_blocks_page_breaks_and_tables(tmp_path):
    (tmp_path / "r.html").write_text(
        "<html><head><title>x</title><script>var a = 1;</script></head><body>"
        "<h1>Quality</h1><p>The defect rate fell to <b>1.8%</b>.</p>"
        "<div style='page-break-before: always'><h2>Suppliers</h2>"
        "<table><tr><th>Supplier</th><th>Lots</th></tr><tr><td>Northwind</td><td>120</td></tr></table></div>"
        "<p style='break-after: page'>Last words.</p><p>After the break.</p></body></html>", encoding="utf-8")
    doc = read_document(tmp_path / "r.html")
    assert kinds(doc) == [("heading", 1, "Quality"), ("paragraph", 1, "The defect rate fell to 1.8%."),
                          ("heading", 2, "Suppliers"), ("table_header", 2, "Supplier | Lots"),
                          ("table_row", 2, "Northwind | Lots: 120"), ("paragraph", 2, "Last words."),
                          ("paragraph", 3, "After the break.")]
    assert doc.xbrl is None


def test_html_in_a_declared_charset_and_an_undeclared_wrong_one(tmp_path):
    (tmp_path / "latin.html").write_bytes("<html><head><meta charset='iso-8859-1'></head><body><p>Café 12</p></body>"
                                          "</html>".encode("latin-1"))
    assert kinds(read_document(tmp_path / "latin.html")) == [("paragraph", 1, "Café 12")]
    (tmp_path / "wrong.html").write_bytes("<html><body><p>Café</p></body></html>".encode("latin-1"))
    with pytest.raises(BadDocument, match="unknown_encoding"):
        read_document(tmp_path / "wrong.html")


def test_docx_headings_page_breaks_tables_and_date(tmp_path):
    doc = read_document(write_docx(tmp_path / "q.docx"))
    assert kinds(doc) == [("heading", 1, "Quality report 2024"),
                          ("paragraph", 1, "The defect rate fell to 1.8% in 2024 after the line was recalibrated."),
                          ("paragraph", 1, "Reworked pieces were 3,120 in the year."),
                          ("heading", 2, "Suppliers"), ("table_header", 2, "Supplier | Lots | Defects"),
                          ("table_row", 2, "Northwind | Lots: 120 | Defects: 4")]
    assert doc.date == "2024-11-05"


def test_a_corrupt_docx(tmp_path):
    (tmp_path / "x.docx").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(BadDocument, match="corrupt"):
        read_document(tmp_path / "x.docx")


def test_markdown_headings_paragraphs_tables_and_form_feed_pages(tmp_path):
    (tmp_path / "g.md").write_text("# Glossary\n\nDefect rate: the share rejected.\n\n| Term | Meaning |\n|---|---|\n"
                                   "| Rework | repaired before shipping |\n\f## Later\n\n- a list item\n", encoding="utf-8")
    assert kinds(read_document(tmp_path / "g.md")) == [
        ("heading", 1, "Glossary"), ("paragraph", 1, "Defect rate: the share rejected."),
        ("table_row", 1, "Term | Meaning"), ("table_row", 1, "Rework | repaired before shipping"),
        ("heading", 2, "Later"), ("paragraph", 2, "a list item")]


@pytest.mark.parametrize("data, ok", [
    (b"Plain report.\n\nSecond paragraph, 12.5% defects.\fPage two.", True),
    ("\ufeffWith a BOM.".encode(), True),
    ("UTF-16 text.".encode("utf-16"), True),
    (b"bad \x81\x82 bytes", False),
    (b"", False),
])
def test_text_encodings(tmp_path, data, ok):
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    if ok:
        assert read_document(path).blocks
    else:
        with pytest.raises(BadDocument) as err:
            read_document(path)
        assert err.value.reason in ("unknown_encoding", "empty")


def test_text_pages_by_form_feed(tmp_path):
    (tmp_path / "t.txt").write_text("One.\fTwo.\fThree.", encoding="utf-8")
    assert [b.page for b in read_document(tmp_path / "t.txt").blocks] == [1, 2, 3]


def test_an_unsupported_format(tmp_path):
    (tmp_path / "x.pptx").write_bytes(b"x")
    with pytest.raises(BadDocument, match="unsupported_format"):
        read_document(tmp_path / "x.pptx")


# ---------------------------------------------------------------- chunking
def test_chunks_start_at_headings_and_pages_and_keep_rows_whole():
    blocks = [Block("Balance sheet", "heading", 1, "Balance sheet"),
              Block("Current assets | 2,909 | 4,585", "table_row", 1, "Balance sheet"),
              Block("Total assets | 9,120 | 8,775", "table_row", 1, "Balance sheet"),
              Block("Notes", "heading", 1, "Notes"), Block("A note.", "paragraph", 1, "Notes"),
              Block("Next page.", "paragraph", 2, "Notes")]
    chunks, where = chunk_blocks(blocks, 200)
    assert [c.text for c in chunks] == ["Balance sheet\nCurrent assets | 2,909 | 4,585\nTotal assets | 9,120 | 8,775",
                                        "Notes\nA note.", "Next page."]
    assert where == [0, 0, 0, 1, 1, 2] and [c.page for c in chunks] == [1, 1, 2]


def test_the_size_bound_cuts_between_blocks_and_long_paragraphs_at_sentences():
    rows = [Block(f"Row {i} | {i},000 | {i},500", "table_row", 1) for i in range(10)]
    chunks, _ = chunk_blocks(rows, 60)
    assert all(len(c.text) <= 60 for c in chunks) and sum(len(c.lines) for c in chunks) == 10
    long = "First sentence here. " * 20
    pieces = split_long(long.strip(), 100)
    assert all(len(p) <= 100 for p in pieces) and all(p.endswith(".") for p in pieces)
    assert " ".join(pieces) == long.strip()


AFTER = "After the table, a paragraph on the scope of the figures."


def test_a_table_cut_by_the_bound_repeats_its_header_lines_where_it_continues():
    header = ["Emissions reported in tonnes CO2e", "| 2019 | 2018"]
    rows = [f"Scope {i} | 2019: {i},100 | 2018: {i},200" for i in range(1, 5)]
    blocks = ([Block("Emissions", "heading", 1, "Emissions")] + [Block(h, "table_header", 1, "Emissions") for h in header]
              + [Block(r, "table_row", 1, "Emissions") for r in rows] + [Block(AFTER, "paragraph", 1, "Emissions")])
    chunks, where = chunk_blocks(blocks, 140)
    assert [c.lines for c in chunks] == [["Emissions", *header, rows[0], rows[1]], [*header, rows[2], rows[3]],
                                         [AFTER]]
    assert where == [0, 0, 0, 0, 0, 1, 1, 2]  # a block is still held by the one chunk it was read into
    # the header lines of one table are not carried into the next table, nor past a paragraph
    other = [Block("Other | 2019", "table_header", 1), Block("Staff | 2019: 12", "table_row", 1),
             Block("A long paragraph that fills the chunk.", "paragraph", 1), Block("Orphan | 7", "table_row", 1)]
    chunks, _ = chunk_blocks(other, 40)
    assert [c.lines for c in chunks] == [["Other | 2019", "Staff | 2019: 12"], ["A long paragraph that fills the chunk."],
                                         ["Orphan | 7"]]


def test_a_row_longer_than_the_bound_is_its_own_chunk_not_cut():
    row = "Item | " + " | ".join(str(i) for i in range(100))
    chunks, _ = chunk_blocks([Block("A.", "paragraph", 1), Block(row, "table_row", 1)], 50)
    assert [c.text for c in chunks] == ["A.", row]
