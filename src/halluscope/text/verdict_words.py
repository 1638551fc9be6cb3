"""Verdict words: the +1/-1 a free-form judgment states in words ("Consistent: ...", "This sentence is not
consistent with the article", "... does not mention ...").

Used where a reason must be turned into a mark without another LLM call (``dcr -o amc=rule``). It reads only
a verdict the text states -- the word it starts with, else the verdict words of its first sentence -- and
refuses (``ParseError``) when there is none: a reason that states no verdict is unscored, never guessed.
Negative phrases are checked before positive ones, so "not consistent" is never read as "consistent".
"""

from __future__ import annotations

import re

from halluscope.text.parsing import ParseError

__all__ = ["verdict_mark", "verdict_words"]

ENUMERATION = re.compile(r"^\s*(?:[-*•]+|\(?\d{1,3}[.):]|\[\d{1,3}\])\s*")
"""List numbering or a bullet at the start of a reason ("1.", "(2)", "[3]", "-", "•")."""

NEGATIVE_START = re.compile(
    r"^\W*(?:verdict\W+)?(?:(?:this|the) (?:sentence|text|summary) is )?"
    r"(?:not consistent|inconsistent|not supported|unsupported|contradict|incorrect|not accurate|inaccurate|"
    r"false\b|no\b)",
    re.I,
)
"""A reason that opens with a negative verdict ("Inconsistent:", "This sentence is not consistent ...")."""

POSITIVE_START = re.compile(
    r"^\W*(?:verdict\W+)?(?:(?:this|the) (?:sentence|text|summary) is )?"
    r"(?:consistent|supported|correct|accurate|true\b|yes\b)",
    re.I,
)
"""A reason that opens with a positive verdict ("Consistent:", "This sentence is consistent ...")."""

NEGATIVE_WORDS = re.compile(
    r"\b(?:not consistent|inconsistent|not supported|unsupported|"
    r"(?:does not|doesn't|do not|don't) (?:support|mention|state)|no mention|"
    r"not (?:mentioned|stated|found)|contradict\w*|incorrect|inaccurate|not accurate)\b",
    re.I,
)
POSITIVE_WORDS = re.compile(r"\b(?:consistent|supported|supports|correct|accurate)\b", re.I)
_FIRST_SENTENCE = re.compile(r"^(.*?)(?:[.!?](?:\s|$)|\n|$)", re.S)
FIRST_SENTENCE_CHARS = 300
"""Only this much of a reason's first sentence is searched for verdict words."""


def verdict_words(text: str) -> int | None:
    """-1 if ``text`` says inconsistent / not supported / contradicts / not mentioned..., else +1 if it says
    consistent / supported / correct, else None. Negative phrases are checked first."""
    if NEGATIVE_WORDS.search(text):
        return -1
    if POSITIVE_WORDS.search(text):
        return 1
    return None


def verdict_mark(reason: str) -> int:
    """+1/-1 from a reason's stated verdict: the verdict word it starts with ("Consistent: ..." /
    "Inconsistent: ...", after any list numbering), else the verdict words of its first sentence, negative
    ones first. Raises :class:`ParseError` when the first sentence states no verdict (the reason is then
    unscored, not guessed)."""
    text = ENUMERATION.sub("", reason.strip(), count=1)
    if NEGATIVE_START.search(text):
        return -1
    if POSITIVE_START.search(text):
        return 1
    m = _FIRST_SENTENCE.match(text)
    mark = verdict_words(m.group(1)[:FIRST_SENTENCE_CHARS] if m else "")
    if mark is None:
        raise ParseError(f"the reason does not state a verdict: {reason[:60]!r}")
    return mark
