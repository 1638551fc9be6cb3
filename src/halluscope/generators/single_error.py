"""One known error in a consistent target, without an LLM: the gold an explanation benchmark needs.

Each generator takes a consistent ``(source, target)`` pair and returns an :class:`Injection` (or None when it
finds nothing it can change safely): the new target, the character span of the changed text in it, the text that
was there before, and the gold of the explanation:

==================  ==============================================================================  ===============
generator           what changes                                                                    relation
==================  ==============================================================================  ===============
``swap.number``     a number the source states (``11``, ``1,013``, ``three``, the ``40`` of          contradicts
                    ``40 million``) becomes another the source never states (same form: digits
                    with the same separators, or a number word)
``swap.date``       a month or weekday the source states becomes another one it never names          contradicts
``swap.name``       a name the source states (consecutive capitalised words) becomes another name    contradicts
                    of the source with as many words, one the target does not hold
``swap.negation``   a statement is negated (``was`` -> ``was not``) or its negation dropped           contradicts
                    (``did not`` -> ``did``)
``inject.donor``    a sentence from the target of another source is inserted at a sentence           not_mentioned
                    boundary (:func:`halluscope.generators.inject.donor_facts`,
                    :func:`~halluscope.generators.inject.weave_at_boundaries`)
==================  ==============================================================================  ===============

**The gold source sentence** of a swap is the source sentence that states the original fact: among the source
sentences holding the original text (the same number value, the same month or weekday, the same name; for a
negation, every sentence), the one sharing the most content words with the target sentence that was changed,
and at least :data:`MIN_SHARED` of them (a negation also needs the content words right after its verb in that
sentence), else the pair is left alone. A donor sentence has no gold source sentence: the source does not
mention it.

Every injection is checked before it is returned: ``target[span] == injected``, the text outside the span is the
original target's, and (swaps) the injected number, date or name occurs nowhere in the source, so the new target
says something the source does not.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from halluscope.records import Example, Span
from halluscope.text import split_sentences
from halluscope.text.lexical import (
    MONTHS,
    STOP_WORDS,
    WEEKDAYS,
    content_tokens,
    dates,
    names,
    numbers,
    same_number,
    tokens,
)

Relation = Literal["contradicts", "not_mentioned"]

MIN_SHARED = 2
"""Content words a swap's target sentence must share with a source sentence for it to be the gold sentence."""


@dataclass(frozen=True)
class Injection:
    """One injected error and its gold (module docstring). Offsets: ``span`` in the new ``target``,
    ``original_span`` in the original target, ``source_span`` in the source."""

    generator: str
    target: str
    span: Span
    injected: str
    original: str
    original_span: Span
    relation: Relation
    source_span: Span | None = None
    source_sentence: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("span", "original_span", "source_span"):
            value = getattr(self, key)
            out[key] = None if value is None else {"start": value.start, "end": value.end}
        return out


def _stems(text: str) -> set[str]:
    return {t.norm for t in content_tokens(tokens(text))}


def _replace(target: str, span: Span, new: str) -> tuple[str, Span]:
    out = target[: span.start] + new + target[span.end :]
    return out, Span(start=span.start, end=span.start + len(new))


def _sentence_span(target: str, offset: int) -> Span:
    for sentence in split_sentences(target):
        if sentence.span.start <= offset < sentence.span.end:
            return sentence.span
    return Span(start=0, end=len(target))


def _sentence_at(target: str, offset: int) -> str:
    return _sentence_span(target, offset).of(target)


def gold_sentence(
    source: str, target_sentence: str, holds: Callable[[str], bool], *, required: Sequence[str] = ()
) -> tuple[Span, str] | None:
    """The source sentence that states the original fact (module docstring): among those for which ``holds``
    is true, the one sharing the most content words with ``target_sentence`` (at least :data:`MIN_SHARED`, and
    every stem of ``required``); None when there is none."""
    wanted = _stems(target_sentence)
    best: tuple[int, Span, str] | None = None
    for sentence in split_sentences(source):
        if not holds(sentence.text):
            continue
        stems = _stems(sentence.text)
        if not set(required) <= stems:
            continue
        shared = len(wanted & stems)
        if shared >= MIN_SHARED and (best is None or shared > best[0]):
            best = (shared, sentence.span, sentence.text)
    return None if best is None else (best[1], best[2])


