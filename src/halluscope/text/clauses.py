"""The flagged sentence with its unsupported part removed, without a model: split into clauses and conjuncts, the
one holding the most words the source never uses is dropped (a candidate fix, re-verified before it is shown)."""

from __future__ import annotations

import re

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


def without_unsupported_part(sentence: str, source: str) -> str | None:
    """``sentence`` without the clause or conjunct that holds the most content words ``source`` never uses, its end
    punctuation kept; None when the sentence has one part, no part has such words, two parts tie for the most, or
    nothing checkable is left."""
    text = sentence.strip()
    end = text[-1] if text and text[-1] in ".!?" else ""
    body = text[: len(text) - len(end)]
    cuts = list(_JOINS.finditer(body))
    if not cuts:
        return None
    bounds = [0, *(c for m in cuts for c in (m.start(), m.end())), len(body)]
    parts = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    counts = [unknown_words(body[a:b], source) for a, b in parts]
    worst = max(counts)
    if worst == 0 or counts.count(worst) > 1:
        return None
    i = counts.index(worst)
    if i == 0:
        rest = body[parts[1][0] :]
        rest = rest[:1].upper() + rest[1:]
    else:
        rest = body[: cuts[i - 1].start()] + body[parts[i][1] :]
    rest = rest.strip(" ,;")
    if not _content(rest):
        return None
    return rest + end
