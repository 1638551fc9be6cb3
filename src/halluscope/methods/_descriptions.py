"""Free-form inconsistency descriptions (FINAL, seed 002), shared by ``localize`` and ``factscore``:
parse a listed answer, map each description to target spans where its wording allows, de-duplicate.
"""

from __future__ import annotations

import json
import re

from rapidfuzz import fuzz

from halluscope.records import Span
from halluscope.text import ParseError, locate

# ------------------------------------------------------------------------------------------- parsing

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_ITEM_START = re.compile(r"^\s*(?:[-*•]+|\(?[A-Za-z]\)|[A-Z][.:]|\(?\d{1,2}[.):]|\(\d{1,2}\))(?:\s+|$)")
_LABEL = re.compile(r"^\s*(?:description|inconsistency|explanation|issue|error|problem)\s*\d*\s*[:\-]\s*", re.I)
_NONE = re.compile(
    r"^\W*(?:none|n/?a|nothing|no (?:factual )?(?:inconsistenc(?:y|ies)|errors?|issues?|problems?)"
    r"(?: (?:were |was )?(?:found|identified|detected))?|there are no (?:factual )?(?:inconsistencies|errors|issues)"
    r"(?: in the (?:summary|text))?)\W*$",
    re.I,
)


_PLACEHOLDER = re.compile(r"^\W*(?:<[^<>]{0,60}>|\.\.\.|…|description)\W*$", re.I)


def is_none_answer(text: str) -> bool:
    return bool(_NONE.match(text.replace("*", "").strip()))


def is_placeholder(text: str) -> bool:
    """A prompt's format placeholder echoed back ("<description>", "...") rather than a description."""
    return bool(_PLACEHOLDER.match(text))


def parse_description_list(text: str, marker: str | None = None) -> list[str]:
    """Descriptions from a listed reply (``A. ...``, ``1) ...``, ``- ...``, ``Description: ...``, a JSON list
    of strings), taken from after the last ``marker`` when one is given. An explicit "None" gives ``[]``.
    Lines before the first list item are preamble; lines after an item continue it. Raises ParseError when
    the marker is missing or nothing reads as an answer."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    body = _THINK.sub("", text).replace("**", "")
    if marker:
        idx = body.lower().rfind(marker.lower())
        if idx < 0:
            raise ParseError(f"marker {marker!r} not found in reply")
        body = body[idx + len(marker):]
    body = body.strip().lstrip(":").strip()
    if not body:
        raise ParseError("nothing after the marker" if marker else "empty reply")
    if is_none_answer(body):
        return []
    if body.startswith("["):
        try:
            value = json.loads(body)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [" ".join(v.split()) for v in value
                    if v.strip() and not is_none_answer(v) and not is_placeholder(v)]
    lines = [line for line in body.splitlines() if line.strip()]
    has_items = any(_ITEM_START.match(line) for line in lines)
    items: list[list[str]] = []
    for line in lines:
        if has_items:
            m = _ITEM_START.match(line)
            if m:
                items.append([line[m.end():]])
                continue
            if not items:  # preamble before the first item
                if is_none_answer(line):
                    return []
                continue
            items[-1].append(line)
        else:
            items.append([line])
    out: list[str] = []
    for parts in items:
        joined = " ".join(_LABEL.sub("", p).strip() for p in parts)
        joined = " ".join(joined.split())
        if joined and not is_none_answer(joined) and not is_placeholder(joined):
            out.append(joined)
    if not out:
        if any(is_none_answer(p) for parts in items for p in parts):
            return []
        raise ParseError("no descriptions found in reply")
    return out


# ------------------------------------------------------------------------------------------- spans

_QUOTED = re.compile(
    r'"([^"\n]{2,300})"|“([^”\n]{2,300})”|‘([^’\n]{2,300})’|(?<![\w])\'([^\'\n]{2,300})\'(?![\w])'
)
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


def merge_spans(spans: list[Span]) -> list[Span]:
    """Sorted, with overlapping or touching spans merged."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        if out and s.start <= out[-1].end:
            if s.end > out[-1].end:
                out[-1] = Span(start=out[-1].start, end=s.end)
        else:
            out.append(s)
    return out


# ------------------------------------------------------------------------------------------- dedup


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def fuzzy_duplicate_groups(descriptions: list[str], threshold: float = 85.0,
                           spans: list[list[Span]] | None = None) -> list[list[int]]:
    """Group descriptions of the same inconsistency: two are duplicates when their word-order-insensitive
    similarity (rapidfuzz ``token_sort_ratio``) is at least ``threshold``, or when both were pinned to
    exactly the same target spans. Groups are connected components, in order of first appearance.

    Deliberately conservative: ``token_sort_ratio`` (not ``token_set_ratio``, which calls "the age is not
    mentioned" and "the location is not mentioned" duplicates) merges near-identical wordings, not
    paraphrases; the LLM de-duplicator handles paraphrases."""
    n = len(descriptions)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    norm = [_normalized(d) for d in descriptions]
    for i in range(n):
        for j in range(i + 1, n):
            same_spans = bool(spans and spans[i] and spans[i] == spans[j])
            if same_spans or fuzz.token_sort_ratio(norm[i], norm[j]) >= threshold:
                parent[find(j)] = find(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def most_specific(descriptions: list[str], group: list[int], spans: list[list[Span]] | None = None) -> int:
    """The member of a duplicate group to keep: one pinned to the target if any, then the longest wording
    (more specific in practice), then the first."""
    return max(group, key=lambda i: (bool(spans and spans[i]), len(descriptions[i]), -i))
