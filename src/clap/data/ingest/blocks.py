"""Documents as ordered blocks: what a reader sees, in reading order, with its page and section.

    doc = read_document(Path("reports/annual-2024.pdf"))   # BadDocument(reason, detail) when it cannot be read

A block is a heading, a paragraph, a table's header line or a table row. A row is one quotable line whose values
carry their column headers ("Current assets | 2019: 2,909 | 2018: 4,585", clap.data.ingest.grid), in every
format that has tables: HTML, DOCX and Markdown tables, and the number columns of a PDF or text page under a line
of periods. Pages are the PDF's pages; for HTML and DOCX the document's own page
breaks (CSS `page-break-*`/`break-*: page`, Word's page breaks), else 1; for text and Markdown a form feed.
Readers: pypdfium2 (PDF; Apache-2.0/BSD, not PyMuPDF, which is AGPL), lxml (HTML/XHTML and inline XBRL),
python-docx (DOCX), markdown-it-py (Markdown). A document that cannot be read raises `BadDocument` with a
short reason (`encrypted`, `corrupt`, `no_text_layer`, `unknown_encoding`, `unsupported_format`, `empty`):
the caller lists it in the ingest report and goes on with the rest of the folder.
"""

from __future__ import annotations

import re
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from clap.data.ingest.grid import qualify as _qualify

_LAYOUT: ContextVar[str] = ContextVar("table_layout", default="row")  # the document being read: `Limits.table_layout`


def qualify(grid):
    return _qualify(grid, _LAYOUT.get())

FORMATS = {".pdf": "pdf", ".html": "html", ".htm": "html", ".xhtml": "html", ".docx": "docx", ".md": "markdown",
           ".markdown": "markdown", ".txt": "text"}
_NUMBER = re.compile(r"^[(\-−–]?[$€£¥]?\d[\d,.\u00a0' ]*%?\)?$")
_SPACES = re.compile(r"\s+")


