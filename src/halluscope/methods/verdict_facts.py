"""The atomic facts of a flagged sentence (verdict first, ``fact_max``): what is scored to find the failing fact,
the part of the sentence that the finding's span marks and that the evidence and the fix are chosen for.

A sentence the clause cut leaves whole (:func:`~halluscope.text.clauses.clause_parts`: no ``;``, no ``, and``, no
bare ``and``/``but`` ...) is taken as one fact and is not split (no call). Any other is split by the decomposer
stage ``fact_decomposer`` names (``factscore`` by default: one call, at most one repair request, its own prompt),
given the sentence as its target; where that stage makes no LLM call, fails, or finds fewer than two facts, the
sentence's clauses and conjuncts are its facts (no call). A fact is located in the sentence by
:func:`~halluscope.text.spans.locate` (exact, normalized, then fuzzy at 85), else as the clause it was reworded from
(the one holding at least two thirds of its content words, :func:`~halluscope.text.clauses.clause_of`); a clause
always is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from halluscope.records import Claim, LLMCall, Span
from halluscope.text.clauses import clause_of, clause_parts
from halluscope.text.spans import locate

CLAUSES = "clauses"
"""The ``fact_decomposer`` value that splits a flagged sentence at its clauses and conjuncts only (no LLM call)."""


@dataclass
class SplitFacts:
    """A flagged sentence's facts (each a claim of kind ``atomic``, with its characters in the target where they
    were located), which splitter gave them, its calls, and why the decomposer's facts were not used."""

    facts: list[Claim]
    split_by: str
    calls: list[LLMCall] = field(default_factory=list)
    note: str | None = None


def sentence_start(claim: Claim) -> int | None:
    """Where the claim's text starts in the target: its one span's start when the span is as long as its text (a
    sentence claim), else None (its facts then have no target characters)."""
    if len(claim.target_spans) != 1 or len(claim.target_spans[0]) != len(claim.text):
        return None
    return claim.target_spans[0].start


def fact_span(fact: str, claim: Claim) -> Span | None:
    """The characters of ``fact`` in the target, found inside its sentence ``claim`` (end punctuation left out): where
    :func:`~halluscope.text.spans.locate` finds it, else the clause it was reworded from
    (:func:`~halluscope.text.clauses.clause_of`); None where neither is found, where that is the whole sentence, or
    where the sentence's place in the target is not known."""
    start = sentence_start(claim)
    text = fact.strip().rstrip(".!?").strip()
    if start is None or not text:
        return None
    match = locate(text, claim.text)
    at = (match.span.start, match.span.end) if match is not None else clause_of(text, claim.text)
    if at is None or at[1] - at[0] >= len(claim.text.strip().rstrip(".!?")):
        return None  # the whole sentence is no narrower span
    return Span(start=start + at[0], end=start + at[1])


def _fact(text: str, claim: Claim, i: int) -> Claim:
    span = fact_span(text, claim)
    return Claim(
        text=text,
        kind="atomic",
        id=f"{claim.id or 'c'}.f{i}",
        target_spans=[span] if span is not None else [],
    )


def clause_facts(claim: Claim) -> list[Claim]:
    """The sentence's clauses and conjuncts as its facts (at least two, or none)."""
    parts = clause_parts(claim.text)
    if len(parts) < 2:
        return []
    start = sentence_start(claim)
    out = []
    for i, (a, b) in enumerate(parts, 1):
        spans = [Span(start=start + a, end=start + b)] if start is not None else []
        out.append(Claim(text=claim.text[a:b], kind="atomic", id=f"{claim.id or 'c'}.f{i}", target_spans=spans))
    return out


def splittable(claim: Claim) -> bool:
    """Whether a flagged claim is split into facts: a target sentence with at least two clauses or conjuncts."""
    return claim.kind == "sentence" and len(clause_parts(claim.text)) >= 2


async def split_facts(claim: Claim, decomposer: Any, name: str) -> SplitFacts:
    """The facts of the flagged sentence ``claim``: the decomposer's (``decomposer`` is None for ``clauses``), or
    its clauses where the decomposer fails or finds fewer than two."""
    if decomposer is None:
        return SplitFacts(clause_facts(claim), CLAUSES)
    try:
        step = await decomposer(claim.text)
    except Exception as exc:  # noqa: BLE001 - a failed split leaves the clauses, never the claim unexplained
        return SplitFacts(clause_facts(claim), CLAUSES, note=f"{name} failed: {type(exc).__name__}: {exc}"[:300])
    calls = list(step.calls)
    if step.value is None:
        return SplitFacts(clause_facts(claim), CLAUSES, calls, f"{name}: {step.error}"[:300])
    texts = list(dict.fromkeys(" ".join(c.text.split()) for c in step.value if c.text.strip()))
    if len(texts) < 2:
        return SplitFacts(clause_facts(claim), CLAUSES, calls, f"{name} found {len(texts)} fact(s)")
    return SplitFacts([_fact(t, claim, i) for i, t in enumerate(texts, 1)], name, calls)
