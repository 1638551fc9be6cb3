"""For the tests that fuzz a method's reply parsers: valid replies damaged the ways a model's replies go wrong (cut
off, wrapped in prose or a code fence, a stray character, ...; some mutations stay valid, some do not), and a
parser run over many replies, split into those it accepted and those it refused.

One generator, :func:`mutations`, with the edits as a tuple so each parser's test picks the damage that matters to
it; the random draws are made in a fixed order (the reply, the edit, then the edit's own draws), so a seed always
gives the same list."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from halluscope.text import ParseError

Edit = Callable[[str, random.Random], str]
"""One way to damage a reply: a function of the reply and the generator's random source."""


def cut(text: str, rng: random.Random) -> str:
    """The reply cut off at a random point (as a reply that ran out of tokens)."""
    return text[: rng.randrange(len(text))]


def unchanged(text: str, rng: random.Random) -> str:
    """The reply as it was (so the fuzzed replies keep some valid ones)."""
    return text


def wrap(before: str, after: str = "") -> Edit:
    """The reply with ``before`` and ``after`` around it (prose, a code fence)."""
    return lambda text, rng: before + text + after


def stray(characters: str) -> Edit:
    """The reply with one of ``characters`` inserted at a random point."""

    def insert(text: str, rng: random.Random) -> str:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(characters) + text[i:]

    return insert


def replace(*pairs: tuple[str, str]) -> Edit:
    """The reply with each ``(old, new)`` replaced in turn (a key renamed, ...)."""

    def rename(text: str, rng: random.Random) -> str:
        for old, new in pairs:
            text = text.replace(old, new)
        return text

    return rename


def upper(text: str, rng: random.Random) -> str:
    """The reply upper-cased (keys and values alike)."""
    return text.upper()


FENCED_OR_CUT: tuple[Edit, ...] = (wrap("Sure, here it is:\n```json\n", "\n```"), cut, stray('{}[]",: '), unchanged)
"""The usual damage: wrapped in a code fence after a sentence, cut off, a stray JSON character, or none."""


def mutations(valid: Sequence[str], n: int, seed: int = 0, edits: Sequence[Edit] = FENCED_OR_CUT) -> list[str]:
    """``n`` replies, each one of ``valid`` picked at random with one of ``edits`` picked at random applied."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = rng.choice(valid)
        out.append(edits[rng.randrange(len(edits))](text, rng))
    return out


def parse_each(
    parse: Callable[[str], Any], replies: Iterable[str], refusals: tuple[type[Exception], ...] = (ParseError,)
) -> tuple[list[tuple[str, Any]], list[Exception]]:
    """``parse`` run on every reply: the replies it accepted, each with its value, and the errors it refused the
    others with (one of ``refusals``); any other exception escapes, failing the test."""
    parsed: list[tuple[str, Any]] = []
    refused: list[Exception] = []
    for reply in replies:
        try:
            value = parse(reply)
        except refusals as exc:
            refused.append(exc)
        else:
            parsed.append((reply, value))
    return parsed, refused
