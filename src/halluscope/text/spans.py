"""Map a claim, a quote or a phrase back to character spans of a text: exact, then normalized, then fuzzy."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz import fuzz

from halluscope.records import Span
from halluscope.text.fence import strip_fence_tags

_WS = re.compile(r"\s+")
_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "–": "-", "—": "-"})


@dataclass(frozen=True)
class Match:
    span: Span
    how: Literal["exact", "normalized", "fuzzy"]
    score: float  # 100 for exact/normalized, rapidfuzz similarity for fuzzy


def _normalize_with_map(text: str) -> tuple[str, list[int]]:
    """Lower-case, unify quotes/dashes, collapse whitespace; keep a map from normalized to original index."""
    out: list[str] = []
    index: list[int] = []
    prev_space = True
    for i, ch in enumerate(text.translate(_QUOTES).lower()):
        if ch.isspace():
            if prev_space:
                continue
            ch = " "
            prev_space = True
        else:
            prev_space = False
        out.append(ch)
        index.append(i)
    while out and out[-1] == " ":
        out.pop()
        index.pop()
    return "".join(out), index


_QUOTE_CHARS = '"“”„«»'


def _strip_quotes(needle: str) -> str:
    """Drop surrounding whitespace and the quotation marks a model puts around a quote."""
    needle = needle.strip().strip(_QUOTE_CHARS).strip()
    if len(needle) >= 2 and needle[0] in "'‘" and needle[-1] in "'’":
        needle = needle[1:-1].strip()
    return needle


def _unfenced(needle: str, haystack: str) -> str:
    """``needle`` without the prompt's data fence tags (``<source_KEY>`` ... ``</source_KEY>``) that models copy
    into their quotes of the fenced text; kept as is when the haystack itself holds them."""
    stripped = strip_fence_tags(needle)
    return needle if stripped == needle or needle in haystack else stripped


def locate(needle: str, haystack: str, *, min_fuzzy: float = 85.0, start: int = 0) -> Match | None:
    """Where ``needle`` occurs in ``haystack[start:]``, or None. Fuzzy matches below ``min_fuzzy`` are rejected,
    so an invented quote does not get pinned to the nearest look-alike."""
    needle = _strip_quotes(_unfenced(needle, haystack))
    if not needle or not haystack:
        return None
    pos = haystack.find(needle, start)
    if pos >= 0:
        return Match(Span(start=pos, end=pos + len(needle)), "exact", 100.0)
    norm_hay, hay_map = _normalize_with_map(haystack)
    norm_needle, _ = _normalize_with_map(needle)
    norm_needle = norm_needle.strip()
    if not norm_needle:
        return None
    norm_start = next((k for k, i in enumerate(hay_map) if i >= start), len(hay_map))
    pos = norm_hay.find(norm_needle, norm_start)
    if pos >= 0:
        s, e = hay_map[pos], hay_map[pos + len(norm_needle) - 1] + 1
        return Match(Span(start=s, end=e), "normalized", 100.0)
    if len(norm_needle) < 8:
        return None  # fuzzy matching short strings gives nonsense
    hay_part = norm_hay[norm_start:]
    res = fuzz.partial_ratio_alignment(norm_needle, hay_part, score_cutoff=min_fuzzy)
    if res is None or res.dest_end <= res.dest_start:
        return None
    # partial_ratio scores the shorter string inside the longer one, so a needle that merely *contains*
    # the haystack (plus invented text) would score 100; judge the found region against the whole needle.
    score = fuzz.ratio(norm_needle, hay_part[res.dest_start : res.dest_end])
    if score < min_fuzzy:
        return None
    s = hay_map[norm_start + res.dest_start]
    e = hay_map[norm_start + res.dest_end - 1] + 1
    while s < e and haystack[s].isspace():  # an alignment may start or end on a space
        s += 1
    while e > s and haystack[e - 1].isspace():
        e -= 1
    return Match(Span(start=s, end=e), "fuzzy", float(score))


def locate_all(needles: list[str], haystack: str, **kwargs: Any) -> list[Match | None]:
    return [locate(n, haystack, **kwargs) for n in needles]
