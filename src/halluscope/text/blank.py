"""Whether a text is blank: nothing visible left once whitespace and invisible characters are removed."""

from __future__ import annotations

import unicodedata

__all__ = ["is_blank"]

_IGNORABLE = frozenset(
    [
        0x034F,
        0x115F,
        0x1160,
        0x17B4,
        0x17B5,
        0x3164,
        0xFFA0,
        *range(0x180B, 0x1810),
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)
"""Default-ignorable code points outside category Cf (fillers, variation selectors): invisible too."""


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace, format characters (Unicode category Cf: zero-width space
    U+200B, word joiner U+2060, byte-order mark U+FEFF, ...) and other default-ignorable code points: such a
    source or target is refused like an empty one. Stops at the first visible character (linear at worst)."""
    if not text.strip():
        return True
    if text.isascii():
        return False
    for ch in text:
        if not (ch.isspace() or unicodedata.category(ch) == "Cf" or ord(ch) in _IGNORABLE):
            return False
    return True
