"""`clap ingest` throughput and peak memory on generated PDFs and inline XBRL filings, beside plain single-process
loops over the same files.

    .venv/bin/python benchmarks/bench_ingest.py [--pages 1000] [--filings 200] [--repeats 2]

PDF: `--pages` pages in 20-page reports (reportlab, a text layer with prose and table rows), read by `clap ingest`
(pypdfium2 in `ingest.workers` = 2 processes, chunked, written as the raw contract; and with 1 worker) and by the peer, a plain loop of
`pypdf.PdfReader(path).pages[i].extract_text()` in one process (text only: no chunks, no output). Inline XBRL:
`--filings` filings of 60 tagged facts each, read by `clap ingest` (blocks, chunks, every fact resolved) and by a
plain `lxml.etree.parse` + iteration over `ix:nonFraction` in one process. Memory: each run is its own process; peak
RSS is the larger of the parent and its largest worker (`ru_maxrss` of self and children), measured on half the
pages and on all of them — flat when the input doubles. Runs alternate (clap, peer, clap, peer, …) so that the VM's
drift hits both; the figure is the median.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES_PER_REPORT = 20


def make_pdfs(folder: Path, pages: int) -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.documents import write_pdf

    files = []
    for r in range(pages // PAGES_PER_REPORT):
        content = []
        for p in range(PAGES_PER_REPORT):
            lines = [f"Report {r} section {p}", ""]
            lines += [f"The plant {k} produced steadily in the quarter and the defect rate stayed within the plan "
                      f"set for line {k}." for k in range(12)]
            lines += [""] + [f"Line {k} output (pcs) {1000 + 37 * k + r:,} {900 + 29 * k + p:,}" for k in range(14)]
            content.append(lines)
        files.append(write_pdf(folder / f"report-{r:03d}.pdf", content))
    return files


def make_filings(folder: Path, n: int) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.documents import ixbrl_document

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        rows = [{"label": f"Line item {k}", "concept": f"us-gaap:LineItem{k}", "now": f"{1000 + k * 13 + i:,}",
                 "before": f"{900 + k * 11 + i:,}"} for k in range(28)]
        (folder / f"filing-{i:04d}.xhtml").write_text(ixbrl_document("1.1", True, f"Company {i} plc", rows),
                                                     encoding="utf-8")


def child(mode: str, docs: Path, out: Path) -> None:
    """One measurement, in this process: prints seconds, pages (or facts) and peak RSS."""
    files = sorted(docs.iterdir())
    if mode in ("clap", "clap1"):
        from clap.config import Ingest
        from clap.data.ingest.pipeline import ingest

        section = Ingest.model_validate({"docs": str(docs), "batch_by": "single", "batch": "b1", "date_format": "year",
                                         "lang": "en", "max_chunk_chars": 1200,
                                         "workers": 1 if mode == "clap1" else 2})
        t = time.perf_counter()
        report = ingest(section, docs, out, ["b1"])
        seconds = time.perf_counter() - t
        units = {"pages": report["documents"]["pages"], "facts": report["written"]["facts"],
                 "chunks": report["written"]["chunks"]}
    elif mode == "pypdf":
        from pypdf import PdfReader

        t = time.perf_counter()
        pages = chars = 0
        for f in files:
            for page in PdfReader(f).pages:
                chars += len(page.extract_text())
                pages += 1
        seconds = time.perf_counter() - t
        units = {"pages": pages, "chars": chars}
    else:  # lxml: parse each filing, visit its numeric facts
        from lxml import etree

        t = time.perf_counter()
        facts = 0
        for f in files:
            root = etree.parse(str(f)).getroot()
            facts += sum(1 for el in root.iter("{http://www.xbrl.org/2013/inlineXBRL}nonFraction") if el.text)
        seconds = time.perf_counter() - t
        units = {"facts": facts}
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"s": seconds, "rss_mb": rss / 1024, **units}))


def measure(mode: str, docs: Path, out: Path) -> dict:
    r = subprocess.run([sys.executable, __file__, "--child", mode, str(docs), str(out)], capture_output=True, text=True,
                       cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def alternate(pairs: list[tuple[str, Path]], out: Path, repeats: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for _ in range(repeats):
        for mode, docs in pairs:
            runs.setdefault(f"{mode}:{docs.name}", []).append(measure(mode, docs, out / f"{mode}-{docs.name}"))
    return runs


def summary(runs: list[dict], unit: str) -> dict:
    return {"s": statistics.median(r["s"] for r in runs), unit: runs[0][unit],
            f"{unit}_per_s": statistics.median(r[unit] / r["s"] for r in runs),
            "rss_mb": max(r["rss_mb"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--filings", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        half, full, filings = tmp / "pdf-half", tmp / "pdf-full", tmp / "ixbrl"
        t = time.perf_counter()
        pdfs = make_pdfs(full, args.pages)
        half.mkdir()
        for p in pdfs[: len(pdfs) // 2]:
            (half / p.name).symlink_to(p)
        make_filings(filings, args.filings)
        print(f"generated {args.pages} PDF pages in {len(pdfs)} reports and {args.filings} inline XBRL filings "
              f"in {time.perf_counter() - t:.0f} s", flush=True)
        runs = alternate([("clap", full), ("pypdf", full), ("clap1", full), ("clap", half)], tmp / "out", args.repeats)
        runs |= alternate([("clap", filings), ("lxml", filings)], tmp / "out", args.repeats)
    result = {"pdf": {"clap": summary(runs["clap:pdf-full"], "pages"), "pypdf": summary(runs["pypdf:pdf-full"], "pages"),
                      "clap_one_worker": summary(runs["clap1:pdf-full"], "pages"),
                      "clap_half": summary(runs["clap:pdf-half"], "pages")},
              "ixbrl": {"clap": summary(runs["clap:ixbrl"], "facts"), "lxml": summary(runs["lxml:ixbrl"], "facts")}}
    pdf, ix = result["pdf"], result["ixbrl"]
    print(f"PDF, {pdf['clap']['pages']} pages: clap ingest {pdf['clap']['pages_per_s']:.0f} pages/s "
          f"(peak RSS {pdf['clap']['rss_mb']:.0f} MB) | pypdf loop {pdf['pypdf']['pages_per_s']:.0f} pages/s "
          f"({pdf['pypdf']['rss_mb']:.0f} MB) → {pdf['clap']['pages_per_s'] / pdf['pypdf']['pages_per_s']:.1f}×; "
          f"clap ingest with one worker {pdf['clap_one_worker']['pages_per_s']:.0f} pages/s")
    print(f"memory as the input doubles: {pdf['clap_half']['pages']} pages {pdf['clap_half']['rss_mb']:.0f} MB → "
          f"{pdf['clap']['pages']} pages {pdf['clap']['rss_mb']:.0f} MB")
    print(f"inline XBRL, {args.filings} filings: clap ingest {ix['clap']['facts_per_s']:.0f} facts/s "
          f"({ix['clap']['facts']} facts, peak RSS {ix['clap']['rss_mb']:.0f} MB) | lxml parse loop "
          f"{ix['lxml']['facts_per_s']:.0f} facts/s ({ix['lxml']['rss_mb']:.0f} MB)")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
