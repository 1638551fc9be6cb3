"""Sentence segmentation with character offsets into the original text.

pysbd handles abbreviations (Dr., U.S., e.g.), decimals and quotes; we first cut at line breaks that
end a block (blank lines, bullet/numbered list items) because pysbd joins those.

pysbd's time grows quadratically with the length of what it is given (it searches the whole text again
for every sentence it found), so it never sees more than ``MAX_WINDOW`` characters at once: a longer block
is read in windows cut at whitespace, and each window's last sentence (which may continue past the cut)
starts the next window, so every boundary is found with its whole sentence in view (on 8k-32k-word blocks
the sentences are identical to one pysbd pass). Splitting is then linear, ~12 us per character: measured
on a 2-core machine under load, a 1,000,000-word block with no blank line (5.3 M characters) took 65 s,
where one pysbd pass over just 32,000 words took 45 s (16,000 words: 9.6 s). pysbd itself sets that pace.

Text without sentence breaks is not given to pysbd at all: a window with no sentence-ending mark (``.``, ``!``,
``?``, ``;``, ``:``, ``…``, their full-width forms, or a line break) cannot hold a sentence boundary, and pysbd was
slowest there (about 30 us per character, holding the GIL in long regular-expression calls: 5 MB without a break took
the gate 48 s and 765 MB). Such a run is cut at whitespace into pieces of at most ``MAX_WINDOW`` (5,000) characters,
each one "sentence", and a warning on the ``halluscope.text.sentences`` logger says how many characters were cut so.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from halluscope.records import Span

_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")

MAX_WINDOW = 5_000
"""Most characters handed to pysbd in one call (a longer block is read in overlapping windows); also the longest
piece a run without sentence breaks is cut into."""

_SENTENCE_MARK = re.compile(r"[.!?;:…。！？；：\n\r\u2028\u2029]")
"""A character that can end a sentence (pysbd also ends one at a line break): a window without one holds no
boundary and is not given to pysbd."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sentence:
    text: str
    span: Span
    index: int


_PER_THREAD = threading.local()


def _segmenter(language: str) -> Any:
    """One pysbd Segmenter per thread and language: a Segmenter keeps the text it is splitting on itself, so
    one shared by worker threads (sources indexed in parallel) returned one text's sentences for another."""
    import pysbd

    cache = _PER_THREAD.__dict__.setdefault("segmenters", {})
    if language not in cache:
        cache[language] = pysbd.Segmenter(language=language, clean=False, char_span=False)
    return cache[language]


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


def _pysbd_starts(piece: str, language: str) -> list[int]:
    """Offsets in ``piece`` where pysbd starts a sentence (ascending)."""
    starts: list[int] = []
    cursor = 0
    for seg in _segmenter(language).segment(piece):
        stripped = seg.strip()
        found = piece.find(stripped, cursor) if stripped else -1
        if found < 0:
            continue
        starts.append(found)
        cursor = found + len(stripped)
    return starts


def _window_end(block: str, start: int, window: int) -> int:
    """End of the window opened at ``start``: the block's end if it is near, else the last whitespace in the
    window's second half (a hard cut only for a run of ``window // 2`` characters without any)."""
    limit = start + window
    if limit >= len(block):
        return len(block)
    for i in range(limit, start + window // 2, -1):
        if block[i - 1].isspace():
            return i
    return limit


_VISIBLE = re.compile(r"\S")


def _first_visible(block: str, start: int, end: int) -> list[int]:
    """The one sentence start of ``block[start:end]`` when it holds no sentence mark: its first non-space."""
    m = _VISIBLE.search(block, start, end)
    return [] if m is None else [m.start()]


def _sentence_starts(
    block: str, language: str, window: int | None = None, *, progress: Callable[[int], object] | None = None
) -> list[int]:
    """Sentence starts in ``block``, with pysbd never given more than ``window`` (``MAX_WINDOW``) characters.
    ``progress`` is called with the characters done after each window."""
    window = window or MAX_WINDOW
    if len(block) <= window:
        found = _pysbd_starts(block, language) if _SENTENCE_MARK.search(block) else _first_visible(block, 0, len(block))
        if progress is not None:
            progress(len(block))
        return found
    starts: list[int] = []
    pos = 0
    unbroken = 0  # characters cut without pysbd (no sentence mark in their window)
    while pos < len(block):
        end = _window_end(block, pos, window)
        if _SENTENCE_MARK.search(block, pos, end) is None:
            found = _first_visible(block, pos, end)
            unbroken += end - pos
        else:
            found = [pos + s for s in _pysbd_starts(block[pos:end], language)]
        if end == len(block) or len(found) < 2:
            # the block's last window, or one sentence longer than the window: cut it at the window's end
            starts.extend(found)
            done, pos = end - pos, end
        else:
            # the window's last sentence may go on past the cut: the next window starts with it
            starts.extend(found[:-1])
            done, pos = found[-1] - pos, found[-1]
        if progress is not None:
            progress(done)
    if unbroken:
        _log.warning(
            "%d characters without a sentence break were cut into pieces of at most %d characters "
            "(not split into sentences)",
            unbroken,
            window,
        )
    return starts


def split_sentences(
    text: str, language: str = "en", *, progress: Callable[[int], object] | None = None
) -> list[Sentence]:
    """Sentences of ``text`` with spans such that ``text[s.span.start:s.span.end] == s.text``
    (leading/trailing whitespace excluded). Every non-whitespace character belongs to exactly one sentence:
    pysbd only proposes where sentences start, and text it drops (it does, e.g. "a.??") stays attached to
    the sentence before it. Linear in ``len(text)`` (see the module docstring). ``progress`` (e.g. a progress
    bar's ``update``) is called with the characters split so far, window by window."""
    out: list[Sentence] = []
    for b_start, b_end in _blocks(text):
        block = text[b_start:b_end]
        starts = _sentence_starts(block, language, progress=progress)
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
