"""``<tag>…</tag>`` blocks of a model reply, found in one pass.

The regex ``<think>.*?</think>`` (DOTALL) is quadratic on a reply of many openers and no closer: every
opener scans to the end of the reply before failing (28,000 ``<think>`` took minutes, holding the GIL). Here
each opener looks for its closer once, and the first opener without one ends the search: a later opener
cannot have a closer either. Same matches as that regex's ``finditer`` (case-insensitive, shortest block).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import NamedTuple


class Block(NamedTuple):
    start: int  # index of "<tag>"
    inner_start: int
    inner_end: int  # index of "</tag>"
    end: int  # just past "</tag>"


@lru_cache(maxsize=32)
def _markers(tag: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    name = re.escape(tag)
    return re.compile(f"<{name}>", re.I), re.compile(f"</{name}>", re.I)


def tag_blocks(text: str, tag: str) -> Iterator[Block]:
    """Every closed ``<tag>…</tag>`` block, left to right, not overlapping (linear in ``len(text)``)."""
    opener, closer = _markers(tag)
    pos = 0
    while (start := opener.search(text, pos)) is not None:
        close = closer.search(text, start.end())
        if close is None:
            return  # no closer after this opener, so none after any later opener either
        yield Block(start.start(), start.end(), close.start(), close.end())
        pos = close.end()


def tag_contents(text: str, tag: str) -> list[str]:
    """The inner text of every closed block (what ``re.findall(r"<tag>(.*?)</tag>", text, re.S | re.I)`` gives)."""
    return [text[b.inner_start : b.inner_end] for b in tag_blocks(text, tag)]


def strip_tag_blocks(text: str, tag: str) -> str:
    """``text`` without its closed ``<tag>…</tag>`` blocks; an unclosed opener stays as it is."""
    parts: list[str] = []
    pos = 0
    for block in tag_blocks(text, tag):
        parts.append(text[pos : block.start])
        pos = block.end
    if pos == 0:
        return text
    parts.append(text[pos:])
    return "".join(parts)


def strip_think(text: str) -> str:
    """``text`` without reasoning models' ``<think>…</think>`` blocks."""
    return strip_tag_blocks(text, "think")
