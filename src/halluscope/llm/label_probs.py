"""The model's own probability of a stated label, read from the token log-probabilities of its reply.

A verdict stage states a label in its reply (``"supported": true``, ``PASS``, ``yes``, an AMC mark ``-1``). Where
the backend returned per-token log-probabilities (:class:`~halluscope.llm.base.TokenLogprobs`: OpenAI-compatible
``top_logprobs``, the embedded model's captured distribution), :func:`label_probabilities` finds the token where
each stated label value starts and returns the probability of the *positive* label there, renormalised over the
allowed label tokens among that position's candidates:

    p = sum P(candidate spelling a positive label) / sum P(candidate spelling any allowed label)

Candidates are compared after dropping leading whitespace, quotes and JSON punctuation, case-insensitively, as whole
words: a candidate counts for a label when it is the label (``"Yes"`` for ``yes``), the label followed by
punctuation (``"no."``), or a piece the label starts with (``"tr"`` for ``true``); a longer word is not the label
(``"Note"`` and ``"Now"`` are not ``no``, ``"Yesterday"`` is not ``yes``, ``"10"`` is not the mark ``1``), and a
candidate that could start both a positive and a negative label counts for neither. Nothing is invented: no
log-probabilities, no label token at the position, or a position whose candidates were not returned (only the
chosen token, ``top`` empty) give ``None``. A label the other side of which is outside the returned top-k counts
that side as 0 (the usual top-k approximation; ask for more candidates with ``top_logprobs`` to tighten it).

Only well-formed log-probabilities are read: at a label's position every candidate's (and the chosen token's)
log-probability must be finite and at most ``MAX_LOGPROB`` (0 is certainty), and the candidates' probabilities
together at most ``1 + MASS_SLACK``; otherwise the position is *refused* (``LabelProbability.refused`` says why)
and gives no probability. A probability that contradicts the label the reply states there (P(positive) below
0.5 where the reply states the positive label, above 0.5 where it states the negative one) is not used either:
``LabelProbability.read`` keeps it, ``probability`` is None, so a verdict's label and its probability never
disagree. :func:`read_answer` reads a one-word reply (verdict-first scoring): the answer is its first word and
the probability is read at that word's token only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from halluscope.llm.base import TokenLogprobs
from halluscope.records import Verdict

VERDICT_TOP_LOGPROBS = 10
"""Candidates per position the verdict stages ask for (``GenerateParams.top_logprobs``; OpenAI allows up to 20)."""

_LEAD = " \t\r\n\"':,[{("

MAX_LOGPROB = 1e-6
"""The largest log-probability read (0 is certainty; the margin is float rounding). A larger one, NaN or an infinity
refuses the position: the backend's numbers there are not probabilities."""

MASS_SLACK = 0.01
"""How far above 1 the probabilities of one position's distinct candidates may sum (rounding, a chosen token added
at the top-k floor) before the position is refused."""

MIN_LABEL_MASS = 0.5
"""A one-word reply whose first word is neither label (``Maybe``, ``I cannot tell``) is read from the probabilities
only when the label tokens' candidates hold at least this much of the probability at that word's token (the sum
of their probabilities, not renormalised); below it the reply answers nothing and the claim is unscored. At 0.5
the labels must be likelier together than everything else the model could have written there."""

_MARKUP = " \t\r\n\"'*.:`"
"""What a one-word reply may open with before its answer word (whitespace, quotes, Markdown emphasis)."""

_WORD = re.compile(r"[^\W_]+")

TRUE_FALSE = (("true",), ("false",))
"""The positive and negative spellings of a JSON boolean label."""
YES_NO = (("yes",), ("no",))
PASS_FAIL = (("pass",), ("fail",))
MARKS = (("1",), ("-1",))


@dataclass(frozen=True)
class PositionReading:
    """What one token position says about the labels: the positive labels' renormalised share (None: no label
    candidate there, or refused), the label candidates' total probability, and why the position is refused."""

    probability: float | None
    label_mass: float = 0.0
    refused: str | None = None


