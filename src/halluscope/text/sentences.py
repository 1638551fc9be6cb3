"""Sentence segmentation with character offsets into the original text.

pysbd handles abbreviations (Dr., U.S., e.g.), decimals and quotes; we first cut at line breaks that
end a block (blank lines, bullet/numbered list items) because pysbd joins those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from halluscope.records import Span

_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Sentence:
    text: str
    span: Span
    index: int


@lru_cache(maxsize=4)
def _segmenter(language: str):
    import pysbd

    return pysbd.Segmenter(language=language, clean=False, char_span=False)


def _blocks(text: str) -> list[tuple[int, int]]:
    """Split into blocks at blank lines and before list items; other single newlines stay inside."""
    blocks: list[tuple[int, int]] = []
    start = 0
    pos = 0
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        end = pos + len(line)
        next_line = lines[i + 1] if i + 1 < len(lines) else None
        cut = (
            not line.strip()
            or next_line is None
            or not next_line.strip()
            or _LIST_ITEM.match(next_line) is not None
            or _LIST_ITEM.match(line) is not None
        )
        if cut:
            if text[start:end].strip():
                blocks.append((start, end))
            start = end
        pos = end
    if start < len(text) and text[start:].strip():
        blocks.append((start, len(text)))
    return blocks


def split_sentences(text: str, language: str = "en") -> list[Sentence]:
    """Sentences of ``text`` with spans such that ``text[s.span.start:s.span.end] == s.text``
    (leading/trailing whitespace excluded). Every non-whitespace character belongs to exactly one sentence:
    pysbd only proposes where sentences start, and text it drops (it does, e.g. "a.??") stays attached to
    the sentence before it."""
    out: list[Sentence] = []
    for b_start, b_end in _blocks(text):
        block = text[b_start:b_end]
        starts: list[int] = []
        cursor = 0
        for seg in _segmenter(language).segment(block):
            piece = seg.strip()
            found = block.find(piece, cursor) if piece else -1
            if found < 0:
                continue
            starts.append(found)
            cursor = found + len(piece)
        if not starts or starts[0] != 0:
            starts.insert(0, 0)
        for begin, end in zip(starts, starts[1:] + [len(block)]):
            region = block[begin:end]
            piece = region.strip()
            if not piece:
                continue
            start = b_start + begin + (len(region) - len(region.lstrip()))
            out.append(Sentence(text=piece, span=Span(start=start, end=start + len(piece)), index=len(out)))
    return out
