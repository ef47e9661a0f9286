"""The tutorial's sources (docs/tutorial/own-data.md): a folder of mixed documents and two spreadsheets with their own column
names, written by the tutorial test and by anyone who wants to follow the tutorial without documents of their own:

    python -m tests.helpers.tutorial sources/
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers.documents import ixbrl_document, write_docx, write_pdf, write_xlsx

COMPANIES = ["Acme Holdings plc", "Borealis Metals AG", "Cedar Logistics Inc", "Dune Foods SA", "Elm Robotics Ltd",
             "Fjord Energy ASA"]
QUALITY = [("Defect rate", "%", [1.8, 2.4, 0.9, 3.1, 1.2, 2.2]), ("Reworked pieces", "pcs", [3120, 870, 1450, 4020, 610, 2290]),
           ("Average delivery delay", "days", [4.5, 7.0, 2.5, 9.5, 3.0, 6.0]),
           ("Quality loss", "RMB 10k", [120.5, 88.0, 45.25, 310.0, 64.5, 150.75])]


def write_sources(root: Path) -> dict[str, Path]:
    docs, tables = root / "docs", root / "tables"
    docs.mkdir(parents=True, exist_ok=True)
    facts = []
    for i, company in enumerate(COMPANIES):
        slug = company.split()[0].lower()
        if i < 3:  # annual accounts as inline XBRL filings
            rows = [{"label": "Current assets", "concept": "us-gaap:AssetsCurrent", "now": f"{2909 + 37 * i:,}",
                     "before": f"{4585 - 21 * i:,}"},
                    {"label": "Total assets", "concept": "us-gaap:Assets", "now": f"{9120 + 101 * i:,}",
                     "before": f"{8775 + 55 * i:,}"}]
            (docs / f"{slug}-annual-2024.xhtml").write_text(ixbrl_document("1.1" if i % 2 else "1.0", i != 2, company, rows),
                                                           encoding="utf-8")
        lines = [f"{company} quality report 2024", "",
                 f"This report covers the production lines of {company} in 2024.", ""]
        for label, unit, values in QUALITY:
            lines.append(f"{label} ({unit}) {values[i]:,} {values[(i + 1) % 6]:,}")
            facts.append([company, label, "FY2024", values[i], unit, f"{slug}-quality-2024.pdf"])
        lines += ["", "Figures are for the calendar year; the second column is the prior year."]
        write_pdf(docs / f"{slug}-quality-2024.pdf", [lines, [f"{company}: outlook", "Management expects steady output."]])
    write_docx(docs / "group-quality-memo.docx")
    (docs / "glossary.md").write_text("# Glossary\n\nDefect rate: the share of inspected pieces rejected.\n\n"
                                      "| Term | Meaning |\n|---|---|\n| Rework | a piece repaired before shipping |\n",
                                      encoding="utf-8")
    kpis = write_xlsx(tables / "quality-kpis.xlsx", ["Company", "KPI", "Year", "Amount", "Unit", "Source file"], facts)
    decisions = write_xlsx(tables / "decision-log.xlsx",
                           ["Case", "Kind", "What happened", "Root causes", "What we did", "Risk"],
                           [[f"D{i}", "quality_loss", f"{c}: defect rate rose above plan on line {i + 1}.",
                             '{"process_drift_sigma": 0.6, "supplier_lot_defect_pct": 0.4}' if i % 2 else
                             '{"supplier_lot_defect_pct": 0.7, "operator_error_count": 0.3}',
                             "Recalibrate the line and tighten SPC control limits" if i % 2 else
                             "Quarantine the supplier lot and raise a corrective action request",
                             "customer" if i % 2 else "compliance"] for i, c in enumerate(COMPANIES * 2)],
                           sheet="Log")
    return {"docs": docs, "kpis": kpis, "decisions": decisions}


TABLES_CONF = """tables:
  - path: sources/tables/quality-kpis.xlsx
    kind: facts
    columns: {entity: Company, metric: KPI, period: Year, value: Amount, unit: Unit, doc_id: Source file}
  - path: sources/tables/decision-log.xlsx
    kind: decisions
    sheet: Log
    columns: {record_id: Case, case_type: Kind, situation: What happened, causes: Root causes, action: What we did,
              risk_focus: Risk}
    transforms: {causes: [{from_json: true}]}
"""

if __name__ == "__main__":
    print(write_sources(Path(sys.argv[1] if len(sys.argv) > 1 else "sources")))
