"""Whether a text is blank: nothing visible left once whitespace and invisible characters are removed."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["BLANK_DETAIL", "is_blank"]

_IGNORABLE = frozenset(
    [
        0x034F,
        0x115F,
        0x1160,
        0x17B4,
        0x17B5,
        0x2800,
        0x3164,
        0xFFA0,
        *range(0x180B, 0x1810),
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)
"""Code points that show nothing although their category is not one of the invisible ones: default-ignorable
fillers and variation selectors, and the blank Braille pattern U+2800 (category So, drawn as an empty cell)."""

_VISIBLE_CATEGORIES = frozenset("LNPS")
"""Letters, numbers, punctuation and symbols: the characters that show something on their own. Everything else
shows nothing by itself: separators (spaces), controls (Cc), format characters (Cf: U+200B, U+2060, U+FEFF, the
tags), unassigned code points (Cn: U+2065, U+FFF0, U+E0080), private-use ones (Co: no agreed glyph), surrogates
(Cs) and combining marks (M: a lone U+0301 has nothing to sit on)."""

_ASCII_VISIBLE = re.compile(r"[!-~]")

BLANK_DETAIL = (
    "only whitespace and invisible characters such as U+200B: control, format, unassigned or private-use "
    "characters, or combining marks with no letter"
)
"""What a blank text that is not plain whitespace holds, for the messages that refuse it."""


def is_blank(text: str) -> bool:
    """True when ``text`` holds no letter, number, punctuation or symbol that shows: nothing but whitespace,
    control characters, format characters (Unicode category Cf: zero-width space U+200B, word joiner U+2060,
    byte-order mark U+FEFF, ...), unassigned and private-use code points, combining marks alone, and the
    default-ignorable fillers of :data:`_IGNORABLE` (U+3164, the blank Braille cell U+2800, ...): such a source or
    target is refused like an empty one. Stops at the first visible character (linear at worst)."""
    if not text.strip():
        return True
    if text.isascii():
        return _ASCII_VISIBLE.search(text) is None
    for ch in text:
        if unicodedata.category(ch)[0] in _VISIBLE_CATEGORIES and ord(ch) not in _IGNORABLE:
            return False
    return True