class BadDocument(Exception):
    """A document the ingest cannot read; `reason` is one word for the report, `detail` says what was seen."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass
class Block:
    text: str
    kind: str  # heading | paragraph | table_header | table_row
    page: int
    section: str = ""  # the nearest heading above the block
    facts: list = field(default_factory=list)  # inline XBRL: the numeric fact elements shown in this block


@dataclass
class Document:
    path: Path
    format: str
    blocks: list[Block]
    date: str | None = None  # the document's own date (PDF CreationDate, DOCX created, HTML <meta name="date">)
    xbrl: object | None = None  # the parsed tree when the document is inline XBRL
    notes: list[str] = field(default_factory=list)  # what the reader had to bound (a depth), for the ingest report


@dataclass(frozen=True)
class Limits:
    """What a reader bounds: a file's size (and a DOCX's unpacked XML), HTML nesting depth."""

    max_bytes: int = 256 << 20
    max_html_depth: int = 512
    table_layout: str = "row"  # how a table's data rows are written (clap.data.ingest.grid.LAYOUTS)


LIMITS = Limits()


def squash(text: str) -> str:
    return _SPACES.sub(" ", text.replace("\u00a0", " ")).strip()


def document_format(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


def read_document(path: Path, limits: Limits = LIMITS) -> Document:
    fmt = document_format(path)
    if fmt is None:
        raise BadDocument("unsupported_format", f"{path.suffix or 'no suffix'} is not one of {', '.join(sorted(FORMATS))}")
    size = path.stat().st_size
    if size > limits.max_bytes:
        raise BadDocument("too_large", f"{size >> 20} MB > ingest.max_document_mb {limits.max_bytes >> 20}")
    if fmt == "docx":
        _check_unpacked(path, limits)
    token = _LAYOUT.set(limits.table_layout)
    try:
        doc = _read_html(path, limits) if fmt == "html" else {
            "pdf": _read_pdf, "docx": _read_docx, "markdown": _read_markdown, "text": _read_text}[fmt](path)
    finally:
        _LAYOUT.reset(token)
    if not doc.blocks:
        raise BadDocument("empty", "no text in the document")
    _assign_sections(doc.blocks)
    return doc


def _assign_sections(blocks: list[Block]) -> None:
    section = ""
    for b in blocks:
        if b.kind == "heading":
            section = b.text
        b.section = section


# ---------------------------------------------------------------- plain lines (PDF text layer, TXT)
def table_row(line: str) -> str | None:
    """A line of a table as its cells ("Current assets 2,909 4,585" → "Current assets | 2,909 | 4,585"): a label
    then two or more numbers, or numbers only; None for a line of prose."""
    tokens = line.split()
    numbers = 0
    while numbers < len(tokens) and _NUMBER.match(tokens[-1 - numbers]):
        numbers += 1
    if numbers < 2 or numbers < len(tokens) and tokens[-1 - numbers].endswith((".", ",")):
        return None
    label = " ".join(tokens[: len(tokens) - numbers])
    return " | ".join(([label] if label else []) + tokens[len(tokens) - numbers:])


def _heading(line: str, next_line: str | None) -> bool:
    return (len(line) <= 70 and next_line is not None and not line.endswith((".", ",", ";", ":", "。", "，"))
            and (line[:1].isupper() or line[:1].isdigit() or not line.isascii())
            and sum(c.isdigit() for c in line) <= 4 and len(line.split()) <= 10)


def lines_to_blocks(lines: list[str], page: int) -> list[Block]:
    """The lines of one page: table rows kept whole, short title-like lines as headings, the rest joined into
    paragraphs (a blank line or a heading ends one)."""
    blocks: list[Block] = []
    prose: list[str] = []

    def flush() -> None:
        if prose:
            blocks.append(Block(squash(" ".join(prose)), "paragraph", page))
            prose.clear()

    clean = [squash(x) for x in lines]
    for i, line in enumerate(clean):
        if not line:
            flush()
            continue
        row = table_row(line)
        if row is not None:
            flush()
            blocks.append(Block(row, "table_row", page))
        elif not prose and _heading(line, next((x for x in clean[i + 1:] if x), None)):
            blocks.append(Block(line, "heading", page))
        else:
            prose.append(line)
            if line.endswith((".", "!", "?", "。", "！", "？")) and len(line) < 50:  # a short closing line ends it
                flush()
    flush()
    return _qualify_runs(blocks)


def _qualify_runs(blocks: list[Block]) -> list[Block]:
    """A page's run of table rows whose first row is a line of periods only ("2019 | 2018 | 2017"), qualified as
    a table: each row's trailing values take the headers of the columns they stand under (right-aligned, as the
    numbers of a text layer are)."""
    out: list[Block] = []
    i = 0
    while i < len(blocks):
        j = i
        while j < len(blocks) and blocks[j].kind == "table_row" and blocks[j].page == blocks[i].page:
            j += 1
        run = blocks[i:j]
        if len(run) >= 2 and not _has_label(run[0].text):
            heads = run[0].text.split(" | ")
            grid = [[""] + heads]
            for b in run[1:]:
                cells = b.text.split(" | ")
                label, values = (cells[0], cells[1:]) if _has_label(b.text) else ("", cells)
                values = values[-len(heads):] if len(values) >= len(heads) else values
                grid.append([label] + [""] * (len(heads) - len(values)) + values)
            out += [Block(text, kind, run[0].page) for kind, text, _ in qualify(grid)]
            i = j
        elif run:
            out += run
            i = j
        else:
            out.append(blocks[i])
            i += 1
    return out


def _has_label(row_text: str) -> bool:
    first = row_text.split(" | ", 1)[0]
    return not _NUMBER.match(first)


# ---------------------------------------------------------------- PDF
def _read_pdf(path: Path) -> Document:
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        text = str(exc).lower()
        if "password" in text:
            raise BadDocument("encrypted", "the PDF needs a password") from None
        raise BadDocument("corrupt", f"pdfium cannot open it ({exc})") from None
    try:
        blocks: list[Block] = []
        pages = len(pdf)
        for i in range(pages):
            page = pdf[i]
            textpage = page.get_textpage()
            try:
                text = textpage.get_text_bounded()
            finally:
                textpage.close()
                page.close()
            blocks += lines_to_blocks(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), i + 1)
        date = _pdf_date(pdf.get_metadata_dict().get("CreationDate", ""))
    finally:
        pdf.close()
    if not blocks:
        raise BadDocument("no_text_layer", f"none of its {pages} page(s) has a text layer (scanned? run OCR first)")
    return Document(path, "pdf", blocks, date)


def _pdf_date(value: str) -> str | None:
    m = re.match(r"^(?:D:)?(\d{4})(\d{2})?(\d{2})?", value or "")
    return None if not m else "-".join(g for g in (m.group(1), m.group(2) or "01", m.group(3) or "01"))


# ---------------------------------------------------------------- text and Markdown
def decode(data: bytes) -> str:
    """UTF-8 (with or without BOM) or UTF-16 with its BOM; anything else is an unknown encoding, never guessed."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise BadDocument("unknown_encoding", "a UTF-16 byte-order mark over bytes that are not UTF-16") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadDocument("unknown_encoding", f"not UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r}); "
                                              "save it as UTF-8") from None


