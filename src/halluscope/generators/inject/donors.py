"""Donor facts: unsupported statements taken from the targets of other sources, without an LLM."""

from __future__ import annotations

import random
from collections.abc import Sequence

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from halluscope.records import Example
from halluscope.text import locate, split_sentences


def donor_facts(
    example: Example,
    pool: Sequence[Example],
    k: int,
    rng: random.Random,
    *,
    shortlist: int = 12,
    min_words: int = 6,
    max_words: int = 35,
) -> list[str]:
    """``k`` unsupported statements without an LLM: sentences taken from the targets of OTHER sources in
    ``pool`` (never one that shares this example's source), preferring those closest in wording to this
    target so they stay on a similar topic, and rejecting any that resembles a sentence of this source
    (rapidfuzz token-sort ratio >= 75, token-set ratio >= 90 against a source sentence of 5+ words, or
    locatable in it). Easier to spot than invented facts (they come
    from another document), but fluent, in-domain, and certainly not entailed by this source."""
    source_sentences = [s.text for s in split_sentences(example.source)]
    seen: set[str] = set()
    candidates: list[tuple[float, str, str]] = []  # (closeness to this target, sentence, its source)
    for other in pool:
        if other.source == example.source or other.id == example.id:
            continue
        for s in split_sentences(other.target):
            text = s.text.strip()
            if text in seen or not min_words <= len(text.split()) <= max_words:
                continue
            seen.add(text)
            candidates.append((fuzz.token_set_ratio(text, example.target), text, other.source))
    candidates.sort(key=lambda c: -c[0])
    shortlisted = candidates[: max(shortlist, k)]
    rng.shuffle(shortlisted)
    chosen: list[str] = []
    used_sources: set[str] = set()
    for _, text, donor_source in shortlisted + candidates[max(shortlist, k) :]:
        if len(chosen) == k:
            break
        # one sentence per donor source, and no two near-duplicates (datasets hold edited variants of a summary)
        if donor_source in used_sources or any(fuzz.token_sort_ratio(text, c) >= 60 for c in chosen):
            continue
        if locate(text, example.source, min_fuzzy=80) is not None:
            continue
        if any(
            fuzz.token_sort_ratio(text, src, processor=default_process) >= 75
            or (len(src.split()) >= 5 and fuzz.token_set_ratio(text, src, processor=default_process) >= 90)
            for src in source_sentences
        ):
            continue
        chosen.append(text)
        used_sources.add(donor_source)
    return chosen
