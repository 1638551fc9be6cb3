"""The model's own probability of a stated label, read from the token log-probabilities of its reply.

A verdict stage states a label in its reply (``"supported": true``, ``PASS``, ``yes``, an AMC mark ``-1``). Where
the backend returned per-token log-probabilities (:class:`~halluscope.llm.base.TokenLogprobs`: OpenAI-compatible
``top_logprobs``, the embedded model's captured distribution), :func:`label_probabilities` finds the token where
each stated label value starts and returns the probability of the *positive* label there, renormalised over the
allowed label tokens among that position's candidates:

    p = sum P(candidate spelling a positive label) / sum P(candidate spelling any allowed label)

Candidates are compared after dropping leading whitespace, quotes and JSON punctuation, case-insensitively, and a
candidate counts for a label when one is a prefix of the other (``"tr"`` for ``true``, ``"Yes"`` for ``yes``); a
candidate that could start both a positive and a negative label counts for neither. Nothing is invented: no
log-probabilities, no label token at the position, or a position whose candidates were not returned (only the
chosen token, ``top`` empty) give ``None``. A label the other side of which is outside the returned top-k counts
that side as 0 (the usual top-k approximation; ask for more candidates with ``top_logprobs`` to tighten it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from halluscope.llm.base import TokenLogprobs

VERDICT_TOP_LOGPROBS = 10
"""Candidates per position the verdict stages ask for (``GenerateParams.top_logprobs``; OpenAI allows up to 20)."""

_LEAD = " \t\r\n\"':,[{("

TRUE_FALSE = (("true",), ("false",))
"""The positive and negative spellings of a JSON boolean label."""
YES_NO = (("yes",), ("no",))
PASS_FAIL = (("pass",), ("fail",))
MARKS = (("1",), ("-1",))


@dataclass(frozen=True)
class LabelProbability:
    """One stated label: the token index where it starts, whether the reply states the positive label there
    (None when the token spells no allowed label), and the positive label's renormalised probability."""

    position: int
    stated: bool | None
    probability: float | None


def _norm(token: str) -> str:
    return token.lstrip(_LEAD).lower()


def _side(candidate: str, positive: Sequence[str], negative: Sequence[str]) -> bool | None:
    """True / False when ``candidate`` can spell only a positive / only a negative label; None otherwise."""
    c = _norm(candidate)
    if not c:
        return None
    pos = any(lab.startswith(c) or c.startswith(lab) for lab in positive)
    neg = any(lab.startswith(c) or c.startswith(lab) for lab in negative)
    if pos == neg:
        return None
    return pos


def probability_at(entry: TokenLogprobs, positive: Sequence[str], negative: Sequence[str]) -> float | None:
    """The positive labels' share of the allowed label mass among ``entry``'s candidates (None: no candidates
    returned beyond the chosen token, or none of them spells a label)."""
    if not entry.top:
        return None
    mass = {True: 0.0, False: 0.0}
    candidates = dict(entry.top)
    candidates.setdefault(entry.token, entry.logprob)  # the chosen token, when the top-k left it out
    for token, logprob in candidates.items():
        side = _side(token, positive, negative)
        if side is not None and math.isfinite(logprob):
            mass[side] += math.exp(logprob)
    total = mass[True] + mass[False]
    if total <= 0.0:
        return None
    return min(1.0, max(0.0, mass[True] / total))


def _offsets(logprobs: Sequence[TokenLogprobs]) -> tuple[str, list[int]]:
    starts, pos = [], 0
    for entry in logprobs:
        starts.append(pos)
        pos += len(entry.token)
    return "".join(e.token for e in logprobs), starts


def _token_at(starts: list[int], offset: int) -> int:
    """Index of the token whose characters include ``offset``."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _stated(text: str, offset: int, positive: Sequence[str], negative: Sequence[str]) -> tuple[bool | None, int]:
    """Which label the reply spells at ``offset`` and how many characters it takes."""
    rest = text[offset:].lower()
    for side, labels in ((True, positive), (False, negative)):
        for lab in sorted(labels, key=len, reverse=True):
            if rest.startswith(lab):
                return side, len(lab)
    return None, 0


def label_probabilities(
    logprobs: Sequence[TokenLogprobs] | None,
    positive: Sequence[str],
    negative: Sequence[str],
    *,
    key: str | None = None,
) -> list[LabelProbability]:
    """Every stated label in the reply, in order. With ``key`` (a JSON field name) the labels are the values of
    that field (one per occurrence: a batch reply gives one per entry); without it, every place where the reply
    spells an allowed label (a bare ``yes``, the marks of a JSON list). ``[]`` without log-probabilities."""
    if not logprobs:
        return []
    positive = [p.lower() for p in positive]
    negative = [n.lower() for n in negative]
    text, starts = _offsets(logprobs)
    out: list[LabelProbability] = []
    if key is not None:
        for match in re.finditer(r'(?<!\\)"' + re.escape(key) + r'"\s*:\s*', text, flags=re.I):
            offset = match.end()
            if text[offset : offset + 1] == '"':  # a string label: it starts after the quote
                offset += 1
            if offset >= len(text):
                break
            i = _token_at(starts, offset)
            stated, _ = _stated(text, offset, positive, negative)
            out.append(LabelProbability(i, stated, probability_at(logprobs[i], positive, negative)))
        return out
    offset = 0
    in_string = False
    while offset < len(text):
        ch = text[offset]
        if ch == '"' and (offset == 0 or text[offset - 1] != "\\"):
            in_string = not in_string  # a JSON string's words are not labels, unless the label is a string
        stated, width = _stated(text, offset, positive, negative)
        boundary = offset == 0 or not text[offset - 1].isalnum()
        after = text[offset + width : offset + width + 1]
        if stated is not None and boundary and not after.isalnum() and (not in_string or text[offset - 1] == '"'):
            i = _token_at(starts, offset)
            out.append(LabelProbability(i, stated, probability_at(logprobs[i], positive, negative)))
            offset += width
            continue
        offset += 1
    return out


def label_probability(
    logprobs: Sequence[TokenLogprobs] | None,
    positive: Sequence[str],
    negative: Sequence[str],
    *,
    key: str | None = None,
    index: int = 0,
) -> float | None:
    """The positive label's probability at the ``index``-th stated label (see :func:`label_probabilities`), or
    None when there is none or the backend gave no candidates there."""
    found = label_probabilities(logprobs, positive, negative, key=key)
    return found[index].probability if 0 <= index < len(found) else None


def step_probability(
    step: object, positive: Sequence[str], negative: Sequence[str], *, key: str | None = None, index: int = 0
) -> float | None:
    """:func:`label_probability` of a :class:`~halluscope.records.StepResult`'s reply (None without logprobs)."""
    return label_probability(getattr(step, "logprobs", None), positive, negative, key=key, index=index)