def _read_text(path: Path) -> Document:
    pages = decode(path.read_bytes()).split("\f")
    blocks = []
    for n, text in enumerate(pages, start=1):
        blocks += lines_to_blocks(text.split("\n"), n)
    return Document(path, "text", blocks)


def _read_markdown(path: Path) -> Document:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    blocks: list[Block] = []
    for n, text in enumerate(decode(path.read_bytes()).split("\f"), start=1):
        tokens = md.parse(text)
        kind, cells, grid = None, None, None
        for tok in tokens:
            if tok.type == "heading_open":
                kind = "heading"
            elif tok.type == "table_open":
                grid = []
            elif tok.type == "table_close":
                blocks += [Block(text, k, n) for k, text, _ in qualify(grid or [])]
                grid = None
            elif tok.type == "tr_open":
                cells = []
            elif tok.type == "inline" and cells is not None:
                cells.append(squash(tok.content))
            elif tok.type == "tr_close":
                if any(cells) and grid is not None:
                    grid.append(cells)
                cells = None
            elif tok.type == "inline" and tok.content.strip():
                blocks.append(Block(squash(tok.content), kind or "paragraph", n))
                kind = None
            elif tok.type in ("fence", "code_block") and tok.content.strip():
                blocks += [Block(squash(x), "paragraph", n) for x in tok.content.split("\n\n") if x.strip()]
    return Document(path, "markdown", blocks)


# ---------------------------------------------------------------- HTML / XHTML (and inline XBRL)
BLOCK_TAGS = {"p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "caption", "pre", "blockquote", "dt", "dd",
              "figcaption", "div", "section", "article", "table", "tbody", "thead", "tfoot", "ul", "ol", "dl", "body",
              "header", "footer", "main", "aside", "nav", "form", "address", "hr", "center", "td", "th"}
_SKIP = {"script", "style", "head", "title", "noscript", "template"}
_PAGE_BREAK = re.compile(r"(?:page-break-|break-)(before|after)\s*:\s*(always|page|left|right)", re.I)
IX_NAMESPACES = {"http://www.xbrl.org/2008/inlineXBRL", "http://www.xbrl.org/2013/inlineXBRL"}


def local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def namespace(tag) -> str:
    return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""


_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


def _read_html(path: Path, limits: Limits = LIMITS) -> Document:
    from lxml import etree
    from lxml import html as lxml_html

    data = path.read_bytes()
    root = None
    if data.lstrip()[:5] == b"<?xml" or path.suffix.lower() == ".xhtml" or b"inlineXBRL" in data[:4096]:
        try:  # XHTML (every inline XBRL filing): namespaces matter, so parse as XML
            root = etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True))
        except etree.XMLSyntaxError as exc:
            if b"inlineXBRL" in data[:4096]:
                raise BadDocument("corrupt", f"inline XBRL that is not well-formed XML ({exc})") from None
    if root is None:  # HTML, or XHTML that is not well-formed XML (`<br>`, `&nbsp;`): the lenient parser reads it
        text = _XML_DECLARATION.sub("", _html_text(data), count=1)
        parser = lxml_html.HTMLParser(huge_tree=True)  # nesting up to libxml2's hard bound (2048), not 256
        try:
            root = lxml_html.document_fromstring(text, parser=parser)
        except (etree.ParserError, ValueError) as exc:
            raise BadDocument("corrupt", f"not HTML ({exc})") from None
        limit = next((e.message for e in parser.error_log if e.type_name == "ERR_RESOURCE_LIMIT"), None)
        if limit:  # libxml2 stopped there: what follows would be lost without a word
            raise BadDocument("too_deep", f"the HTML parser's bound was hit ({limit}); the text past it cannot be read")
    ixbrl = any(namespace(el.tag) in IX_NAMESPACES for el in root.iter() if isinstance(el.tag, str))
    walker = _HtmlWalker(limits.max_html_depth)
    body = next((el for el in root.iter() if local(el.tag) == "body"), root)
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 3 * limits.max_html_depth + 1000))  # the walk recurses two frames a level
    try:
        walker.walk(body)
    finally:
        sys.setrecursionlimit(before)
    walker.flush()
    date = next((el.get("content") for el in root.iter() if local(el.tag) == "meta"
                 and (el.get("name") or "").lower() in ("date", "dc.date", "dcterms.date") and el.get("content")), None)
    notes = [f"nested deeper than ingest.max_html_depth {limits.max_html_depth}: {walker.flattened} element(s) past "
             "it read as one block's text each"] if walker.flattened else []
    return Document(path, "html", walker.blocks, date, root if ixbrl else None, notes)


