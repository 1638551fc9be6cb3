"""Clauses and conjuncts of a sentence, without a model: the flagged sentence with its unsupported part removed (the
clause holding the most words the source never uses, or the one a failing fact lies in: a candidate fix, re-verified
before it is shown), and the parts themselves (the atomic facts of a flagged sentence when no LLM decomposition is
available)."""

from __future__ import annotations

import re

from halluscope.text.lexical import content_tokens, tokens

_JOINS = re.compile(r";\s+|,\s+(?:and|but|while|whereas|which|although)\s+|\s+(?:and|but|while|whereas)\s+")
_WORD = re.compile(r"[^\W_]+(?:[.,][0-9]+)*%?")
_COMMON = frozenset(
    "the a an and or but of to in on at for from with by as is are was were be been it its this that these those "
    "will would can could has have had not no than then there their they them he she his her we our you your".split()
)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _content(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in _COMMON and (len(w) > 2 or w[0].isdigit())]


def unknown_words(text: str, source: str) -> int:
    """How many of ``text``'s content words (numbers included) ``source`` never uses."""
    known = _words(source)
    return sum(1 for w in _content(text) if w not in known)


def _cut(sentence: str) -> tuple[str, str, list[re.Match[str]], list[tuple[int, int]]]:
    """``sentence`` stripped, as its body, its end punctuation, the joins in the body and the parts between them
    (offsets in the body)."""
    text = sentence.strip()
    end = text[-1] if text and text[-1] in ".!?" else ""
    body = text[: len(text) - len(end)]
    cuts = list(_JOINS.finditer(body))
    bounds = [0, *(c for m in cuts for c in (m.start(), m.end())), len(body)]
    parts = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    return body, end, cuts, parts


def clause_parts(sentence: str) -> list[tuple[int, int]]:
    """The clauses and conjuncts of ``sentence`` (cut at ``;``, at ``, and`` / ``, but`` / ``, which`` ... and at a
    bare ``and`` / ``but`` / ``while`` / ``whereas``) as ``(start, end)`` offsets in ``sentence``, in order, end
    punctuation and surrounding spaces and commas left out; one part when there is nothing to cut at."""
    body, _, _, parts = _cut(sentence)
    lead = len(sentence) - len(sentence.lstrip())
    out = []
    for a, b in parts:
        piece = body[a:b]
        a += len(piece) - len(piece.lstrip(" ,;"))
        b -= len(piece) - len(piece.rstrip(" ,;"))
        if b > a:
            out.append((lead + a, lead + b))
    return out


def _dropped(body: str, end: str, cuts: list[re.Match[str]], parts: list[tuple[int, int]], i: int) -> str | None:
    """The body without part ``i`` (and the join before it, or after it for the first), end punctuation kept; None
    when nothing checkable is left."""
    if i == 0:
        rest = body[parts[1][0] :]
        rest = rest[:1].upper() + rest[1:]
    else:
        rest = body[: cuts[i - 1].start()] + body[parts[i][1] :]
    rest = rest.strip(" ,;")
    if not _content(rest):
        return None
    return rest + end


def without_unsupported_part(sentence: str, source: str) -> str | None:
    """``sentence`` without the clause or conjunct that holds the most content words ``source`` never uses, its end
    punctuation kept; None when the sentence has one part, no part has such words, two parts tie for the most, or
    nothing checkable is left."""
    body, end, cuts, parts = _cut(sentence)
    if not cuts:
        return None
    counts = [unknown_words(body[a:b], source) for a, b in parts]
    worst = max(counts)
    if worst == 0 or counts.count(worst) > 1:
        return None
    return _dropped(body, end, cuts, parts, counts.index(worst))


def without_part_at(sentence: str, start: int, end: int) -> str | None:
    """``sentence`` without the clause or conjunct that ``sentence[start:end]`` (a failing fact located in it)
    overlaps most, its end punctuation kept; None when the sentence has one part, the characters overlap none, or
    nothing checkable is left."""
    body, stop, cuts, parts = _cut(sentence)
    if not cuts:
        return None
    lead = len(sentence) - len(sentence.lstrip())
    overlap = [max(0, min(b + lead, end) - max(a + lead, start)) for a, b in parts]
    if max(overlap) == 0:
        return None
    return _dropped(body, stop, cuts, parts, overlap.index(max(overlap)))


CLAUSE_OF_SHARE = 2 / 3
"""A fact belongs to the clause holding at least this share of its content words (:func:`clause_of`)."""


def _stems(text: str) -> set[str]:
    toks = tokens(text)
    return {t.norm for t in content_tokens(toks)} | {t.lower for t in toks if t.lower.isdigit()}


def clause_of(fact: str, sentence: str) -> tuple[int, int] | None:
    """The clause or conjunct of ``sentence`` (:func:`clause_parts`) that a reworded ``fact`` comes from: the one
    holding the most of its content words (stems, and numbers), when it holds at least :data:`CLAUSE_OF_SHARE` of
    them and no other clause holds as many; None otherwise, or when the sentence has one part."""
    parts = clause_parts(sentence)
    wanted = _stems(fact)
    if len(parts) < 2 or not wanted:
        return None
    shared = [len(wanted & _stems(sentence[a:b])) for a, b in parts]
    best = max(shared)
    if best < CLAUSE_OF_SHARE * len(wanted) or shared.count(best) > 1:
        return None
    return parts[shared.index(best)]