def _injection(generator: str, target: str, span: Span, new: str, gold: tuple[Span, str]) -> Injection:
    changed, new_span = _replace(target, span, new)
    return Injection(
        generator=generator,
        target=changed,
        span=new_span,
        injected=new,
        original=target[span.start : span.end],
        original_span=span,
        relation="contradicts",
        source_span=gold[0],
        source_sentence=gold[1],
    )


# --- numbers ---------------------------------------------------------------------------------------------------

_NUMBER_WORD_VALUES = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
    )
}
_DIGITS_ONLY = re.compile(r"^\d{1,3}(?:,\d{3})+$|^\d+(?:\.\d+)?$")


def _format_like(original: str, value: float) -> str:
    if "." in original:
        decimals = len(original.split(".")[1])
        return f"{value:.{decimals}f}"
    if "," in original:
        return f"{int(value):,}"
    return str(int(value))


def _other_number(original: str, value: float, taken: Sequence[float], rng: random.Random) -> str | None:
    """Another number in the form of ``original`` whose value the source never states; None if none is found."""
    if original.lower() in _NUMBER_WORD_VALUES:
        options = [w for w, v in _NUMBER_WORD_VALUES.items() if v >= 2 and v != value]
        rng.shuffle(options)
        for word in options:
            if not any(same_number(_NUMBER_WORD_VALUES[word], t) for t in taken):
                return word.capitalize() if original[0].isupper() else word
        return None
    if not _DIGITS_ONLY.match(original):
        return None
    if float(value).is_integer() and 1900 <= value <= 2100 and "," not in original:  # a year: a few years off
        deltas = [d for d in range(-6, 7) if d]
    elif value < 10:
        deltas = [d for d in range(-int(value) + 1, 10) if d]
    else:
        step = max(1, round(value * 0.1))
        deltas = [step * k for k in (-4, -3, -2, 2, 3, 4, 5)]
    rng.shuffle(deltas)
    for delta in deltas:
        new = value + delta
        if new <= 0:
            continue
        text = _format_like(original, new)
        if text != original and not any(same_number(float(text.replace(",", "")), t) for t in taken):
            return text
    return None


def _states_number(value: float, sentence: str) -> bool:
    return any(same_number(value, x) for n in numbers(sentence) for x in n.values)


def _holds_text(text: str, sentence: str) -> bool:
    return text in sentence


def swap_number(source: str, target: str, rng: random.Random) -> Injection | None:
    """``swap.number`` (module docstring)."""
    source_values = [v for n in numbers(source) for v in n.values]
    candidates = []
    for mention in numbers(target):
        after = target[mention.span.end : mention.span.end + 1]
        if after.isalpha() or "/" in mention.text:
            continue  # "21st" (an ordinal), "2/3" (a fraction); in "3 million" the "3" is swapped
        value = mention.values[0]
        if not any(same_number(value, v) for v in source_values):
            continue
        sentence = _sentence_at(target, mention.span.start)
        gold = gold_sentence(source, sentence, functools.partial(_states_number, value))
        if gold is not None:
            candidates.append((mention, gold))
    rng.shuffle(candidates)
    for mention, gold in candidates:
        new = _other_number(mention.text, mention.values[0], source_values, rng)
        if new is not None:
            return _injection("swap.number", target, mention.span, new, gold)
    return None


# --- dates -----------------------------------------------------------------------------------------------------


def _word_in(word: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE) is not None