@dataclass(frozen=True)
class LabelProbability:
    """One stated label: the token index where it starts, whether the reply states the positive label there
    (None when the token spells no allowed label), and the positive label's renormalised probability -- None when
    the position is refused (``refused`` says why) or the probability contradicts the stated label (``read`` keeps
    the number as read)."""

    position: int
    stated: bool | None
    probability: float | None
    read: float | None = None
    refused: str | None = None

    @property
    def disagrees(self) -> bool:
        """The probability as read contradicts the stated label."""
        return contradicts(self.stated, self.read)

    @property
    def note(self) -> str | None:
        """Why a stated label has no probability although the backend gave log-probabilities (refused, or
        contradicting the label), for the verdict's reason; None when there is nothing to say."""
        if self.refused is not None:
            return f"no probability: the token log-probabilities at the label are refused: {self.refused}"
        if self.disagrees:
            return (
                f"no probability: P = {self.read:.3f} for the positive label at the label token contradicts the "
                "stated label, which decides"
            )
        return None


def contradicts(stated: bool | None, probability: float | None) -> bool:
    """A stated label and a P(positive) on opposite sides of 0.5 (0.5 itself agrees with both)."""
    if stated is None or probability is None:
        return False
    return probability < 0.5 if stated else probability > 0.5


def _found(position: int, stated: bool | None, reading: PositionReading) -> LabelProbability:
    usable = None if contradicts(stated, reading.probability) else reading.probability
    return LabelProbability(position, stated, usable, reading.probability, reading.refused)


def _norm(token: str) -> str:
    return token.lstrip(_LEAD).lower()


def _spells(candidate: str, label: str) -> bool:
    """``candidate`` (normalised) is ``label``, a piece ``label`` starts with, or ``label`` then punctuation."""
    if label.startswith(candidate):
        return True
    rest = candidate[len(label) :]
    return candidate.startswith(label) and not rest[:1].isalnum()


def _side(candidate: str, positive: Sequence[str], negative: Sequence[str]) -> bool | None:
    """True / False when ``candidate`` can spell only a positive / only a negative label; None otherwise."""
    c = _norm(candidate)
    if not c:
        return None
    pos = any(_spells(c, lab) for lab in positive)
    neg = any(_spells(c, lab) for lab in negative)
    if pos == neg:
        return None
    return pos


def refusal(entry: TokenLogprobs) -> str | None:
    """Why ``entry``'s log-probabilities are not probabilities (NaN, an infinity, above 0, or candidates summing to
    more than 1), or None when they are."""
    candidates = dict(entry.top)
    candidates.setdefault(entry.token, entry.logprob)
    for token, logprob in [(entry.token, entry.logprob), *entry.top.items()]:
        if not math.isfinite(logprob):
            return f"the log-probability of {token[:20]!r} is {logprob} (not finite)"
        if logprob > MAX_LOGPROB:
            return f"the log-probability of {token[:20]!r} is {logprob:g} (above 0: a probability above 1)"
    total = math.fsum(math.exp(lp) for lp in candidates.values())
    if total > 1.0 + MASS_SLACK:
        return f"the candidates' probabilities sum to {total:.3f} (more than 1)"
    return None


def read_position(entry: TokenLogprobs, positive: Sequence[str], negative: Sequence[str]) -> PositionReading:
    """The positive labels' share of the allowed label mass among ``entry``'s candidates, and that mass (no
    probability: no candidates returned beyond the chosen token, none of them spells a label, or the position's
    log-probabilities are refused, see :func:`refusal`)."""
    refused = refusal(entry)
    if refused is not None:
        return PositionReading(None, 0.0, refused)
    if not entry.top:
        return PositionReading(None)
    mass = {True: 0.0, False: 0.0}
    candidates = dict(entry.top)
    candidates.setdefault(entry.token, entry.logprob)  # the chosen token, when the top-k left it out
    for token, logprob in candidates.items():
        side = _side(token, positive, negative)
        if side is not None:
            mass[side] += math.exp(logprob)
    total = mass[True] + mass[False]
    if total <= 0.0:
        return PositionReading(None)
    return PositionReading(min(1.0, max(0.0, mass[True] / total)), min(1.0, total))


