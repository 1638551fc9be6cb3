"""The source sentences closest to a claim, by the content words they share (no model): the passages worth asking
about when the evidence for a flagged claim is chosen."""

from __future__ import annotations

from functools import lru_cache

from halluscope.text.lexical import content_tokens, tokens
from halluscope.text.sentences import Sentence, split_sentences


@lru_cache(maxsize=8)
def _sentences(source: str) -> tuple[Sentence, ...]:
    return tuple(split_sentences(source))


def _stems(text: str) -> set[str]:
    toks = tokens(text)
    return {t.norm for t in content_tokens(toks)} | {t.lower for t in toks if t.lower.isdigit()}


def closest_sentences(claim: str, source: str, k: int) -> list[Sentence]:
    """At most ``k`` sentences of ``source`` sharing the most content words (stems, and numbers) with ``claim``,
    most first (source order on a tie); a sentence sharing none is never among them."""
    if k <= 0:
        return []
    wanted = _stems(claim)
    shared = [(len(wanted & _stems(s.text)), s.index, s) for s in _sentences(source)]
    ranked = sorted((item for item in shared if item[0] > 0), key=lambda item: (-item[0], item[1]))
    return [s for _, _, s in ranked[:k]]
