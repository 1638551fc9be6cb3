"""Weaving facts into a target: parsing an ``<ins>``-marked reply, checking the text outside the insertions,
inserting at sentence boundaries without an LLM, and checking every span of an :class:`InjectedClaim`."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz

from halluscope.records import Span
from halluscope.text import ParseError, locate, split_sentences
from halluscope.text.tags import tag_blocks


@dataclass(frozen=True)
class InjectedClaim:
    fact: str  # the invented statement (a gold description)
    inserted_text: str  # what was inserted into the target (``new_target[span]``)
    span: Span

    def as_meta(self) -> dict[str, Any]:
        return {"fact": self.fact, "inserted_text": self.inserted_text, "span": self.span.model_dump()}

    def as_gold(self, number: int) -> dict[str, Any]:
        """This injection as a gold hallucinated claim (``meta.gold_claims``)."""
        return {
            "id": f"h{number}",
            "text": self.fact,
            "span": self.span.model_dump(),
            "hallucinated": True,
            "inserted_text": self.inserted_text,
        }


_STRAY_TAG = re.compile(r"</?ins>", re.I)


def parse_marked_text(reply: str) -> tuple[str, list[tuple[int, int]]]:
    """Strip ``<ins>…</ins>`` from a reply: the new text and the (start, end) of each inserted piece in it
    (surrounding whitespace excluded). Raises ParseError without any well-formed insertion."""
    if not isinstance(reply, str) or not reply.strip():
        raise ParseError("empty reply")
    text = reply.strip()
    if text.startswith("```"):
        text = re.sub(r"^```[a-zA-Z]*\n?|\n?```$", "", text).strip()
    out: list[str] = []
    pieces: list[tuple[int, int]] = []
    length = pos = 0
    for block in tag_blocks(text, "ins"):  # one pass: a regex here was quadratic on unclosed <ins> tags
        before = text[pos : block.start]
        out.append(before)
        length += len(before)
        inner = text[block.inner_start : block.inner_end]
        if _STRAY_TAG.search(inner):
            raise ParseError("nested <ins> tags")
        lead = len(inner) - len(inner.lstrip())
        core = inner.strip()
        if core:
            pieces.append((length + lead, length + lead + len(core)))
        out.append(inner)
        length += len(inner)
        pos = block.end
    rest = text[pos:]
    if _STRAY_TAG.search(rest) or any(_STRAY_TAG.search(t) for t in out[::2]):
        raise ParseError("unbalanced <ins> tags")
    out.append(rest)
    if not pieces:
        raise ParseError("no <ins>…</ins> insertion in the reply")
    return "".join(out), pieces


def _normalize(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"\s+([.,;:!?)])", r"\1", text)


def outside_matches_original(new_text: str, pieces: Sequence[tuple[int, int]], original: str) -> bool:
    """Whether deleting the inserted pieces gives back the original text (whitespace aside)."""
    kept, pos = [], 0
    for start, end in sorted(pieces):
        kept.append(new_text[pos:start])
        pos = end
    kept.append(new_text[pos:])
    return _normalize(" ".join(kept)) == _normalize(original)


def _as_sentence(fact: str) -> str:
    fact = fact.strip()
    return fact if fact[-1:] in ".!?\"'" else fact + "."


def weave_at_boundaries(
    target: str, facts: Sequence[str], complexity: int, rng: random.Random
) -> tuple[str, list[InjectedClaim]]:
    """Insert each fact as its own sentence after a target sentence (see module docstring); exact spans."""
    sentences = split_sentences(target)
    if not sentences:
        raise ValueError("the target has no sentences to insert after")
    placements: list[tuple[int, int, str]] = []  # (insert position, order, fact)
    for order, fact in enumerate(facts):
        if complexity == 1:
            after = rng.choice(sentences)
        else:
            after = max(sentences, key=lambda s: (fuzz.token_set_ratio(fact, s.text), -s.index))
        placements.append((after.span.end, order, fact))
    pieces: list[str] = []
    claims: list[InjectedClaim] = []
    cursor = length = 0
    for position, _, fact in sorted(placements):
        chunk = target[cursor:position]
        pieces.append(chunk)
        length += len(chunk)
        inserted = _as_sentence(fact)
        pieces.append(" " + inserted)
        claims.append(
            InjectedClaim(
                fact=fact.strip(), inserted_text=inserted, span=Span(start=length + 1, end=length + 1 + len(inserted))
            )
        )
        length += 1 + len(inserted)
        cursor = position
    pieces.append(target[cursor:])
    return "".join(pieces), claims


def verify_spans(new_target: str, claims: Sequence[InjectedClaim]) -> str | None:
    """None when every span holds exactly its inserted text (and is found there by ``locate``), else why not."""
    for c in claims:
        if c.span.end > len(new_target) or c.span.of(new_target) != c.inserted_text or not c.inserted_text:
            return f"span {c.span.start}-{c.span.end} does not hold the inserted text {c.inserted_text[:60]!r}"
        match = locate(c.inserted_text, new_target, start=c.span.start)
        if match is None or match.how != "exact" or match.span != c.span:
            return f"inserted text {c.inserted_text[:60]!r} not found at its span"
    return None
