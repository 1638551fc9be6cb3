"""Verdict words: the +1/-1 a free-form judgment states in words ("Consistent: ...", "This sentence is not
consistent with the article", "... does not mention ...").

Used where a reason must be turned into a mark without another LLM call (``dcr -o amc=rule``; AMC's classes in the
DCR paper: +1 for a sentence found consistent, -1 otherwise). A reason is read by its structure: its stated verdict
(the word it starts with, after any list numbering or an opening question, else the verdict words of its first
sentence) and any qualifier of that verdict.

* A negative verdict is -1, whatever qualifies it ("Inconsistent, albeit only slightly: ..." reports a problem).
* A positive verdict is +1 only when nothing qualifies it: its own clause holds nothing but a complement naming the
  source ("consistent with the article") before the explanation (":", ".", ";", a dash, ", as ...", ", the article
  states ..."), so "Consistent, give or take a year", "Consistent in the essentials" or "Consistent, bar the date"
  state it only in part whatever the words; an -ly adverb on the verdict word ("largely", "reasonably consistent")
  hedges it unless it strengthens it ("fully", "clearly"); and no qualifier occurs anywhere in the reason: a reason
  form of :data:`REASON_FORMS` (hedges, exceptions such as "albeit", "save that", "... aside", problems conceded
  such as "with one discrepancy", corrections, second thoughts, negations), "off" as a predicate ("the amount is
  off"), a degree word on a deviation ("slightly high"), a question mark or a parenthesis. A problem denied after
  the verdict ("Consistent: no discrepancies.") supports it and is no qualifier. A qualified positive verdict is
  unscored with the qualifier's kind and words (:func:`qualifier`), never +1.
* A reason that does not decide ("Not sure whether ...", "Neither consistent nor inconsistent", "Not inconsistent",
  "Hard to say"), states no verdict, or denies a problem without one ("No problem!") is unscored.

So nothing is +1 by default, and what the rule cannot decide is unscored, not +1 (nor -1).
``tests/test_verdict_words_forms.py`` checks the forms by property over generated phrasings (every form after every
positive opener is never +1); ``tests/test_trust_boundaries_parsing.py`` holds a table of hedged, clear and
undecided reasons.
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
        "essentially",
        "basically",
        "technically",
        "substantially",
        "overall",
        "on the whole",
        "for the most part",
        "in most respects",
        "in spirit",
        "in substance",
        "in general",
        "close enough",
        "close to",
        "enough",
        "approximately",
        "approximate",
        "loosely",
        "reasonably",
        "fairly",
        "ish",
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
        "albeit",
        "notwithstanding",
        "despite",
        "in spite of",
        "granted",
        "admittedly",
        "aside",
        "apart",
        "save that",
        "save where",
        "save one",
        "saving",
        "excluding",
        "if",
        "provided",
        "assuming",
        "as long as",
        "so long as",
        "then again",
        "on the other hand",
        "mind you",
        "to be fair",
        "strictly speaking",
        "to be precise",
        "more precisely",
        "caveat",
        "caveats",
    ),
    "conceded problem": (
        "discrepancy",
        "discrepancies",
        "inaccuracy",
        "inaccuracies",
        "inaccurate",
        "incorrect",
        "wrong",
        "error",
        "errors",
        "mistake",
        "mistakes",
        "mismatch",
        "mismatches",
        "inconsistency",
        "inconsistencies",
        "issue",
        "issues",
        "problem",
        "problems",
        "flaw",
        "flaws",
        "quibble",
        "quibbles",
        "nitpick",
        "glitch",
        "slip",
        "typo",
        "typos",
        "omission",
        "omissions",
        "deviation",
        "deviates",
        "divergence",
        "diverges",
        "conflict",
        "conflicts",
        "contradiction",
        "imprecise",
        "imprecision",
        "inexact",
        "rounded",
        "rounding",
        "misleading",
        "mixed up",
        "confuses",
        "conflates",
        "swapped",
        "oversimplif",
        "simplif",
        "off by",
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


PREFIXES = frozenset(
    (
        "misstat",
        "overstat",
        "understat",
        "exaggerat",
        "disput",
        "reconsider",
        "retract",
        "revise",
        "oversimplif",
        "simplif",
    )
)
"""Forms of :data:`REASON_FORMS` that match as the start of a word ("misstated", "oversimplifies")."""


def _form_pattern(forms: dict[str, tuple[str, ...]]) -> re.Pattern[str]:
    words = sorted({w for kind in forms.values() for w in kind}, key=len, reverse=True)
    parts = []
    for w in words:
        body = r"\s+".join(re.escape(x) for x in w.split())
        if w == "n't":
            parts.append(r"n['\u2019]t\b")
        elif w in PREFIXES:
            parts.append(r"\b" + body + r"\w*")
        else:
            parts.append(r"\b" + body + r"\b")
    return re.compile("|".join(parts) + r"|\?|\(", _FLAGS)


TAKEN_BACK = _form_pattern(REASON_FORMS)
"""Any reason form of :data:`REASON_FORMS`, a question mark or a parenthesis (an aside: "Consistent (except ...)")."""

_PROBLEM_NOUNS = (
    r"(?:discrepanc(?:y|ies)|inaccurac(?:y|ies)|errors?|mistakes?|mismatch(?:es)?|inconsistenc(?:y|ies)|issues?|"
    r"problems?|flaws?|contradictions?|conflicts?|omissions?|deviations?|differences?)"
)
DENIED_PROBLEM_AFTER = re.compile(
    r"\b(?:no|with no|without(?: any)?|not a single|not one|free (?:of|from))\s+(?:(?:factual|"
    r"other|such|further|additional)\s+)?" + _PROBLEM_NOUNS + r"\b"
    r"(?:\s+(?:found|detected|noted|identified|at all))?|"
    r"\bnothing\s+(?:is\s+)?(?:wrong|incorrect|inaccurate|missing)\b",
    _FLAGS,
)
"""A problem denied after a positive verdict ("Consistent: no discrepancies.", "..., with no errors", "nothing
wrong"): it supports the verdict, so it is no qualifier (removed before the reason's qualifiers are looked for).
Only a problem *noun* denied counts: "not April" may correct the sentence, and stays a negation; "no major errors"
or "no obvious problem" leaves room for lesser ones, and stays a qualifier."""

OFF_PREDICATE = re.compile(
    r"\b(?:is|are|was|were|be|been|being|seems?|looks?|appears?|slightly|somewhat|a bit|a little|a tad|a touch|way|far|"
    r"rather|too|quite)\s+off\b|\boff\s+by\b",
    _FLAGS,
)
""""off" as a predicate ("the amount is off", "slightly off", "off by one"): a deviation conceded. Only after a
copula or a degree word, so that "set off" or "off the coast" in a restated fact is no qualifier."""

DEVIATION = re.compile(
    r"\b(?:slightly|somewhat|marginally|a bit|a little|a tad|a touch|not quite|not exactly|not precisely)\s+"
    r"(?:off|wrong|different|differs?|inaccurate|imprecise|overstated|understated|exaggerated|inflated|high|low|higher|lower|early|"
    r"late|earlier|later|more|less|misleading|right)\b",
    _FLAGS,
)
"""A degree word on a deviation ("slightly different", "a bit high", "not quite right"): a problem conceded."""

_INTENSIFIERS = (
    "fully|entirely|completely|totally|wholly|perfectly|clearly|certainly|definitely|absolutely|factually|directly|"
    "explicitly|exactly|precisely|strictly|truly|really|plainly|unambiguously|unequivocally"
)
HEDGED_VERDICT = re.compile(
    r"\b(?!(?:" + _INTENSIFIERS + r")\b)([a-z]+ly)\s+(?:consistent|supported|correct|accurate|true)\b", _FLAGS
)
"""An adverb in -ly on the verdict word itself ("largely consistent", "reasonably accurate", "superficially
correct"): the verdict is stated only to a degree, whatever the adverb (unlisted ones too), unless it is one that
strengthens it ("fully", "clearly", "factually", ...)."""

STRUCTURAL_QUALIFIERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hedge", HEDGED_VERDICT),
    ("conceded problem", OFF_PREDICATE),
    ("conceded problem", DEVIATION),
)
"""Qualifiers found by the shape of a phrase rather than by a word of :data:`REASON_FORMS`."""

SOURCE_NOUN = (
    r"(?:article|source|document|text|passage|context|reference|paragraph|excerpt|report|story|original|evidence|"
    r"input|summary|sentence|claim)s?"
)
_SOURCE_PHRASE = r"(?:(?:the|this|its|that|our)\s+)?(?:[\w-]+\s+)?" + SOURCE_NOUN + r"\b(?:\s+\d{1,3}\b)?"
_COMPLEMENT = (
    r"(?:\s+(?:with|to|by|in|per|from|against|according to)\s+"
    + _SOURCE_PHRASE
    + r"(?:\s+(?:of|in)\s+"
    + _SOURCE_PHRASE
    + r")?(?:['\u2019]s)?)?"
)
VERDICT_CLAUSE_END = re.compile(
    _COMPLEMENT
    + r"[\s*_`\"'\u2019]*(?:,?\s*(?:$|[:.;!\n\u2014\u2013])|-\s|,?\s*(?:as|because|since|given|which|where|and|so|"
    r"thus|hence|per|according to|it|this|both|all|(?:the|this|its)\s+(?:[\w-]+\s+)?" + SOURCE_NOUN + r")\b)",
    _FLAGS,
)
"""What may follow a positive verdict word (the one a reason opens with, or one in its first sentence), in the
verdict's own clause: nothing, or a
complement naming the source ("consistent with the article", "supported by the second paragraph"), then the end,
a colon, full stop, semicolon or dash before the explanation, or a clause that gives a reason (", as ...",
" because ...", ", the article states ..."). Anything else modifies the verdict itself ("Consistent, give or take
a year", "Consistent in the essentials", "Consistent up to the figure", "Consistent, bar the date"): the verdict is
then stated only in part, whatever the words (unlisted ones too), and is never +1."""

UNDECIDED_START = re.compile(
    _LEAD + r"(?:not (?:sure|certain|clear|possible|enough|determin\w*|decid\w*)|not (?:in|un)(?:consistent|"
    r"supported|correct|accurate|true)\b|neither\b|unclear|uncertain|unsure|undetermined|undecid\w*|indetermin\w*|"
    r"inconclusive|unknown|n/a\b|it depends|depends\b|hard to|difficult to|impossible to|insufficient|"
    r"(?:cannot|can't|could not|couldn't|unable to) (?:determine|decide|tell|say|judge|assess|evaluate))",
    _FLAGS,
)
"""A reason that opens by not deciding ("Not sure ...", "Unclear.", "Neither consistent nor inconsistent",
"Not inconsistent" -- a double negation hedges --, "Cannot determine ...", "Hard to say."): no verdict."""

UNDECIDED = re.compile(
    r"\b(?:(?:cannot|can't|could not|couldn't|unable to|impossible to|hard to|difficult to|not possible to)\s+"
    r"(?:be\s+)?(?:determine|decide|tell|say|judge|assess|evaluate)d?|(?:unclear|uncertain|unsure|not sure|"
    r"not clear|not certain)\s+(?:whether|if)|neither\s+\w+\s+nor|insufficient\s+(?:information|context|evidence)|"
    r"(?:consistent|supported|correct|accurate)\s+or\s+(?:not|inconsistent|unsupported|incorrect|inaccurate)|"
    r"it depends)\b",
    _FLAGS,
)
"""The same, anywhere in the first sentence of a reason that opens with no verdict ("It is unclear whether the
article supports this.", "Whether it is consistent or not cannot be determined.")."""

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
    if UNDECIDED_START.search(text):
        raise ParseError(f"the reason does not decide: {reason[:60]!r}")
    if NEGATIVE_START.search(text):
        return -1
    positive = POSITIVE_START.search(text)
    if positive is not None:
        rest = DENIED_PROBLEM_AFTER.sub(" ", text[positive.end() :])
        if not VERDICT_CLAUSE_END.match(rest):
            modifier = " ".join(rest.strip(" ,").split()[:4])
            raise ParseError(
                f"the reason qualifies its positive verdict (modified verdict: {modifier!r}): {reason[:60]!r}"
            )
        first = _FIRST_SENTENCE.match(rest)
        if CONTRADICTED_START.match(rest) or NEGATIVE_WORDS.search(
            first.group(1)[:FIRST_SENTENCE_CHARS] if first else ""
        ):
            raise ParseError(f"the reason states a verdict and its opposite: {reason[:60]!r}")
        _never_taken_back(text[: positive.end()] + rest, reason)
        return 1
    m = _FIRST_SENTENCE.match(text)
    sentence = m.group(1)[:FIRST_SENTENCE_CHARS] if m else ""
    if UNDECIDED.search(sentence):
        raise ParseError(f"the reason does not decide: {reason[:60]!r}")
    mark = verdict_words(sentence)
    if mark is None:
        if POSITIVE_WORDS.search(sentence):
            _never_taken_back(sentence, reason)  # names the qualifier that keeps the positive word from counting
        raise ParseError(f"the reason does not state a verdict: {reason[:60]!r}")
    if mark == 1:
        _never_taken_back(text, reason)
        _verdict_clause_unmodified(sentence, reason)
    return mark


_POSITIVE_ADJECTIVE = re.compile(r"\b(?:consistent|supported|correct|accurate)\b", _FLAGS)


def _verdict_clause_unmodified(sentence: str, reason: str) -> None:
    """Raise :class:`ParseError` when a positive verdict word stated inside the first sentence ("It is consistent,
    give or take a year.") is followed by anything but what :data:`VERDICT_CLAUSE_END` allows."""
    for word in _POSITIVE_ADJECTIVE.finditer(sentence):
        rest = sentence[word.end() :]
        if not VERDICT_CLAUSE_END.match(rest):
            modifier = " ".join(rest.strip(" ,").split()[:4])
            raise ParseError(
                f"the reason qualifies its positive verdict (modified verdict: {modifier!r}): {reason[:60]!r}"
            )


def _never_taken_back(text: str, reason: str) -> None:
    """Raise :class:`ParseError` when ``text`` (the whole rest of a reason) holds a qualifier that hedges,
    restricts, concedes a problem, corrects, negates or questions its positive verdict (:func:`qualifier`)."""
    found = qualifier(text)
    if found is not None:
        kind, phrase = found
        raise ParseError(f"the reason qualifies its positive verdict ({kind}: {phrase!r}): {reason[:60]!r}")


def qualifier(text: str) -> tuple[str, str] | None:
    """The first qualifier in ``text`` as (kind, phrase): a reason form of :data:`REASON_FORMS` (its kind: hedge,
    exception, conceded problem, correction, second thought, negation), a question mark or parenthesis
    ("question", "aside"), or a phrase of :data:`STRUCTURAL_QUALIFIERS`; None when there is none."""
    found: list[tuple[int, str, str]] = []
    form = TAKEN_BACK.search(text)
    if form is not None:
        found.append((form.start(), _form_kind(form.group(0)), form.group(0)))
    for kind, pattern in STRUCTURAL_QUALIFIERS:
        hit = pattern.search(text)
        if hit is not None:
            found.append((hit.start(), kind, hit.group(0)))
    if not found:
        return None
    _, kind, phrase = min(found)
    return kind, phrase


def _form_kind(phrase: str) -> str:
    """The kind of :data:`REASON_FORMS` a match of :data:`TAKEN_BACK` belongs to."""
    if phrase == "?":
        return "question"
    if phrase == "(":
        return "aside"
    word = " ".join(phrase.lower().replace("\u2019", "'").split())
    for kind, forms in REASON_FORMS.items():
        if word in forms or (word.endswith("n't") and "n't" in forms):
            return kind
        if any(word.startswith(f) for f in forms if f in PREFIXES):
            return kind
    return "qualifier"
