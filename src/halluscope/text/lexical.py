"""Lexical facts of a text, each with its character offsets: words, numbers (with their values), dates,
names, negation cues, and the words that claim a whole or give a part of a quantity. The cheap gate
(``halluscope.methods.gate``) compares a claim's facts with the source's; nothing here calls a model.

Numbers are normalised to values so that different spellings of one quantity match: ``1,000`` = ``1000``,
``two thirds`` = ``2/3``, ``fifteen`` = ``15``, ``3 million`` = ``3,000,000``, ``50%`` = ``50 percent``; a
unit after a number (``15 minutes``) is not part of its value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from halluscope.records import Span

_WORD = re.compile(r"(?:[^\W\d_]\.){2,}|[^\W_]+(?:['’][^\W_]+)*")  # "U.K." is one word

# Stop words: function words that carry no checkable content (English). Negation cues are kept out of this
# list's use for content precision but detected on their own.
STOP_WORDS = frozenset(
    """
a about above after again against all also although am an and any are as at be because been before being
below between both but by can could did do does doing down during each either else etc even ever every few
for from further had has have having he her here hers herself him himself his how however i if in into is it
its itself just least less let like made make many may me might more most much must my myself near new nor
of off often on once only onto or other others our ours ourselves out over own per quite rather said same say
says she should since so some such than that the their theirs them themselves then there these they this
those though through thus to too toward towards under until up upon us very via was we well were what when
where whether which while who whom whose why will with within would yet you your yours yourself yourselves
s t ll re ve d m
""".split()
)

NEGATION_WORDS = frozenset("not no never none nobody nothing neither nor nowhere cannot without".split())

HONORIFICS = frozenset("mr mrs ms miss dr prof sir dame lord lady st mt rev gen col capt sgt lt jr sr".split())

MONTHS = {
    name: i + 1
    for i, name in enumerate(
        "january february march april may june july august september october november december".split()
    )
}
MONTH_ABBREVIATIONS = {
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
WEEKDAYS = {name: i for i, name in enumerate("monday tuesday wednesday thursday friday saturday sunday".split())}

_UNITS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {
    "hundred": 100,
    "thousand": 1_000,
    "million": 1_000_000,
    "billion": 1_000_000_000,
    "trillion": 1_000_000_000_000,
    "bn": 1_000_000_000,
    "mn": 1_000_000,
}
_FRACTIONS = {
    "half": 2,
    "halves": 2,
    "third": 3,
    "thirds": 3,
    "quarter": 4,
    "quarters": 4,
    "fourth": 4,
    "fourths": 4,
    "fifth": 5,
    "fifths": 5,
    "tenth": 10,
    "tenths": 10,
}

# A digit number: 1,000 / 2.5 / 2/3 / 50% (a sign, currency symbol or unit around it is not part of it).
_DIGITS = re.compile(
    r"(?<![\w.,/])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?:\s*/\s*(\d+))?"
    r"(?=(?:bn|mn|m|k|st|nd|rd|th|s)?(?![\w/]))"
)
_NUMBER_WORDS = "|".join(sorted([*_UNITS, *_TENS, *_SCALES, *_FRACTIONS, "a", "an", "and"], key=len, reverse=True))
_WORD_NUMBER = re.compile(rf"\b(?:{_NUMBER_WORDS})(?:(?:\s+|-)(?:{_NUMBER_WORDS}))*\b", re.IGNORECASE)


@dataclass(frozen=True)
class Token:
    """A word of a text: its text as written, its normalised form (lower case, possessive and dots removed,
    light suffix stemming) and where it lies."""

    text: str
    norm: str
    span: Span

    @property
    def lower(self) -> str:
        return self.text.lower()


@dataclass(frozen=True)
class NumberMention:
    """A number as written (``two thirds``) with its value(s): a number followed by a scale word has both
    (``3 million`` -> 3 and 3,000,000)."""

    text: str
    values: tuple[float, ...]
    span: Span


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A deliberately light stemmer (plural and tense endings), enough to match runs/run, said/say is not."""
    w = word.lower().replace("’", "'")
    if w.endswith("'s"):
        w = w[:-2]
    w = w.replace(".", "")
    for suffix, keep in (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not w.endswith("ss"):
            return w[: len(w) - len(suffix)] + keep
    return w


def tokens(text: str) -> list[Token]:
    """Every word of ``text`` with its offsets (punctuation is not a token)."""
    return [Token(m.group(), stem(m.group()), Span(start=m.start(), end=m.end())) for m in _WORD.finditer(text)]


def is_negation(token: Token) -> bool:
    low = token.lower.replace("’", "'")
    return low in NEGATION_WORDS or low.endswith("n't")


def content_tokens(toks: list[Token]) -> list[Token]:
    """Words that carry content: not stop words, not negation cues, not bare numbers (numbers are checked on
    their own)."""
    return [
        t
        for t in toks
        if t.lower not in STOP_WORDS
        and not is_negation(t)
        and not t.norm.isdigit()
        and t.lower.replace("’", "'").split("'")[0] not in STOP_WORDS
    ]


def negation_count(toks: list[Token]) -> int:
    return sum(is_negation(t) for t in toks)


TOTALITY_WORDS = frozenset("whole entire entirely wholly fully completely solely".split())
"""Words that claim the whole of a quantity (``the whole project``); ``all`` and ``every`` are left out (too
common in claims that do not speak of a share)."""

PART_WORDS = frozenset(
    "half halves third thirds quarter quarters fifth fifths tenth tenths part partly partially portion rest "
    "remainder majority minority".split()
)
"""Words that give a part of a quantity (``two thirds``, ``the rest``, ``partly``)."""

_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*(?:%|percent\b|per cent\b)", re.IGNORECASE)


def totality_cues(toks: list[Token]) -> list[Token]:
    """The words claiming a whole quantity (:data:`TOTALITY_WORDS`)."""
    return [t for t in toks if t.lower in TOTALITY_WORDS]


def part_cues(text: str, toks: list[Token]) -> list[str]:
    """The words giving a part of a quantity (:data:`PART_WORDS`; a fraction with its number: ``Two thirds``) and
    percentages under 100, as written."""
    mentions = numbers(text)
    words: list[str] = []
    for t in toks:
        if t.lower in PART_WORDS:
            whole = next((m.text for m in mentions if m.span.start <= t.span.start and t.span.end <= m.span.end), None)
            if (whole or t.text) not in words:
                words.append(whole or t.text)
    return words + [m.group() for m in _PERCENT.finditer(text) if float(m.group(1)) < 100]


def _parse_digits(whole: str, denominator: str | None) -> float | None:
    try:
        value = float(whole.replace(",", ""))
        if denominator is not None:
            den = float(denominator)
            return value / den if den else None
        return value
    except ValueError:
        return None


def _word_value(words: list[str]) -> tuple[float | None, bool]:
    """The value of a run of number words (``two hundred and five``, ``a third``); the flag says whether it
    held a real number word (not just ``a``/``and``)."""
    total = 0.0
    current = 0.0
    seen = False
    fraction: float | None = None
    for word in words:
        if word in ("a", "an"):
            current = current or 1.0
            continue
        if word == "and":
            continue
        if word in _UNITS:
            current += _UNITS[word]
            seen = True
        elif word in _TENS:
            current += _TENS[word]
            seen = True
        elif word in _FRACTIONS:
            fraction = (current or 1.0) / _FRACTIONS[word]
            seen = True
            current = 0.0
        elif word in _SCALES:
            scale = _SCALES[word]
            seen = True
            if scale == 100:
                current = (current or 1.0) * 100
            else:
                total += (current or 1.0) * scale
                current = 0.0
    if fraction is not None and not total and not current:
        return fraction, seen
    return total + current, seen


def numbers(text: str) -> list[NumberMention]:
    """Every number in ``text``: digits (``1,000``, ``2.5``, ``2/3``, ``50%``) and number words (``fifteen``,
    ``two thirds``, ``a quarter``, ``three million``). ``one`` alone (a pronoun as often as a number) and an
    ordinal use of ``third``/``quarter`` (``the third quarter``) are not numbers."""
    found: list[NumberMention] = []
    taken: list[Span] = []
    for m in _DIGITS.finditer(text):
        value = _parse_digits(m.group(1), m.group(2))
        if value is None:
            continue
        end = m.end(2) if m.group(2) else m.end(1)
        values = [value]
        scale = _following_scale(text, end)
        if scale:
            values.append(value * scale)
        span = Span(start=m.start(), end=end)
        found.append(NumberMention(text[span.start : span.end], tuple(values), span))
        taken.append(span)
    for m in _WORD_NUMBER.finditer(text):
        parts = [
            (w.group().lower(), m.start() + w.start(), m.start() + w.end())
            for w in re.finditer(r"[A-Za-z]+", m.group())
        ]
        while parts and parts[0][0] in ("a", "an", "and") and (len(parts) == 1 or parts[1][0] not in _FRACTIONS):
            parts.pop(0)  # an article before a number word is not part of it ("a third" keeps it)
        while parts and parts[-1][0] in ("a", "an", "and"):
            parts.pop()
        words = [w for w, _, _ in parts]
        if not words:
            continue
        value, real = _word_value(words)
        if not real or value is None:
            continue
        if words == ["one"] or all(w in _SCALES for w in words):
            continue  # "one" alone is as often a pronoun; "million" alone follows digits (handled above)
        if words[0] in _FRACTIONS and words[0] not in ("half", "halves"):
            continue  # "the third quarter": ordinal, not a fraction
        span = Span(start=parts[0][1], end=parts[-1][2])
        if any(span.overlaps(t) for t in taken):
            continue
        found.append(NumberMention(text[span.start : span.end], (value,), span))
    found.sort(key=lambda n: n.span.start)
    return found


def _following_scale(text: str, end: int) -> int | None:
    m = re.match(
        r"\s*-?\s*(hundred|thousand|million|billion|trillion|bn|mn|m|k)\b", text[end : end + 12], re.IGNORECASE
    )
    if not m:
        return None
    word = m.group(1).lower()
    return {"m": 1_000_000, "k": 1_000}.get(word) or _SCALES.get(word)


def same_number(a: float, b: float) -> bool:
    """Equal values; non-integers match to within 0.5% (``0.67`` matches ``2/3``)."""
    if a == b:
        return True
    if float(a).is_integer() and float(b).is_integer():
        return False
    return abs(a - b) <= 0.005 * max(abs(a), abs(b))


def dates(toks: list[Token]) -> list[Token]:
    """Month and weekday names (``May`` only when capitalised, since ``may`` is also a verb)."""
    out = []
    for t in toks:
        low = t.lower.rstrip(".")
        if low in WEEKDAYS or (low in MONTHS and (low != "may" or t.text[0].isupper())):
            out.append(t)
        elif low in MONTH_ABBREVIATIONS and t.text[0].isupper() and len(t.text) <= 5:
            out.append(t)
    return out


def month_or_day_key(token: Token) -> str:
    low = token.lower.rstrip(".")
    if low in MONTHS:
        return f"month{MONTHS[low]}"
    if low in MONTH_ABBREVIATIONS:
        return f"month{MONTH_ABBREVIATIONS[low]}"
    return f"day{WEEKDAYS.get(low, -1)}"


def names(text: str, toks: list[Token]) -> list[Token]:
    """Capitalised words that are likely names: not the first word of a sentence (or after a quote/colon),
    not a stop word, honorific, month or weekday. Acronyms (``NASA``) count."""
    out = []
    for i, t in enumerate(toks):
        if not t.text[0].isupper() or t.text.isdigit() or len(t.text.rstrip(".")) < 2:
            continue  # lower case, a number, or an initial
        low = t.lower.replace("’", "'").split("'")[0]
        if low in STOP_WORDS or low in HONORIFICS or low in MONTHS or low in WEEKDAYS or low in NEGATION_WORDS:
            continue
        if low in MONTH_ABBREVIATIONS or t.text == "I":
            continue
        j = t.span.start  # the character before the word, whitespace skipped (no copy of the text before it)
        while j > 0 and text[j - 1].isspace():
            j -= 1
        if i == 0 or j == 0 or text[j - 1] in ".!?:;\"“‘'([" or text[max(0, j - 3) : j] == "...":
            continue  # sentence-initial: capitalised anyway
        out.append(t)
    return out


@lru_cache(maxsize=64)
def source_facts(source: str) -> SourceFacts:
    """The facts of a source, computed once per source text (many claims are checked against one source)."""
    # Only the distinct words matter here: no Token (and no Span) per word of the source, which for a 5 MB source
    # was 830,000 records and most of the gate's 45 s; dates need a Token, and only date words get one.
    words = _distinct_words(source)
    date_words = {w for w in words if _date_candidate(w)}
    date_toks = (
        [
            Token(m.group(), stem(m.group()), Span(start=m.start(), end=m.end()))
            for m in _WORD.finditer(source)
            if m.group() in date_words
        ]
        if date_words
        else []
    )
    return SourceFacts(
        norms=frozenset(stem(w) for w in words),
        lowers=frozenset(w.lower().replace("’", "'").split("'")[0].replace(".", "") for w in words),
        number_values=tuple(v for n in numbers(source) for v in n.values),
        date_keys=frozenset(month_or_day_key(t) for t in dates(date_toks)),
        lowered_text=source.lower(),
    )


_WORDS_CHUNK = 8_192


def _distinct_words(text: str) -> set[str]:
    """The distinct words of ``text``, found piece by piece (pieces cut at whitespace, which no word spans): one
    regular-expression call over a 400 KB source held the GIL for 40 ms, stalling the service's HTTP thread."""
    out: set[str] = set()
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + _WORDS_CHUNK)
        if end < n:
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end), text.rfind("\t", start, end))
            if cut > start:
                end = cut
        out.update(_WORD.findall(text, start, end))
        start = end
    return out


def _date_candidate(word: str) -> bool:
    """Whether :func:`dates` could keep ``word`` (a month, weekday or month abbreviation in any case)."""
    low = word.lower().rstrip(".")
    return low in WEEKDAYS or low in MONTHS or low in MONTH_ABBREVIATIONS


@dataclass(frozen=True)
class SourceFacts:
    norms: frozenset[str]
    lowers: frozenset[str]
    number_values: tuple[float, ...]
    date_keys: frozenset[str]
    lowered_text: str

    def has_number(self, mention: NumberMention) -> bool:
        if any(same_number(v, s) for v in mention.values for s in self.number_values):
            return True
        return bool(re.search(rf"(?<![\w.]){re.escape(mention.text.lower())}(?![\w])", self.lowered_text))

    def has_word(self, token: Token) -> bool:
        """The word (or a form of it) occurs: same stem, same lower-case word, or a long shared prefix
        (``British``/``Britain``, ``Chinese``/``China``)."""
        low = token.lower.replace("’", "'").split("'")[0].replace(".", "")
        if token.norm in self.norms or low in self.lowers:
            return True
        prefix = max(4, len(low) - 3)
        return len(low) >= 5 and any(w.startswith(low[:prefix]) for w in self.lowers if len(w) >= prefix)