def swap_date(source: str, target: str, rng: random.Random) -> Injection | None:
    """``swap.date`` (module docstring)."""
    candidates = []
    for token in dates(tokens(target)):
        low = token.lower
        if low not in MONTHS and low not in WEEKDAYS:
            continue  # abbreviations ("Sept.") are left alone
        gold = gold_sentence(source, _sentence_at(target, token.span.start), functools.partial(_word_in, low))
        if gold is not None:
            candidates.append((token, gold))
    rng.shuffle(candidates)
    for token, gold in candidates:
        pool = list(MONTHS if token.lower in MONTHS else WEEKDAYS)
        options = [w for w in pool if w != token.lower and w != "may" and not _word_in(w, source)]
        if options:
            new = rng.choice(options)
            new = new.capitalize() if token.text[0].isupper() else new
            return _injection("swap.date", target, token.span, new, gold)
    return None


# --- names -----------------------------------------------------------------------------------------------------


def _name_phrases(text: str) -> list[Span]:
    """Runs of name words (:func:`halluscope.text.lexical.names`) separated by single spaces, as spans; a run glued
    to a handle or tag (``@name``, ``#name``) or next to another capitalised word (``Black Friday``) is left out."""
    found = names(text, tokens(text))
    phrases: list[Span] = []
    for token in found:
        last = phrases[-1] if phrases else None
        if last is not None and text[last.end : token.span.start] == " ":
            phrases[-1] = Span(start=last.start, end=token.span.end)
        else:
            phrases.append(token.span)
    return [p for p in phrases if _standalone(text, p)]


def _standalone(text: str, span: Span) -> bool:
    """Not glued to ``@``/``#`` or letters, and no capitalised word right before or after it that is a name word
    itself or a weekday (a title opening the sentence, ``Mayor Elena Ruiz``, does not count)."""
    if text[max(0, span.start - 1) : span.start] in ("@", "#") or text[span.end : span.end + 1].isalnum():
        return False
    after = re.match(r"\s([A-Z][a-z]+)\b", text[span.end : span.end + 40])
    before = re.search(r"(^|.)\s*\b([A-Z][a-z]+)\s$", text[max(0, span.start - 40) : span.start])
    if after and (after.group(1).lower() not in STOP_WORDS or after.group(1).lower() in WEEKDAYS):
        return False
    if before and before.group(2).lower() not in STOP_WORDS:
        opening = before.group(1) in ("", ".", "!", "?", ":", ";", '"', "“")
        return opening and before.group(2).lower() not in WEEKDAYS
    return True


def swap_name(source: str, target: str, rng: random.Random) -> Injection | None:
    """``swap.name`` (module docstring)."""
    source_names = {p.of(source) for p in _name_phrases(source)}
    candidates = []
    for phrase in _name_phrases(target):
        name = phrase.of(target)
        if name not in source_names:
            continue
        gold = gold_sentence(source, _sentence_at(target, phrase.start), functools.partial(_holds_text, name))
        if gold is not None:
            candidates.append((phrase, name, gold))
    rng.shuffle(candidates)
    for phrase, name, gold in candidates:
        words = name.split()
        options = sorted(
            n
            for n in source_names
            if len(n.split()) == len(words)
            and n.isupper() == name.isupper()
            and not (set(n.lower().split()) & set(name.lower().split()))
            and not _word_in(n, target)
        )
        if options:
            return _injection("swap.name", target, phrase, rng.choice(options), gold)
    return None


# --- negation --------------------------------------------------------------------------------------------------

_BE_MODAL = "is|are|was|were|will|can|could|would|should|must|might"
_ADD = re.compile(rf"\b({_BE_MODAL})\s+(?!not\b|n't)([a-z]+)\b|\b(has|have|had)\s+(been|[a-z]+(?:ed|en))\b")
_DROP = re.compile(
    r"\b(is|are|was|were|will|can|could|would|should|did|does|do|has|have|had)\s+not\b"
    r"|\b(is|are|was|were|did|does|do|has|have|had|could|would|should)n't\b|\b(can)not\b|\b(won|can)'t\b",
    re.IGNORECASE,
)
_SPOKEN = {"won": "will", "can": "can"}