def probability_at(entry: TokenLogprobs, positive: Sequence[str], negative: Sequence[str]) -> float | None:
    """The positive labels' share of the allowed label mass among ``entry``'s candidates (see
    :func:`read_position`; None where it gives none)."""
    return read_position(entry, positive, negative).probability


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
            if rest.startswith(lab) and not rest[len(lab) : len(lab) + 1].isalnum():  # a whole word
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
            out.append(_found(i, stated, read_position(logprobs[i], positive, negative)))
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
            out.append(_found(i, stated, read_position(logprobs[i], positive, negative)))
            offset += width
            continue
        offset += 1
    return out


def label_after(
    logprobs: Sequence[TokenLogprobs] | None, positive: Sequence[str], negative: Sequence[str], marker: str
) -> LabelProbability | None:
    """The first stated label after the last match of the regular expression ``marker`` (case-insensitive) in the
    reply, e.g. the answer of a last line "Final answer: yes"; None when the marker or a label after it is missing
    (a yes or no earlier in the reasoning is never read in its place)."""
    if not logprobs:
        return None
    text, starts = _offsets(logprobs)
    ends = [m.end() for m in re.finditer(marker, text, flags=re.I)]
    if not ends:
        return None
    first = _token_at(starts, ends[-1]) if ends[-1] < len(text) else len(logprobs)
    found = [f for f in label_probabilities(logprobs, positive, negative) if f.position >= first]
    return found[0] if found else None


def label_probability(
    logprobs: Sequence[TokenLogprobs] | None,
    positive: Sequence[str],
    negative: Sequence[str],
    *,
    key: str | None = None,
    index: int = 0,
) -> float | None:
    """The positive label's probability at the ``index``-th stated label (see :func:`label_probabilities`), or
    None when there is none, the backend gave no candidates there, they are refused or contradict the label."""
    found = label_probabilities(logprobs, positive, negative, key=key)
    return found[index].probability if 0 <= index < len(found) else None


def step_label(
    step: object, positive: Sequence[str], negative: Sequence[str], *, key: str | None = None, index: int = 0
) -> LabelProbability | None:
    """The ``index``-th stated label of a :class:`~halluscope.records.StepResult`'s reply (None without one)."""
    found = label_probabilities(getattr(step, "logprobs", None), positive, negative, key=key)
    return found[index] if 0 <= index < len(found) else None


def with_label_probability(verdict: Verdict, found: LabelProbability | None) -> Verdict:
    """``verdict`` with the probability read at its label, or, where that probability is refused or contradicts
    the label, with the reason saying so (the label stays the stated one)."""
    if found is None or verdict.label == "unscored":
        return verdict
    if found.probability is not None:
        return verdict.model_copy(update={"support_probability": found.probability})
    if found.note is None:
        return verdict
    reason = f"{verdict.reason} ({found.note})" if verdict.reason else found.note
    return verdict.model_copy(update={"reason": reason})


def step_probability(
    step: object, positive: Sequence[str], negative: Sequence[str], *, key: str | None = None, index: int = 0
) -> float | None:
    """:func:`label_probability` of a :class:`~halluscope.records.StepResult`'s reply (None without logprobs)."""
    return label_probability(getattr(step, "logprobs", None), positive, negative, key=key, index=index)


@dataclass(frozen=True)
class Answer:
    """A one-word reply read at its answer (see :func:`read_answer`).

    ``stated``: the label its first word states (None: neither); ``label``: the label it gives the claim (the
    stated one, else the probabilities' when the label tokens hold ``min_mass``; None: unscored, ``unscored``
    says why); ``probability``: P(positive) to record with that label (None where there is none, where the
    position is refused, or where it contradicts the stated answer: ``read`` keeps it, ``note`` says so)."""

    stated: bool | None
    label: bool | None
    probability: float | None
    read: float | None = None
    label_mass: float | None = None
    note: str = ""
    unscored: str | None = None


