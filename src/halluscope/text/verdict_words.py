"""Verdict words: the +1/-1 a free-form judgment states in words ("Consistent: ...", "This sentence is not
consistent with the article", "... does not mention ...").

Used where a reason must be turned into a mark without another LLM call (``dcr -o amc=rule``). It reads only
a verdict the text states -- the word it starts with, else the verdict words of its first sentence -- and
refuses (``ParseError``) when there is none: a reason that states no verdict is unscored, never guessed.
Negative phrases are checked before positive ones, so "not consistent" is never read as "consistent"; a
positive word is read as +1 only when nothing anywhere in the reason hedges, restricts, corrects, negates or
questions it ("Nothing in the SOURCE supports this claim." is -1, "Consistent? No, ..." is read by its answer,
"Correction: ..." is -1, "Consistent (except the funding ...)" and "Mostly consistent, yet ..." are unmarked), so
nothing is +1 by default.

What takes a +1 back is derived from one list of reason forms, :data:`REASON_FORMS` (hedges, exceptions,
corrections, negations, second thoughts, questions); ``tests/test_verdict_words_forms.py`` checks the mapping by
property over generated phrasings (every form after every positive opener is never +1).
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

QUESTION = re.compile(
    r"^\W*(?:(?:is|does|was) (?:it|this|that|the (?:sentence|text|summary|claim)) (?:really )?)?"
    r"(?:(?:this|the) (?:sentence|text|summary|claim) is )?"
    r"(?:consistent|supported|correct|accurate|true|inconsistent|unsupported)\s*\?\s*",
    _FLAGS,
)
"""A reason that opens by asking ("Consistent? No, ..."): the question is no verdict, its answer follows."""

CONTRADICTED_START = re.compile(
    r"^[\s:;,.\-–—]*(?:no|not|false|incorrect|inaccurate|wrong|but|however|although|"
    r"though|except)\b",
    _FLAGS,
)
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
NEGATION = re.compile(
    r"\b(?:no|not|nothing|never|neither|nor|none|without|cannot|\w+n't|however|but|although|"
    r"though|except|instead|rather than|only partly|partially)\b",
    _FLAGS,
)
"""Words that can turn a positive verdict word around ("supports nothing", "consistent, except ..."): with one of
them beside a positive word and no negative phrase, the reason is ambiguous and left unmarked, never +1."""
POSITIVE_WORDS = re.compile(r"\b(?:consistent|supported|supports|correct|accurate)\b", _FLAGS)
REASON_FORMS: dict[str, tuple[str, ...]] = {
    "hedge": (
        "mostly",
        "largely",
        "partly",
        "partially",
        "in part",
        "in parts",
        "somewhat",
        "broadly",
        "generally",
        "mainly",
        "chiefly",
        "almost",
        "nearly",
        "roughly",
        "more or less",
        "to some extent",
        "to a degree",
        "in the main",
        "by and large",
        "arguably",
        "apparently",
        "probably",
        "possibly",
        "perhaps",
        "maybe",
        "likely",
        "seems",
        "seem",
        "appears",
        "sort of",
        "kind of",
        "not entirely",
        "not fully",
        "not completely",
        "not quite",
        "only",
        "half",
    ),
    "exception": (
        "except",
        "excepting",
        "exception",
        "apart from",
        "aside from",
        "other than",
        "save for",
        "barring",
        "besides",
        "but",
        "however",
        "although",
        "though",
        "yet",
        "while",
        "whereas",
        "nevertheless",
        "nonetheless",
        "still",
        "even so",
        "that said",
        "having said",
        "unless",
        "beyond",
    ),
    "correction": (
        "actually",
        "in fact",
        "in reality",
        "correction",
        "correct that",
        "rather",
        "instead",
        "should be",
        "should read",
        "should say",
        "misstat",
        "overstat",
        "understat",
        "exaggerat",
        "unfounded",
        "baseless",
        "unsubstantiated",
        "unclear",
        "ambiguous",
        "disput",
    ),
    "second thought": (
        "on reflection",
        "on second thought",
        "second thought",
        "on closer",
        "looking again",
        "re-reading",
        "rereading",
        "reconsider",
        "wait",
        "scratch that",
        "i mean",
        "on balance",
        "changed my mind",
        "retract",
        "revise",
        "revised",
        "update",
        "updated",
    ),
    "negation": (
        "no",
        "not",
        "nothing",
        "never",
        "neither",
        "nor",
        "none",
        "nobody",
        "without",
        "cannot",
        "n't",
        "lack",
        "lacks",
        "lacking",
        "absent",
        "missing",
        "fail",
        "fails",
        "omit",
        "omits",
        "contrary",
        "opposite",
        "differs",
        "different",
        "disagree",
    ),
}
"""The reason forms that take a positive verdict word back or leave it in doubt, by kind: a reason that holds any
of them (as a word or a word prefix, ASCII case-folded) is never read as +1 -- it is -1 when it states a negative
verdict, else unmarked. A question mark anywhere after the opening question does the same (a verdict asked, not
stated)."""


def _form_pattern(forms: dict[str, tuple[str, ...]]) -> re.Pattern[str]:
    words = sorted({w for kind in forms.values() for w in kind}, key=len, reverse=True)
    parts = []
    for w in words:
        body = r"\s+".join(re.escape(x) for x in w.split())
        if w == "n't":
            parts.append(r"n['\u2019]t\b")
        elif w in ("misstat", "overstat", "understat", "exaggerat", "disput", "reconsider", "retract", "revise"):
            parts.append(r"\b" + body + r"\w*")
        else:
            parts.append(r"\b" + body + r"\b")
    return re.compile("|".join(parts) + r"|\?|\(", _FLAGS)


TAKEN_BACK = _form_pattern(REASON_FORMS)
"""Any reason form of :data:`REASON_FORMS`, a question mark or a parenthesis (an aside: "Consistent (except ...)")."""

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
    if POSITIVE_WORDS.search(text) and not NEGATION.search(text) and not TAKEN_BACK.search(text):
        return 1
    return None


def verdict_mark(reason: str) -> int:
    """+1/-1 from a reason's stated verdict (AMC's classes: +1 only for a sentence found consistent, -1 for any
    problem reported): the verdict word it starts with ("Consistent: ..." / "Inconsistent: ...", after any list
    numbering; a question such as "Consistent? No, ..." is read by its answer), else the verdict words of its
    first sentence, negative ones first; +1 only when no reason form of :data:`REASON_FORMS` occurs anywhere in
    the reason (after an opening question). Raises :class:`ParseError` when the reason states no verdict or an
    ambiguous one (the reason is then unscored, not guessed; never +1 by default)."""
    text = ENUMERATION.sub("", _foreign_letters_masked(reason.strip()), count=1)
    question = QUESTION.match(text)
    if question is not None:
        text = text[question.end() :]
    if DENIED_PROBLEM.search(text):
        raise ParseError(f"the reason denies a problem but states no verdict: {reason[:60]!r}")
    if NEGATIVE_START.search(text):
        return -1
    positive = POSITIVE_START.search(text)
    m = _FIRST_SENTENCE.match(text)
    if positive is not None:
        rest = text[positive.end() :]
        first = _FIRST_SENTENCE.match(rest)
        if CONTRADICTED_START.match(rest) or NEGATIVE_WORDS.search(
            first.group(1)[:FIRST_SENTENCE_CHARS] if first else ""
        ):
            raise ParseError(f"the reason states a verdict and its opposite: {reason[:60]!r}")
        _never_taken_back(text, reason)
        return 1
    mark = verdict_words(m.group(1)[:FIRST_SENTENCE_CHARS] if m else "")
    if mark is None:
        raise ParseError(f"the reason does not state a verdict: {reason[:60]!r}")
    if mark == 1:
        _never_taken_back(text, reason)
    return mark


def _never_taken_back(text: str, reason: str) -> None:
    """Raise :class:`ParseError` when ``text`` (the whole rest of a reason) holds a reason form that hedges,
    restricts, corrects, negates or questions its positive verdict (:data:`REASON_FORMS`)."""
    found = TAKEN_BACK.search(text)
    if found is not None:
        raise ParseError(f"the reason qualifies its positive verdict ({found.group(0)!r}): {reason[:60]!r}")