def _html_text(data: bytes) -> str:
    head = data[:2048].decode("ascii", "ignore")
    m = re.search(r"charset\s*=\s*[\"']?([A-Za-z0-9_-]+)", head)
    if m and m.group(1).lower().replace("_", "-") not in ("utf-8", "utf8"):
        try:
            return data.decode(m.group(1))
        except (LookupError, UnicodeDecodeError):
            raise BadDocument("unknown_encoding", f"declared charset {m.group(1)} does not decode it") from None
    return decode(data)


class _HtmlWalker:
    """Depth-first over the body: an element without block-level children is one block; its text, with the
    inline XBRL facts inside it. Page breaks from the CSS of any element."""

    def __init__(self, max_depth: int = LIMITS.max_html_depth):
        self.blocks: list[Block] = []
        self.page = 1
        self.max_depth, self.depth, self.flattened = max_depth, 0, 0
        self.loose: list[str] = []  # text directly inside a container, between its block children
        self.loose_facts: list = []

    def flush(self) -> None:
        text = squash(" ".join(self.loose))
        if text:
            self.blocks.append(Block(text, "paragraph", self.page, facts=self.loose_facts))
        self.loose, self.loose_facts = [], []

    def walk(self, el) -> None:
        name = local(el.tag)
        if name in _SKIP or name == "header" and namespace(el.tag) in IX_NAMESPACES or not isinstance(el.tag, str):
            return
        if self.depth >= self.max_depth:  # past the bound: the element's whole text as one block (no recursion)
            self.flush()
            text = squash("".join(_visible_text(el)))
            if text:
                self.blocks.append(Block(text, "paragraph", self.page, facts=_facts_in(el)))
            self.flattened += 1
            return
        self.depth += 1
        try:
            self._walk(el, name)
        finally:
            self.depth -= 1

    def _walk(self, el, name: str) -> None:
        breaks = {m.group(1).lower() for m in _PAGE_BREAK.finditer(el.get("style") or "")}
        if "before" in breaks and (self.blocks or self.loose):
            self.flush()
            self.page += 1
        if name == "table" and not _layout_table(el):
            self.flush()
            rows = [tr for tr in el.iter() if local(tr.tag) == "tr" and _table_of(tr) is el]
            grid = [_html_cells(tr) for tr in rows]
            for kind, text, r in qualify(grid):  # a row written as several lines: each keeps the facts it shows
                facts = [f for f in _facts_in(rows[r]) if squash("".join(f.itertext())) in text]
                self.blocks.append(Block(text, kind, self.page, facts=facts))
        elif name == "tr":  # a row of a layout table: its cells as they are
            self.flush()
            cells = [c for c in (squash("".join(c.itertext())) for c in el if local(c.tag) in ("td", "th")) if c]
            if cells:
                self.blocks.append(Block(" | ".join(cells), "table_row", self.page, facts=_facts_in(el)))
        elif name in BLOCK_TAGS and not any(local(c.tag) in BLOCK_TAGS for c in el.iterdescendants()
                                             if isinstance(c.tag, str)):
            self.flush()
            text = squash("".join(_visible_text(el)))
            if text:
                kind = "heading" if re.fullmatch(r"h[1-6]", name) else "paragraph"
                self.blocks.append(Block(text, kind, self.page, facts=_facts_in(el)))
        elif name in BLOCK_TAGS:
            if el.text and el.text.strip():
                self.loose.append(el.text)
            for child in el:
                if local(child.tag) in BLOCK_TAGS:
                    self.flush()
                    self.walk(child)
                else:
                    self.loose.append("".join(_visible_text(child)))
                    self.loose_facts += _facts_in(child)
                if child.tail and child.tail.strip():
                    self.loose.append(child.tail)
            self.flush()
        else:  # an inline element reached directly (e.g. the body's text)
            self.loose.append("".join(_visible_text(el)))
            self.loose_facts += _facts_in(el)
        if "after" in breaks:
            self.flush()
            self.page += 1


