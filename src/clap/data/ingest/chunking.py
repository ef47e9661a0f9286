"""Blocks → chunks, split on the document's structure under a size bound (`ingest.max_chunk_chars`).

A chunk never crosses a page or a section: a heading starts a new one (and leads it, so a retrieved chunk says
where it comes from), as does a new page. Blocks are added while the chunk stays within the bound; a table row
is never cut (one row longer than the bound is a chunk of its own); a paragraph longer than the bound is cut
at sentence ends, then at spaces. Blocks are joined by line breaks, which end a sentence for the evidence
quotes (clap.evaluate.decoding), so one table row is one quotable line.

A table cut by the bound repeats its header lines at the head of each chunk it continues in: a row carries its
column headers, but the caption or header row that declares the table's scale or unit ("(in millions)",
"Emissions reported in tonnes CO2e") is written once, and a retrieved continuation would otherwise state bare
amounts (clap.evaluate.decoding.units_around reads a chunk's header lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clap.data.ingest.blocks import Block

_SENTENCE = re.compile(r"(?<=[.!?;。！？；])\s+|(?<=[。！？；])")


@dataclass
class Chunk:
    page: int
    section: str
    lines: list[str] = field(default_factory=list)
    size: int = 0

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def split_long(text: str, max_chars: int) -> list[str]:
    """A paragraph longer than `max_chars` in pieces at sentence ends (then spaces, then hard cuts)."""
    if len(text) <= max_chars:
        return [text]
    pieces, current = [], ""
    for sentence in (s for s in _SENTENCE.split(text) if s):
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            if current:
                pieces.append(current)
                current = ""
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        joined = f"{current} {sentence}".strip() if current and current[-1:].isascii() else current + sentence
        if len(joined) > max_chars and current:
            pieces.append(current)
            current = sentence
        else:
            current = joined
    if current:
        pieces.append(current)
    return [p for p in pieces if p]


def chunk_blocks(blocks: list[Block], max_chars: int) -> tuple[list[Chunk], list[int]]:
    """The chunks of one document, and for each block the index of the chunk that holds it (a split paragraph:
    its first piece's chunk)."""
    chunks: list[Chunk] = []
    where: list[int] = []
    current: Chunk | None = None
    headers: list[str] = []  # the header lines of the table being read
    previous_kind = None
    for block in blocks:
        if block.kind == "table_header":
            headers = [*headers, block.text] if previous_kind == "table_header" else [block.text]
        elif block.kind != "table_row":
            headers = []
        previous_kind = block.kind
        pieces = [block.text] if block.kind in ("table_row", "table_header") else split_long(block.text, max_chars)
        first = None
        for piece in pieces:
            fresh = (current is None or block.kind == "heading" or (block.page, block.section) != (current.page, current.section)
                     or current.size + len(piece) + 1 > max_chars)
            if fresh:
                current = Chunk(block.page, block.section)
                chunks.append(current)
                if block.kind == "table_row" and headers:
                    current.lines.extend(headers)
                    current.size = len("\n".join(headers))
            current.lines.append(piece)
            current.size += len(piece) + (1 if current.size else 0)
            first = len(chunks) - 1 if first is None else first
        where.append(first)
    return chunks, where