def _next_content(text: str, offset: int, count: int = 2) -> list[str]:
    """The stems of the first ``count`` content words after ``offset`` in its sentence."""
    end = _sentence_span(text, offset).end
    return [t.norm for t in content_tokens(tokens(text[offset:end]))][:count]


def swap_negation(source: str, target: str, rng: random.Random) -> Injection | None:
    """``swap.negation`` (module docstring)."""
    edits: list[tuple[Span, str]] = []
    for m in _ADD.finditer(target):
        verb_end = m.end(1) if m.group(1) else m.end(3)
        verb = target[m.start() : verb_end]
        edits.append((Span(start=m.start(), end=verb_end), f"{verb} not"))
    for m in _DROP.finditer(target):
        verb = next(g for g in m.groups() if g)
        kept = _SPOKEN.get(verb.lower(), verb) if "'t" in m.group() else verb
        edits.append((Span(start=m.start(), end=m.end()), kept))
    candidates = []
    for span, new in edits:
        sentence = _sentence_at(target, span.start)
        required = _next_content(target, span.end)
        if not required:
            continue
        gold = gold_sentence(source, sentence, lambda s: True, required=required)
        if gold is not None:
            candidates.append((span, new, gold))
    if not candidates:
        return None
    span, new, gold = rng.choice(candidates)
    if new[:1].islower() and target[span.start : span.start + 1].isupper():
        new = new[0].upper() + new[1:]
    return _injection("swap.negation", target, span, new, gold)


# --- an invented sentence --------------------------------------------------------------------------------------


def inject_donor(example: Example, pool: Sequence[Example], rng: random.Random) -> Injection | None:
    """``inject.donor`` (module docstring): one donor sentence at a seeded sentence boundary."""
    from halluscope.generators.inject import donor_facts, weave_at_boundaries

    facts = donor_facts(example, pool, 1, rng)
    if not facts:
        return None
    changed, [claim] = weave_at_boundaries(example.target, facts, 1, rng)
    return Injection(
        generator="inject.donor",
        target=changed,
        span=claim.span,
        injected=claim.inserted_text,
        original="",
        original_span=Span(start=claim.span.start - 1, end=claim.span.start - 1),
        relation="not_mentioned",
    )


SWAPS: dict[str, Callable[[str, str, random.Random], Injection | None]] = {
    "swap.number": swap_number,
    "swap.date": swap_date,
    "swap.name": swap_name,
    "swap.negation": swap_negation,
}
"""The rule-based contradictions by name; ``inject.donor`` needs a pool of other examples (:func:`inject_donor`)."""

GENERATORS = (*SWAPS, "inject.donor")


def check_injection(source: str, original_target: str, injection: Injection) -> str | None:
    """None when the injection is what it says (module docstring), else why not."""
    new = injection.target
    if injection.span.of(new) != injection.injected or not injection.injected.strip():
        return "the span does not hold the injected text"
    before = new[: injection.span.start]
    after = new[injection.span.end :]
    if injection.generator == "inject.donor":
        if " ".join((before + after).split()) != " ".join(original_target.split()):
            return "the text outside the inserted sentence is not the original target"
        return None
    if before + injection.original + after != original_target:
        return "the text outside the span is not the original target"
    if injection.source_span is None or injection.source_span.of(source) != injection.source_sentence:
        return "the gold source sentence is not where its span says"
    if injection.generator in ("swap.number", "swap.date") and _word_in(injection.injected, source):
        return "the injected text occurs in the source"
    if injection.generator == "swap.name" and _word_in(injection.injected, injection.source_sentence):
        return "the injected name occurs in the gold source sentence"
    return None


def inject_one(example: Example, pool: Sequence[Example], order: Sequence[str], rng: random.Random) -> Injection | None:
    """The first generator of ``order`` (names of :data:`GENERATORS`) that applies to ``example`` and passes
    :func:`check_injection`; None when none does."""
    for name in order:
        if name == "inject.donor":
            found = inject_donor(example, pool, rng)
        else:
            found = SWAPS[name](example.source, example.target, rng)
        if found is not None and check_injection(example.source, example.target, found) is None:
            return found
    return None
