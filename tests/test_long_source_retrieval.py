"""Long sources with the embedding retriever: past ``embed_all_up_to`` sentences the index says so, BM25 picks
candidates and only those are embedded; ``embed_all_up_to=None`` keeps the paper's protocol (every sentence)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from halluscope import retrieval
from halluscope.retrieval import RetrievalConfig, SourceIndex

DIM = 1024  # wide enough that no word of these tests shares a dimension with another


def _bag_of_words(text: str) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().replace(".", " ").split():
        v[int(retrieval.text_key(word)[:8], 16) % DIM] += 1.0
    return v / (np.linalg.norm(v) or 1.0)


@pytest.fixture
def encoded(monkeypatch):
    """A stand-in for MiniLM (hashed bag of words: cosine follows word overlap) that records what it encodes."""
    texts: list[str] = []

    def encode_now(batch, model_name):
        texts.extend(batch)
        return np.stack([_bag_of_words(t) for t in batch])

    monkeypatch.setattr(retrieval.embeddings, "_encode_now", encode_now)
    monkeypatch.setattr(retrieval.config, "embeddings_available", lambda: True)
    monkeypatch.setattr(retrieval.embeddings, "default_embedding_cache", lambda: None)
    retrieval.clear_caches()
    yield texts
    retrieval.clear_caches()


def _source(n: int) -> str:
    # no sentence ends in a number: pysbd would read "number 40. Ship 41" as a list item "40." opening the next one
    towns = ["Arles", "Brest", "Caen", "Dijon", "Evian", "Foix", "Gap", "Hyeres", "Istres", "Jouy"]
    return " ".join(
        f"Ship {i} sailed from {towns[i % 10]} carrying {i * 7} crates of cargo number {i} today." for i in range(n)
    )


def test_a_long_source_embeds_only_bm25_candidates_and_says_so(encoded, caplog) -> None:
    config = RetrievalConfig(retriever="embedding", top_k=2, window=0, embed_all_up_to=50, candidates=10)
    with caplog.at_level(logging.WARNING, logger="halluscope.retrieval"):
        index = SourceIndex.build(_source(300), config)
    assert len(index) == 300 and index.embeds_candidates
    assert encoded == []  # nothing embedded up front
    assert any(
        "long source: 300 sentences" in r.message and "embed_all_up_to=null" in r.message for r in caplog.records
    )
    queries = ["Ship 123 sailed carrying 861 crates", "cargo number 41 from Brest"]
    found = index.retrieve_many(queries)
    assert found[0][0].sentence_indices == (123,) and found[1][0].sentence_indices == (41,)
    sentences_encoded = [t for t in encoded if t not in queries]
    assert 0 < len(sentences_encoded) <= 2 * 10  # the candidates of two queries, not 300 sentences
    assert index.density(queries[0]) is None  # Eq. 3 needs every sentence embedded
    assert "BM25's top 10 sentences per claim" in index.describe()["embedded"]


def test_candidates_are_embedded_once_across_queries_and_views(encoded) -> None:
    config = RetrievalConfig(retriever="embedding", top_k=1, window=0, embed_all_up_to=10, candidates=5)
    index = SourceIndex.build(_source(100), config)
    index.retrieve("Ship 7 sailed from Hyeres")
    first = len(encoded)
    view = index.with_config(config.model_copy(update={"top_k": 3}))
    view.retrieve("Ship 7 sailed from Hyeres")
    assert len(encoded) == first  # same candidates and query: nothing encoded again


def test_embed_all_up_to_none_is_the_papers_protocol(encoded) -> None:
    config = RetrievalConfig(retriever="embedding", top_k=2, window=0, embed_all_up_to=None)
    index = SourceIndex.build(_source(300), config)
    assert not index.embeds_candidates and len(encoded) == 300  # every sentence, up front
    assert index.density("Ship 5 sailed") is not None
    assert index.retrieve("Ship 123 sailed carrying 861 crates")[0].sentence_indices == (123,)


def test_a_short_source_is_embedded_in_full_as_before(encoded) -> None:
    index = SourceIndex.build(_source(40), RetrievalConfig(retriever="embedding", embed_all_up_to=50))
    assert not index.embeds_candidates and len(encoded) == 40


def test_the_cache_keeps_the_two_protocols_apart(encoded) -> None:
    cache = retrieval.IndexCache()
    source = _source(60)
    hybrid = cache.get_sync(source, RetrievalConfig(retriever="embedding", embed_all_up_to=10))
    full = cache.get_sync(source, RetrievalConfig(retriever="embedding", embed_all_up_to=None))
    assert hybrid.embeds_candidates and not full.embeds_candidates and cache.builds == 2


def test_the_method_option_reaches_the_index(encoded) -> None:
    from halluscope.methods import get_method
    from halluscope.options import OptionsError

    assert get_method("dcr", embed_all_up_to=None).opts.embed_all_up_to is None
    assert get_method("dcr").opts.embed_all_up_to == 5_000
    with pytest.raises(OptionsError):
        get_method("dcr", embed_all_up_to=-1)


def test_splitting_reports_progress_covering_the_whole_text() -> None:
    from halluscope.text import split_sentences
    from halluscope.text.sentences import _blocks

    text = ("A sentence about ships and cargo. " * 400 + "\n\n") * 3
    done: list[int] = []
    with_progress = split_sentences(text, progress=done.append)
    assert with_progress == split_sentences(text)  # the same sentences
    assert len(done) > 3 and sum(done) == sum(end - start for start, end in _blocks(text))  # every block, once


def test_a_long_source_announces_its_splitting(monkeypatch, caplog) -> None:
    monkeypatch.setattr(retrieval.index, "SPLIT_PROGRESS_CHARS", 1_000)
    with caplog.at_level(logging.WARNING, logger="halluscope.retrieval"):
        SourceIndex.build(_source(100), RetrievalConfig(retriever="bm25"))
    assert any("splitting a source of" in r.message for r in caplog.records)


def test_on_a_terminal_the_splitting_shows_a_progress_bar(monkeypatch, capsys) -> None:
    pytest.importorskip("tqdm", reason="tqdm comes with the embeddings extra")
    monkeypatch.setattr(retrieval.index, "SPLIT_PROGRESS_CHARS", 1_000)
    monkeypatch.setattr(retrieval.index, "_show_progress", lambda count: True)  # as on a terminal
    SourceIndex.build(_source(200), RetrievalConfig(retriever="bm25"))
    err = capsys.readouterr().err
    assert "splitting sentences" in err and "100%" in err  # tqdm's bar, run to the end