def _layout_table(table) -> bool:
    """A table that lays out a page rather than tabulating numbers: one holding another table, or a cell of prose."""
    return any(local(x.tag) == "table" for x in table.iterdescendants() if isinstance(x.tag, str)) or any(
        local(c.tag) in ("td", "th") and len(squash("".join(c.itertext()))) > 300 for c in table.iter()
        if isinstance(c.tag, str))


def _table_of(tr):
    parent = tr.getparent()
    while parent is not None and local(parent.tag) != "table":
        parent = parent.getparent()
    return parent


def _html_cells(tr) -> list[str | None]:
    """A row's cells in column order; a cell spanning n columns is followed by n − 1 `None` (covered)."""
    cells: list[str | None] = []
    for c in tr:
        if local(c.tag) not in ("td", "th"):
            continue
        cells.append(squash("".join(_visible_text(c))))
        try:
            span = max(1, min(int(c.get("colspan") or 1), 64))
        except ValueError:
            span = 1
        cells += [None] * (span - 1)
    return cells


def _visible_text(el):
    for node in el.iter():
        if local(node.tag) in _SKIP or local(node.tag) == "exclude" and namespace(node.tag) in IX_NAMESPACES:
            continue
        if isinstance(node.tag, str) and node.text:
            yield node.text
        if node is not el and node.tail:
            yield node.tail


def _facts_in(el) -> list:
    return [x for x in el.iter() if isinstance(x.tag, str) and namespace(x.tag) in IX_NAMESPACES
            and local(x.tag) in ("nonfraction", "fraction")]


# ---------------------------------------------------------------- DOCX
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _check_unpacked(path: Path, limits: Limits) -> None:
    """A DOCX is a zip: its members' unpacked size is read from the directory before anything is inflated, so a
    zip bomb (a 1 MB file that unpacks to 1 GB of XML) is refused without the memory it would take."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            unpacked = sum(i.file_size for i in z.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadDocument("corrupt", f"not a readable DOCX ({exc})") from None
    if unpacked > limits.max_bytes:
        raise BadDocument("too_large", f"unpacks to {unpacked >> 20} MB > ingest.max_document_mb "
                                       f"{limits.max_bytes >> 20} (a zip bomb?)")


def _read_docx(path: Path) -> Document:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from lxml import etree

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise BadDocument("corrupt", f"not a readable DOCX ({exc})") from None
    except etree.LxmlError as exc:
        raise BadDocument("corrupt", f"its XML is not well-formed ({type(exc).__name__}: {exc})") from None
    blocks: list[Block] = []
    page = 1
    for el in document.element.body.iterchildren():
        name = local(el.tag)
        if name == "p":
            ppr = el.find(f"{_W}pPr")
            if ppr is not None and ppr.find(f"{_W}pageBreakBefore") is not None and blocks:
                page += 1
            text = squash("".join(t.text or "" for t in el.iter(f"{_W}t")))
            style = _docx_style(document, ppr)
            if text:
                kind = "heading" if style.startswith(("heading", "title")) else "paragraph"
                blocks.append(Block(text, kind, page))
            page += sum(1 for br in el.iter(f"{_W}br") if br.get(f"{_W}type") == "page")
            if ppr is not None and ppr.find(f"{_W}sectPr") is not None:
                page += 1
        elif name == "tbl":
            grid = [_docx_cells(tr) for tr in el.iter(f"{_W}tr")]
            blocks += [Block(text, kind, page) for kind, text, _ in qualify(grid)]
    created = document.core_properties.created
    return Document(path, "docx", blocks, created.date().isoformat() if created else None)


def _docx_cells(tr) -> list[str | None]:
    """A Word row's cells in grid columns; a cell spanning n grid columns (gridSpan) is followed by n − 1 `None`."""
    cells: list[str | None] = []
    for tc in tr.iter(f"{_W}tc"):
        cells.append(squash("".join(t.text or "" for t in tc.iter(f"{_W}t"))))
        span = tc.find(f"{_W}tcPr/{_W}gridSpan")
        try:
            n = max(1, min(int(span.get(f"{_W}val")), 64)) if span is not None else 1
        except (TypeError, ValueError):
            n = 1
        cells += [None] * (n - 1)
    return cells


def _docx_style(document, ppr) -> str:
    if ppr is None or ppr.find(f"{_W}pStyle") is None:
        return ""
    style_id = ppr.find(f"{_W}pStyle").get(f"{_W}val") or ""
    return next((s.name or style_id for s in document.styles if s.style_id == style_id), style_id).lower()
