"""Verdict words: the +1/-1 a free-form judgment states in words ("Consistent: ...", "This sentence is not
consistent with the article", "... does not mention ...").

Used where a reason must be turned into a mark without another LLM call (``dcr -o amc=rule``). It reads only
a verdict the text states -- the word it starts with, else the verdict words of its first sentence -- and
refuses (``ParseError``) when there is none: a reason that states no verdict is unscored, never guessed.
Negative phrases are checked before positive ones, so "not consistent" is never read as "consistent"; a
positive word is read as +1 only with no negation beside it ("Nothing in the SOURCE supports this claim." is -1,
"Consistent? No, ..." is read by its answer, "Correction: ..." is -1), so nothing is +1 by default.
"""

from __future__ import annotations

import re

from halluscope.text.parsing import ParseError

__all__ = ["verdict_mark", "verdict_words"]

ENUMERATION = re.compile(r"^\s*(?:[-*•]+|\(?\d{1,3}[.):]|\[\d{1,3}\])\s*")
"""List numbering or a bullet at the start of a reason ("1.", "(2)", "[3]", "-", "•")."""

_FLAGS = re.I | re.A
"""Case folding for ASCII letters only: under plain ``re.I`` "Conſistent" (long s) or "ınconsistent" (dotless i)
would match the English verdict words; a look-alike spelling states no verdict (see :mod:`halluscope.text.labels`)."""

_LEAD = r"^\W*(?:verdict\W+)?(?:(?:this|the) (?:sentence|text|summary|claim) is )?"

NEGATIVE_START = re.compile(
    _LEAD + r"(?:not consistent|inconsistent|not supported|unsupported|contradict\w*|incorrect|not accurate|"
    r"inaccurate|false|no|not|nothing|none|wrong|error|mistaken|correction|unverifi\w*|fabricated|"
    r"hallucinat\w*)\b",
    _FLAGS,
)
"""A reason that opens with a negative verdict ("Inconsistent:", "This sentence is not consistent ...", "No, ...",
"Nothing in the SOURCE ...", "Correction: ...": a correction says the sentence was wrong)."""

DENIED_PROBLEM = re.compile(
    r"^\W*(?:(?:no|nothing|none)\W*$|(?:no|nothing|none)\W+(?:\w+\W+){0,2}?(?:problems?|issues?|errors?|"
    r"inconsistenc\w*|contradictions?|hallucinations?|mistakes?|wrong|incorrect|inaccurate|false)\b)",
    _FLAGS,
)
"""A reason that denies a problem ("No problem!", "No issues found.", "Nothing wrong.", "None."): it opens with a
negation, yet it does not say the sentence is wrong, nor in so many words that it is consistent -- no verdict."""

POSITIVE_START = re.compile(_LEAD + r"(?:consistent|supported|correct|accurate|true|yes)\b", _FLAGS)
"""A reason that opens with a positive verdict ("Consistent:", "This sentence is consistent ..."), the word ending
there ("Correction" is no "correct")."""

QUESTION = re.compile(_LEAD + r"(?:consistent|supported|correct|accurate|true|inconsistent|unsupported)\s*\?\s*",
                      _FLAGS)
"""A reason that opens by asking ("Consistent? No, ..."): the question is no verdict, its answer follows."""

CONTRADICTED_START = re.compile(r"^[\s:;,.\-–—]*(?:no|not|false|incorrect|inaccurate|wrong|but|however|although|"
                                r"though|except)\b", _FLAGS)
"""A positive opening word followed at once by a negative or restricting one ("Consistent: no, ...", "Supported,
but ..."): two verdicts, or one taken back."""

NEGATIVE_WORDS = re.compile(
    r"\b(?:not consistent|inconsistent|not supported|unsupported|"
    r"(?:does not|doesn't|do not|don't|did not|didn't|cannot|can't|never) (?:support|mention|state|say|confirm)\w*|"
    r"no mention|no evidence|no support|nothing (?:in \w+ \w+ )?(?:supports|states|says|mentions|confirms)|"
    r"not (?:mentioned|stated|found|true|correct|accurate|supported)|contradict\w*|incorrect|inaccurate|"
    r"not accurate|wrong|false|correction|mistaken|misstat\w*|fabricated|hallucinat\w*|unverifi\w*|"
    r"cannot be verified|can't be verified)\b",
    _FLAGS,
)
NEGATION = re.compile(r"\b(?:no|not|nothing|never|neither|nor|none|without|cannot|\w+n't|however|but|although|"
                      r"though|except|instead|rather than|only partly|partially)\b", _FLAGS)
"""Words that can turn a positive verdict word around ("supports nothing", "consistent, except ..."): with one of
them beside a positive word and no negative phrase, the reason is ambiguous and left unmarked, never +1."""
POSITIVE_WORDS = re.compile(r"\b(?:consistent|supported|supports|correct|accurate)\b", _FLAGS)
_FIRST_SENTENCE = re.compile(r"^(.*?)(?:[.!?](?:\s|$)|\n|$)", re.S)
FIRST_SENTENCE_CHARS = 300
"""Only this much of a reason's first sentence is searched for verdict words."""


def _foreign_letters_masked(text: str) -> str:
    """``text`` with every non-ASCII letter replaced by ``x``: a verdict word spelled with a look-alike ("Conſistent",
    "ınconsistent") or glued to a foreign letter ("Consistentı") is then no verdict word, while ``re.A`` word
    boundaries still see a letter there."""
    if text.isascii():
        return text
    return "".join("x" if not ch.isascii() and ch.isalpha() else ch for ch in text)


def verdict_words(text: str) -> int | None:
    """-1 if ``text`` says inconsistent / not supported / contradicts / not mentioned / wrong..., else +1 if it
    says consistent / supported / correct with no negation anywhere in it, else None (no verdict, or a positive
    word beside a negation: "nothing supports", "consistent, but ..."). Negative phrases are checked first."""
    if NEGATIVE_WORDS.search(text):
        return -1
    if POSITIVE_WORDS.search(text) and not NEGATION.search(text):
        return 1
    return None


def verdict_mark(reason: str) -> int:
    """+1/-1 from a reason's stated verdict (AMC's classes: +1 only for a sentence found consistent, -1 for any
    problem reported): the verdict word it starts with ("Consistent: ..." / "Inconsistent: ...", after any list
    numbering; a question such as "Consistent? No, ..." is read by its answer), else the verdict words of its
    first sentence, negative ones first. Raises :class:`ParseError` when the reason states no verdict or an
    ambiguous one (the reason is then unscored, not guessed; never +1 by default)."""
    text = ENUMERATION.sub("", _foreign_letters_masked(reason.strip()), count=1)
    question = QUESTION.match(text)
    if question is not None:
        text = text[question.end():]
    if DENIED_PROBLEM.search(text):
        raise ParseError(f"the reason denies a problem but states no verdict: {reason[:60]!r}")
    if NEGATIVE_START.search(text):
        return -1
    positive = POSITIVE_START.search(text)
    m = _FIRST_SENTENCE.match(text)
    if positive is not None:
        rest = text[positive.end():]
        first = _FIRST_SENTENCE.match(rest)
        if CONTRADICTED_START.match(rest) or NEGATIVE_WORDS.search(first.group(1)[:FIRST_SENTENCE_CHARS] if first else ""):
            raise ParseError(f"the reason states a verdict and its opposite: {reason[:60]!r}")
        return 1
    mark = verdict_words(m.group(1)[:FIRST_SENTENCE_CHARS] if m else "")
    if mark is None:
        raise ParseError(f"the reason does not state a verdict: {reason[:60]!r}")
    return mark
