"""Stated labels compared exactly: a verdict word from a model's reply ("PASS", "yes", "Consistent") counts only
when it *is* one of the allowed words, letter for letter, in another case at most.

Unicode has letters that fold onto ASCII ones: ``"ſ".upper() == "S"`` (U+017F long s), ``"ı".upper() == "I"``
(dotless i), the Kelvin sign U+212A lower-cases to ``"k"``, and ``re.I`` matches them the same way. NFKC maps
some of them too (``ſ`` -> ``s``, ``K`` -> ``K``, full-width ``ＰＡＳＳ`` -> ``PASS``). So ``"paſs"``, ``"faıl"`` or
``"yeſ"`` would pass a case-insensitive (or NFKC-normalised) comparison while being no word of the allowed set.
A label is therefore checked to be plain ASCII *as written* -- any letter that normalisation or case folding
would turn into an ASCII one is refused, not folded -- and only then compared without case (its NFKC form is
itself then). Anything else is refused, never mapped to the nearest allowed word.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

__all__ = ["ascii_text", "stated_label"]


def ascii_text(text: str) -> str | None:
    """``text`` when it is plain ASCII (then it is its own NFKC form), else None: a look-alike, compatibility or
    foreign letter is in it. Use it before any case-insensitive comparison or ``re.I`` match of a verdict word."""
    if not text.isascii():
        return None
    return unicodedata.normalize("NFKC", text)


def stated_label(value: object, allowed: Iterable[str]) -> str | None:
    """The allowed label that ``value`` states (surrounding whitespace and case aside), or None: not a string,
    not ASCII as written (``"paſs"``, ``"faıl"``, full-width, Cyrillic or Greek look-alikes), or not exactly one
    of ``allowed``."""
    if not isinstance(value, str):
        return None
    text = ascii_text(value.strip())
    if text is None:
        return None
    wanted = {label.upper(): label for label in allowed}
    return wanted.get(text.upper())