def first_word(text: str) -> tuple[int, str] | None:
    """Where a reply's first word starts and the word, when only whitespace, quotes or emphasis come before it."""
    match = _WORD.search(text)
    if match is None or text[: match.start()].strip(_MARKUP) != "":
        return None
    return match.start(), match.group(0)


def stated_first(text: str, positive: Sequence[str], negative: Sequence[str]) -> bool | None:
    """True / False when the reply's first word is a positive / negative label (any case), standing alone or
    followed by punctuation ("Yes.", "No, ..."), not the start of a phrase ("No problem!", "Yes it might"); None
    otherwise."""
    found = first_word(text)
    if found is None:
        return None
    start, word = found
    rest = text[start + len(word) :].lstrip(" \t")
    if rest and (rest[0].isalnum() or rest[0] in "'-"):
        return None
    word = word.lower()
    if word in (p.lower() for p in positive):
        return True
    if word in (n.lower() for n in negative):
        return False
    return None


def answer_position(logprobs: Sequence[TokenLogprobs], word: str | None) -> int | None:
    """The index of the token where the reply's answer starts: the first one holding a character other than
    whitespace, quotes or emphasis. None when the tokens spell no such character, or a first word other than
    ``word`` (the reply's own first word; the tokens then do not describe the reply)."""
    text, starts = _offsets(logprobs)
    offset = next((i for i, ch in enumerate(text) if ch not in _MARKUP), None)
    if offset is None:
        return None
    found = first_word(text)
    if (found[1].lower() if found else None) != (word.lower() if word else None):
        return None
    return _token_at(starts, offset)


def read_answer(
    text: str,
    logprobs: Sequence[TokenLogprobs] | None,
    positive: Sequence[str],
    negative: Sequence[str],
    *,
    min_mass: float = MIN_LABEL_MASS,
) -> Answer:
    """A one-word reply's label and P(positive), read at its answer only.

    The answer is the reply's first word (:func:`stated_first`); its probability is read at the token where that
    word starts (:func:`answer_position`), never at a leading space or a later token. Log-probabilities there that
    are not probabilities (:func:`refusal`) leave the claim unscored with the reason. A first word that is neither
    label is read from the probabilities only when the label tokens hold at least ``min_mass`` of the probability
    there (``MIN_LABEL_MASS``), else unscored. When the stated answer and the probability disagree the answer
    decides the label and no probability is recorded (both are given in ``note``): the probability score then
    counts the claim by its label, 0 or 1, as it does a verdict without a probability."""
    pos_name, neg_name = positive[0], negative[0]
    stated = stated_first(text, positive, negative)
    word = first_word(text)
    reading = PositionReading(None)
    if logprobs:
        i = answer_position(logprobs, word[1] if word else None)
        if i is not None:
            reading = read_position(logprobs[i], positive, negative)
    if reading.refused is not None:
        why = f"the token log-probabilities at the answer are refused: {reading.refused}"
        return Answer(stated, None, None, unscored=why)
    p, mass = reading.probability, reading.label_mass
    if stated is not None:
        if contradicts(stated, p):
            note = (
                f"P({pos_name}) = {p:.3f} at the answer token disagrees with the answer "
                f"{pos_name if stated else neg_name}: the answer decides, the probability is not used"
            )
            return Answer(stated, stated, None, p, mass, note)
        return Answer(stated, stated, p, p, mass)
    quoted = repr(text[:80])
    if p is None or mass < min_mass:
        held = "" if p is None else f"; the label tokens hold {mass:.3f} of its first token's probability"
        minimum = "" if p is None else f" (at least {min_mass} is needed to read it from the probabilities)"
        return Answer(
            None,
            None,
            None,
            p,
            mass,
            unscored=f"the short reply states neither {pos_name} nor {neg_name}: {quoted}{held}{minimum}",
        )
    note = (
        f"the reply does not answer {pos_name} or {neg_name} on its own ({text[:40]!r}); P({pos_name}) = {p:.3f} over "
        f"{pos_name} and {neg_name} among its first token's candidates, which hold {mass:.3f} of its probability"
    )
    return Answer(None, p >= 0.5, p, p, mass, note)
