"""Fuzzy de-duplication of descriptions: the same groups as comparing every pair with token_sort_ratio, the
pairwise work done in rapidfuzz's C blocks, and none of it past the cap (only identical wordings/spans merge)."""

from __future__ import annotations

import random

import pytest
from rapidfuzz import fuzz

from halluscope.records import Span
from halluscope.text import descriptions as descriptions_module
from halluscope.text.descriptions import MAX_FUZZY_DESCRIPTIONS, _normalized, fuzzy_duplicate_groups

_WORDS = "the summary says age location date name number event is not mentioned wrong source claims".split()


def _pairwise(descriptions, threshold, spans=None):
    """The definition: every pair compared (what the implementation replaced)."""
    n = len(descriptions)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    norm = [_normalized(d) for d in descriptions]
    for i in range(n):
        for j in range(i + 1, n):
            same = bool(spans and spans[i] and list(spans[i]) == list(spans[j]))
            if same or fuzz.token_sort_ratio(norm[i], norm[j]) >= threshold:
                parent[find(j)] = find(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


@pytest.mark.parametrize("threshold", [0, 60, 75, 85, 100])
@pytest.mark.parametrize("seed", [0, 1])
def test_same_groups_as_comparing_every_pair(threshold: float, seed: int) -> None:
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 7))) for _ in range(300)]
    spans = [[Span(start=rng.randint(0, 5), end=9)] if rng.random() < 0.2 else [] for _ in texts]
    assert fuzzy_duplicate_groups(texts, threshold, spans) == _pairwise(texts, threshold, spans)


def test_pairwise_work_is_done_in_blocks_and_not_at_all_past_the_cap(monkeypatch) -> None:
    calls: list[tuple[int, int]] = []
    real = descriptions_module.process.cdist

    def counting(queries, choices, **kwargs):
        calls.append((len(queries), len(choices)))
        return real(queries, choices, **kwargs)

    monkeypatch.setattr(descriptions_module.process, "cdist", counting)
    texts = [f"the date {i} is not mentioned" for i in range(600)]
    fuzzy_duplicate_groups(texts)
    assert calls == [(256, 600), (256, 600), (88, 600)]

    calls.clear()
    many = [f"the date {i} is not mentioned" for i in range(MAX_FUZZY_DESCRIPTIONS + 1)]
    many += ["the DATE is not mentioned!", "is not mentioned the date"]
    groups = fuzzy_duplicate_groups(many)
    assert calls == []  # past the cap: no pairwise comparison
    assert [len(many) - 2, len(many) - 1] in groups  # identical wordings (any word order) still merge
    assert len(groups) == MAX_FUZZY_DESCRIPTIONS + 2


def test_factscore_notes_a_capped_fuzzy_deduplication() -> None:
    from halluscope.stages import build_stage

    dedup = build_stage("deduplicator", "fuzzy")
    texts = [f"fact {i} is wrong" for i in range(MAX_FUZZY_DESCRIPTIONS + 5)]
    dedup.fuzzy(texts, [[] for _ in texts])
    assert dedup.note and "not compared pairwise" in dedup.note
    small = build_stage("deduplicator", "fuzzy")
    small.fuzzy(texts[:10], [[] for _ in texts[:10]])
    assert small.note is None
