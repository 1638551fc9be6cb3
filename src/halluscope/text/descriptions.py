"""Free-form inconsistency descriptions (FINAL, FINAL paper), used by ``localize`` and ``factscore``: clean a
declared list of descriptions, map each description to the target words it quotes, group duplicates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from rapidfuzz import fuzz, process

from halluscope.records import Span
from halluscope.text.placeholders import is_placeholder
from halluscope.text.spans import locate

# ------------------------------------------------------------------------------------------- a declared list

_NONE = re.compile(
    r"^\W*(?:none|n/?a|nothing|no (?:factual )?(?:inconsistenc(?:y|ies)|errors?|issues?|problems?)"
    r"(?: (?:were |was )?(?:found|identified|detected))?|there are no (?:factual )?(?:inconsistencies|errors|issues)"
    r"(?: in the (?:summary|text))?)\W*$",
    re.I,
)


def is_none_answer(text: str) -> bool:
    """Whether ``text`` is, as a whole, the explicit "no inconsistency" answer ("None", "No inconsistencies
    found.", "There are no factual inconsistencies in the summary.")."""
    return bool(_NONE.match(text.replace("*", "").strip()))


def clean_descriptions(
    items: Sequence[str], examples: frozenset[str] = frozenset(), *, refuse_echoes: bool = True
) -> list[str]:
    """The descriptions of a declared list, whitespace-normalized, without echoed placeholders or the prompt's
    own examples. A list whose only items state "no inconsistency" is that answer (``[]``). Raises ValueError
    when "None" sits beside real descriptions (the reply contradicts itself) and, with ``refuse_echoes``,
    when every item was a placeholder (the model repeated the format instead of answering)."""
    kept: list[str] = []
    nones = echoes = 0
    for item in items:
        text = " ".join(item.split())
        if is_none_answer(text):
            nones += 1
        elif is_placeholder(text, examples):
            echoes += 1
        else:
            kept.append(text)
    if kept and nones:
        raise ValueError("the list says there is no inconsistency and also lists some")
    if not kept and echoes and refuse_echoes:
        raise ValueError("the list repeats the format's placeholder or example instead of describing anything")
    return kept


# ------------------------------------------------------------------------------------------- spans

_QUOTED = re.compile(r'"([^"\n]{2,300})"|“([^”\n]{2,300})”|‘([^’\n]{2,300})’|(?<![\w])\'([^\'\n]{2,300})\'(?![\w])')
_CLAIMED = re.compile(
    r"\b(?:summary|text|answer|output)\s+(?:states|says|claims|mentions|reports|asserts|suggests|calls \w+|"
    r"refers to|describes \w+ as)\s+(?:that\s+)?(.{12,200}?)"
    r"(?:,\s*(?:but|while|whereas|however|which|although|yet)\b|\s+but\b|;|\.\s|\.?$)",
    re.I,
)
QUOTE_MIN_FUZZY = 90.0  # a quoted phrase must match the target closely to be pinned to it


def quoted_phrases(description: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(description)]


def spans_for_description(description: str, target: str) -> list[Span]:
    """Target spans a description points at: its quoted phrases found in the target (exact, normalized or
    close fuzzy matches), else the clause after "the summary states/says/claims ..." when it is found in the
    target the same way. ``[]`` when the wording does not allow it (the description then stands alone)."""
    spans: list[Span] = []
    for phrase in quoted_phrases(description):
        match = locate(phrase, target, min_fuzzy=QUOTE_MIN_FUZZY)
        if match is not None:
            spans.append(match.span)
    if not spans:
        for m in _CLAIMED.finditer(description):
            match = locate(m.group(1).strip().rstrip("."), target, min_fuzzy=QUOTE_MIN_FUZZY)
            if match is not None:
                spans.append(match.span)
    return merge_spans(spans)


def merge_spans(spans: Sequence[Span]) -> list[Span]:
    """Sorted, with overlapping or touching spans merged."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        if out and s.start <= out[-1].end:
            if s.end > out[-1].end:
                out[-1] = Span(start=out[-1].start, end=s.end)
        else:
            out.append(s)
    return out


# ------------------------------------------------------------------------------------------- duplicates


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


MAX_FUZZY_DESCRIPTIONS = 2_000
"""Descriptions compared pairwise at most (4 M pairs, a few seconds in rapidfuzz); past it only identical
wordings (words in any order) and identical spans merge: pairwise work grows with the square of the count."""

_ROW_BLOCK = 256  # rows of the similarity matrix computed at once (bounded memory: 256 x n bytes)


def fuzzy_duplicate_groups(
    descriptions: Sequence[str], threshold: float = 85.0, spans: Sequence[Sequence[Span]] | None = None
) -> list[list[int]]:
    """Group descriptions of the same inconsistency: two are duplicates when their word-order-insensitive
    similarity (rapidfuzz ``token_sort_ratio``) is at least ``threshold``, or when both were pinned to
    exactly the same target spans. Groups are connected components, in order of first appearance.

    Deliberately conservative: ``token_sort_ratio`` (not ``token_set_ratio``, which calls "the age is not
    mentioned" and "the location is not mentioned" duplicates) merges near-identical wordings, not
    paraphrases; the LLM de-duplicator handles paraphrases.

    More than ``MAX_FUZZY_DESCRIPTIONS`` are not compared pairwise: only identical sorted wordings and identical
    spans merge (see :func:`fuzzy_is_capped`)."""
    n = len(descriptions)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)

    # token_sort_ratio is the plain ratio of the word-sorted strings: sort once, then compare in C
    ordered = [" ".join(sorted(_normalized(d).split())) for d in descriptions]
    first_with: dict[object, int] = {}
    for i in range(n):  # identical spans, and identical wordings, merge in one pass
        keys: list[object] = [("text", ordered[i])]
        if spans and spans[i]:
            keys.append(("spans", tuple(spans[i])))
        for key in keys:
            if key in first_with:
                union(first_with[key], i)
            else:
                first_with[key] = i
    if 1 < n <= MAX_FUZZY_DESCRIPTIONS and threshold <= 0:
        for j in range(n):  # every pair scores at least 0
            union(0, j)
    elif 1 < n <= MAX_FUZZY_DESCRIPTIONS:
        for start in range(0, n, _ROW_BLOCK):
            block = process.cdist(
                ordered[start : start + _ROW_BLOCK],
                ordered,
                scorer=fuzz.ratio,
                score_cutoff=threshold,
                dtype=np.float32,
                workers=1,
            )
            rows, cols = np.nonzero(np.triu(block >= threshold, k=start + 1))
            for row, j in zip((rows + start).tolist(), cols.tolist()):
                union(row, j)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def fuzzy_is_capped(count: int) -> bool:
    """True when ``count`` descriptions are too many to compare pairwise (see ``MAX_FUZZY_DESCRIPTIONS``)."""
    return count > MAX_FUZZY_DESCRIPTIONS


def most_specific(
    descriptions: Sequence[str], group: Sequence[int], spans: Sequence[Sequence[Span]] | None = None
) -> int:
    """The member of a duplicate group to keep: one pinned to the target if any, then the longest wording
    (more specific in practice), then the first."""
    return max(group, key=lambda i: (bool(spans and spans[i]), len(descriptions[i]), -i))
