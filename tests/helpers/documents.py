"""Documents the ingest tests, the tutorial test and benchmarks/bench_ingest.py build: real files in the real formats
(PDF written with reportlab, inline XBRL in the registries' namespaces, DOCX with python-docx, XLSX with openpyxl)."""

from __future__ import annotations

from pathlib import Path

IX = {"1.0": "http://www.xbrl.org/2008/inlineXBRL", "1.1": "http://www.xbrl.org/2013/inlineXBRL"}
IXT = {"1.0": "http://www.xbrl.org/inlineXBRL/transformation/2010-04-20",
       "1.1": "http://www.xbrl.org/inlineXBRL/transformation/2020-02-12"}
DOT_FORMAT = {"1.0": "numcommadot", "1.1": "num-dot-decimal"}


def write_pdf(path: Path, pages: list[list[str]], title: str = "Annual report") -> Path:
    """A PDF with a text layer: one list of lines per page (a line with numbers reads back as a table row)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), pagesize=A4)
    c.setTitle(title)
    for lines in pages:
        y = 800
        for line in lines:
            c.drawString(50, y, line)
            y -= 18 if line else 30
        c.showPage()
    c.save()
    return path


def write_image_only_pdf(path: Path) -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.rect(50, 600, 200, 100, fill=1)  # a scanned page: marks, no text layer
    c.showPage()
    c.save()
    return path


def write_encrypted_pdf(path: Path) -> Path:
    from reportlab.lib import pdfencrypt
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4, encrypt=pdfencrypt.StandardEncryption("secret", canPrint=0))
    c.drawString(50, 800, "Confidential")
    c.showPage()
    c.save()
    return path


def ixbrl_document(version: str = "1.1", prefixed: bool = True, entity: str = "Acme Holdings plc",
                   facts: list[dict] | None = None, broken: bool = False) -> str:
    """An inline XBRL filing: a balance sheet table (USD, scale 6), a paragraph fact, a dimensioned fact, and with
    `broken` the filing's mistakes (unknown format, missing context, nil, hidden)."""
    ix, ixt = IX[version], IXT[version]
    fmt = DOT_FORMAT[version]
    p = "ix:" if prefixed else ""
    ns_ix = f'xmlns:ix="{ix}"' if prefixed else f'xmlns="{ix}"'
    h = "" if prefixed else "h:"
    ns_h = 'xmlns="http://www.w3.org/1999/xhtml"' if prefixed else 'xmlns:h="http://www.w3.org/1999/xhtml"'
    rows = facts or [{"label": "Current assets", "concept": "us-gaap:AssetsCurrent", "now": "2,909", "before": "4,585"},
                     {"label": "Total assets", "concept": "us-gaap:Assets", "now": "9,120", "before": "8,775"}]

    def nf(concept, ctx, text, extra=""):
        return (f'<{p}nonFraction name="{concept}" contextRef="{ctx}" unitRef="usd" decimals="-6" scale="6" '
                f'format="ixt:{fmt}"{extra}>{text}</{p}nonFraction>')

    body_rows = "".join(f"<{h}tr><{h}td>{r['label']}</{h}td><{h}td>{nf(r['concept'], 'FY2024', r['now'])}</{h}td>"
                        f"<{h}td>{nf(r['concept'], 'FY2023', r['before'])}</{h}td></{h}tr>" for r in rows)
    mistakes = ""
    hidden = ""
    if broken:
        mistakes = (f"<{h}p>Other income was <{p}nonFraction name=\"us-gaap:OtherIncome\" contextRef=\"D2024\" unitRef=\"usd\" "
                    f"scale=\"6\" format=\"ixt:num-roman\">XII</{p}nonFraction> million.</{h}p>"
                    f"<{h}p>Deferred tax was <{p}nonFraction name=\"us-gaap:DeferredTax\" contextRef=\"NOPE\" unitRef=\"usd\" "
                    f"scale=\"6\" format=\"ixt:{fmt}\">12</{p}nonFraction> million.</{h}p>"
                    f"<{h}p>Goodwill: <{p}nonFraction name=\"us-gaap:Goodwill\" contextRef=\"FY2024\" unitRef=\"usd\" "
                    f"xsi:nil=\"true\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"/></{h}p>")
        hidden = (f"<{p}hidden><{p}nonFraction name=\"us-gaap:Hidden\" contextRef=\"FY2024\" unitRef=\"usd\" "
                  f"decimals=\"0\">5</{p}nonFraction></{p}hidden>")
    return f"""<?xml version="1.0" encoding="utf-8"?>
<{h}html {ns_h} {ns_ix} xmlns:ixt="{ixt}" xmlns:xbrli="http://www.xbrl.org/2003/instance"
 xmlns:iso4217="http://www.xbrl.org/2003/iso4217" xmlns:us-gaap="http://fasb.org/us-gaap/2024"
 xmlns:dei="http://xbrl.sec.gov/dei/2024" xmlns:xbrldi="http://xbrl.org/2006/xbrldi">
<{h}head><{h}title>{entity} annual report</{h}title></{h}head>
<{h}body>
<{h}div style="display:none"><{p}header>{hidden}<{p}resources>
<xbrli:context id="FY2024"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000123456</xbrli:identifier></xbrli:entity>
<xbrli:period><xbrli:instant>2024-12-31</xbrli:instant></xbrli:period></xbrli:context>
<xbrli:context id="FY2023"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000123456</xbrli:identifier></xbrli:entity>
<xbrli:period><xbrli:instant>2023-12-31</xbrli:instant></xbrli:period></xbrli:context>
<xbrli:context id="D2024"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000123456</xbrli:identifier></xbrli:entity>
<xbrli:period><xbrli:startDate>2024-01-01</xbrli:startDate><xbrli:endDate>2024-12-31</xbrli:endDate></xbrli:period></xbrli:context>
<xbrli:context id="D2024EU"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000123456</xbrli:identifier>
<xbrli:segment><xbrldi:explicitMember dimension="us-gaap:StatementGeographicalAxis">country:EuropeMember</xbrldi:explicitMember></xbrli:segment></xbrli:entity>
<xbrli:period><xbrli:startDate>2024-01-01</xbrli:startDate><xbrli:endDate>2024-12-31</xbrli:endDate></xbrli:period></xbrli:context>
<xbrli:unit id="usd"><xbrli:measure>iso4217:USD</xbrli:measure></xbrli:unit>
</{p}resources></{p}header></{h}div>
<{h}h1>{entity}: annual report 2024</{h}h1>
<{h}p>Registrant: <{p}nonNumeric name="dei:EntityRegistrantName" contextRef="D2024">{entity}</{p}nonNumeric></{h}p>
<{h}p>Revenue for the year was <{p}nonFraction name="us-gaap:Revenues" contextRef="D2024" unitRef="usd" decimals="-6"
 scale="6" format="ixt:{fmt}">1,234</{p}nonFraction> million dollars, of which Europe
 <{p}nonFraction name="us-gaap:Revenues" contextRef="D2024EU" unitRef="usd" decimals="-6" scale="6"
 format="ixt:{fmt}">456</{p}nonFraction> million.</{h}p>
<{h}p style="page-break-before: always">The net loss was (<{p}nonFraction name="us-gaap:NetIncomeLoss" contextRef="D2024"
 unitRef="usd" decimals="-6" scale="6" sign="-" format="ixt:{fmt}">35</{p}nonFraction>) million.</{h}p>
<{h}h2>Balance sheet</{h}h2>
<{h}table><{h}tr><{h}th>USD million</{h}th><{h}th>2024</{h}th><{h}th>2023</{h}th></{h}tr>{body_rows}</{h}table>
{mistakes}
</{h}body></{h}html>
"""


def write_docx(path: Path, title: str = "Quality report 2024") -> Path:
    import docx
    from docx.enum.text import WD_BREAK

    d = docx.Document()
    d.add_heading(title, level=1)
    d.add_paragraph("The defect rate fell to 1.8% in 2024 after the line was recalibrated.")
    d.add_paragraph("Reworked pieces were 3,120 in the year.").add_run().add_break(WD_BREAK.PAGE)
    d.add_heading("Suppliers", level=2)
    table = d.add_table(rows=2, cols=3)
    for row, cells in zip(table.rows, [["Supplier", "Lots", "Defects"], ["Northwind", "120", "4"]]):
        for cell, text in zip(row.cells, cells):
            cell.text = text
    d.core_properties.created = __import__("datetime").datetime(2024, 11, 5)
    path.parent.mkdir(parents=True, exist_ok=True)
    d.save(str(path))
    return path


def write_xlsx(path: Path, header: list[str], rows: list[list], sheet: str = "KPIs") -> Path:
    from openpyxl import Workbook

    book = Workbook()
    ws = book.active
    ws.title = sheet
    ws.append(header)
    for r in rows:
        ws.append(r)
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(str(path))
    return path
