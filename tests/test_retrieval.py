"""The shared retrieval stage: K windows of 2w+1 sentences (merging only as an option), edges, BM25 fallback,
Eq. 3 density, context fit, the process-wide index cache and the embedding cache."""

from __future__ import annotations

import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from halluscope import retrieval
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.records import Span
from halluscope.retrieval import RetrievalConfig, SourceIndex, fits_in_context, resolve_retriever
from halluscope.retrieval.index import _merge_windows
from halluscope.text import split_sentences

SOURCE = (
    "Alice founded the bakery in 1990. "  # 0
    "The bakery sold rye bread. "  # 1
    "Bob joined as a baker in 1995. "  # 2
    "The weather was rainy that spring. "  # 3
    "Carol painted the shop blue. "  # 4
    "In 2001 the bakery moved to Paris. "  # 5
    "Customers loved the croissants."  # 6
)

needs_embeddings = pytest.mark.skipif(
    not retrieval.embeddings_available(), reason="embeddings extra not installed: pip install -e '.[embeddings]'"
)


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
    monkeypatch.setattr(retrieval.config, "embeddings_available", lambda: False)
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


# -- the paper's K snippets of 2w+1 sentences ------------------------------------------------------------------

TWENTY = " ".join(f"Sentence {i} is about the {'zebra' if i in (8, 9, 10) else f'topic{i}'} here." for i in range(20))


def test_k_windows_are_separate_overlapping_snippets_by_default():
    index = bm25_index(TWENTY, top_k=3, window=1)
    snippets = index.retrieve("zebra")
    assert len(snippets) == 3  # K snippets, no merging
    assert sorted(s.hits for s in snippets) == [(8,), (9,), (10,)]
    for snip in snippets:
        [hit] = snip.hits
        assert snip.sentence_indices == (hit - 1, hit, hit + 1)  # 2w+1 sentences around its own hit
        assert snip.span.of(TWENTY) == snip.text
    assert [s.score for s in snippets] == sorted((s.score for s in snippets), reverse=True)  # best first


def test_merge_windows_is_an_explicit_option():
    merged = bm25_index(TWENTY, top_k=3, window=1, merge_windows=True).retrieve("zebra")
    assert len(merged) == 1
    [snip] = merged
    assert snip.sentence_indices == (7, 8, 9, 10, 11) and sorted(snip.hits) == [8, 9, 10]
    assert snip.text == snip.span.of(TWENTY)
    plain = bm25_index(TWENTY, top_k=3, window=1)
    assert len(plain.retrieve("zebra", merge_windows=True)) == 1  # per-call override
    assert snip.score == max(s.score for s in plain.retrieve("zebra"))
    assert plain.describe()["merge_windows"] is False


def test_unmerged_windows_clip_at_edges_each_on_its_own():
    index = bm25_index(top_k=2, window=2)
    snippets = index.retrieve("Alice founded the bakery in 1990 and sold rye bread")
    assert {s.hits[0] for s in snippets} == {0, 1}
    by_hit = {s.hits[0]: s.sentence_indices for s in snippets}
    assert by_hit == {0: (0, 1, 2), 1: (0, 1, 2, 3)}


def test_snippet_to_dict_describes_it_for_a_report():
    [snip] = bm25_index(top_k=1, window=1).retrieve("Paris moved 2001")
    d = snip.to_dict()
    assert d == {
        "span": {"start": snip.span.start, "end": snip.span.end},
        "sentences": [4, 5, 6],
        "hits": [5],
        "score": round(snip.score, 6),
    }
    assert snip.to_dict(text=True)["text"] == SOURCE[d["span"]["start"] : d["span"]["end"]]
    json.dumps(d)  # plain JSON


def test_retriever_option_is_embedding_bm25_or_auto():
    for name in ("embedding", "bm25", "auto"):
        assert RetrievalConfig(retriever=name).retriever == name
    with pytest.raises(ValueError):
        RetrievalConfig(retriever="tfidf")  # type: ignore[arg-type]


def test_with_config_shares_the_index():
    index = bm25_index(TWENTY, top_k=1, window=0)
    view = index.with_config(RetrievalConfig(retriever="bm25", top_k=3, window=2))
    assert view.sentences is index.sentences and view.config.top_k == 3
    assert len(view.retrieve("zebra")) == 3 and len(index.retrieve("zebra")) == 1
    assert index.with_config(index.config) is index
    with pytest.raises(ValueError, match="cannot change the retriever"):
        index.with_config(RetrievalConfig(retriever="embedding"))


# -- the process-wide index cache ------------------------------------------------------------------------------


def test_index_cache_builds_each_source_once_across_settings_and_threads(monkeypatch):
    cache = retrieval.IndexCache(size=2)
    built: list[str] = []
    real_build = SourceIndex.build.__func__  # type: ignore[attr-defined]
    asking: set[int] = set()
    all_asking = threading.Event()
    lock = threading.Lock()

    def ask(config):
        with lock:
            asking.add(threading.get_ident())
            if len(asking) == 4:
                all_asking.set()
        return cache.get_sync(TWENTY, config)

    def held_build(cls, source, config=None):
        built.append(source)
        # the build goes on only once all 4 threads asked for the same source (not after a guessed delay)
        assert all_asking.wait(60), "the other threads never asked"
        return real_build(cls, source, config)

    monkeypatch.setattr(SourceIndex, "build", classmethod(held_build))
    configs = [RetrievalConfig(retriever="bm25", top_k=k, window=w) for k in (1, 3) for w in (0, 2)]
    with ThreadPoolExecutor(4) as pool:
        indexes = list(pool.map(ask, configs * 2))
    assert built == [TWENTY] and cache.builds == 1
    assert [i.config for i in indexes] == configs * 2  # each caller gets its own settings
    assert len({id(i.sentences) for i in indexes}) == 1
    cache.get_sync(SOURCE, RetrievalConfig(retriever="bm25"))
    cache.get_sync("A third source. Two sentences.", RetrievalConfig(retriever="bm25"))
    assert len(cache) == 2  # bounded: the least recently used went
    cache.get_sync(TWENTY, RetrievalConfig(retriever="bm25"))
    assert built.count(TWENTY) == 2


async def test_shared_index_is_process_wide():
    retrieval.clear_caches()
    a = await retrieval.shared_index(TWENTY, RetrievalConfig(retriever="bm25", top_k=1))
    b = retrieval.shared_index_sync(TWENTY, RetrievalConfig(retriever="bm25", top_k=2))
    assert a.sentences is b.sentences and retrieval.shared_index_cache().builds >= 1
    stage = retrieval.Retrieve(RetrievalConfig(retriever="bm25", top_k=2, window=0))
    [[first, second]] = await stage(TWENTY, ["zebra"])
    assert first.hits != second.hits
    retrieval.clear_caches()
    assert len(retrieval.shared_index_cache()) == 0


# -- the embedding cache ---------------------------------------------------------------------------------------

DIM = 8


@pytest.fixture
def fake_encoder(monkeypatch):
    """A deterministic stand-in for MiniLM that records every batch it is asked to encode."""
    batches: list[list[str]] = []

    def encode_now(texts, model_name):
        batches.append(list(texts))
        rows = []
        for text in texts:
            rng = np.random.default_rng(int(retrieval.text_key(model_name + text)[:12], 16))
            v = rng.standard_normal(DIM).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)

    monkeypatch.setattr(retrieval.embeddings, "_encode_now", encode_now)
    monkeypatch.setattr(retrieval.config, "embeddings_available", lambda: True)
    retrieval.clear_caches()
    yield batches
    retrieval.clear_caches()


def test_encode_only_encodes_misses_in_one_batch(tmp_path, fake_encoder):
    cache = retrieval.EmbeddingCache(tmp_path / "e.sqlite")
    first = retrieval.encode(["a", "b", "a"], "m", cache=cache)
    assert fake_encoder == [["a", "b"]] and first.shape == (3, DIM) and first.dtype == np.float32
    assert np.array_equal(first[0], first[2])
    second = retrieval.encode(["b", "c", "d", "c"], "m", cache=cache)
    assert fake_encoder[1] == ["c", "d"]  # "b" came from the cache
    assert np.array_equal(second[0], first[1])
    retrieval.encode(["a"], "other-model", cache=cache)  # the model is part of the key
    assert fake_encoder[2] == ["a"]
    assert cache.hits_memory == 1 and cache.misses == 7  # per looked-up position


def test_disk_cache_survives_the_process_and_stores_float32(tmp_path, fake_encoder):
    path = tmp_path / "e.sqlite"
    fresh = retrieval.encode(["one", "two"], "m", cache=retrieval.EmbeddingCache(path))
    later = retrieval.EmbeddingCache(path)  # as in a new process: empty memory, same file
    again = retrieval.encode(["two", "one", "three"], "m", cache=later)
    assert fake_encoder == [["one", "two"], ["three"]]
    assert np.array_equal(again[:2], fresh[::-1]) and later.hits_disk == 2
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT model, key, dim, vector FROM embeddings").fetchall()
    assert {(m, k) for m, k, _, _ in rows} == {("m", retrieval.text_key(t)) for t in ("one", "two", "three")}
    assert all(d == DIM and len(v) == 4 * DIM for _, _, d, v in rows)
    later.close()


def test_embedding_cache_location_and_switch(tmp_path, monkeypatch, fake_encoder):
    # default: next to the LLM response cache (conftest points XDG_CACHE_HOME at a private folder)
    assert retrieval.embedding_cache_path() == Config().cache_path.parent / "embeddings.sqlite"
    monkeypatch.setenv("HALLUSCOPE_CACHE_PATH", str(tmp_path / "llm" / "responses.sqlite"))
    assert retrieval.embedding_cache_path() == tmp_path / "llm" / "embeddings.sqlite"
    monkeypatch.setenv("HALLUSCOPE_EMBEDDING_CACHE_PATH", str(tmp_path / "mine.sqlite"))
    retrieval.encode(["x"], "m")
    assert (tmp_path / "mine.sqlite").is_file()
    cache = retrieval.default_embedding_cache()
    assert cache is not None and cache.path == tmp_path / "mine.sqlite"
    monkeypatch.setenv("HALLUSCOPE_EMBEDDING_CACHE", "false")
    assert retrieval.default_embedding_cache() is None
    retrieval.encode(["x"], "m")
    retrieval.encode(["x"], "m")
    assert fake_encoder == [["x"], ["x"], ["x"]]  # turned off: nothing reused


def test_unusable_cache_file_falls_back_to_memory(tmp_path, fake_encoder, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = retrieval.EmbeddingCache(blocker / "sub" / "e.sqlite")
    retrieval.encode(["x", "y"], "m", cache=cache)
    retrieval.encode(["x"], "m", cache=cache)
    assert fake_encoder == [["x", "y"]]  # memory still works
    assert "caching in memory only" in caplog.text
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    retrieval.encode(["z"], "m", cache=retrieval.EmbeddingCache(garbage))
    assert fake_encoder[-1] == ["z"]


def test_memory_cache_is_bounded(fake_encoder):
    cache = retrieval.EmbeddingCache(None, max_items=3)
    retrieval.encode(["a", "b", "c", "d"], "m", cache=cache)
    retrieval.encode(["a"], "m", cache=cache)  # "a" was evicted
    retrieval.encode(["d"], "m", cache=cache)
    assert fake_encoder == [["a", "b", "c", "d"], ["a"]]


def test_one_source_many_targets_encodes_the_source_once(fake_encoder):
    config = RetrievalConfig(retriever="embedding", top_k=2, window=1)
    sentences = len(split_sentences(TWENTY))
    for target in ("zebra facts.", "topic3 facts.", "topic4 and zebra."):
        index = retrieval.shared_index_sync(TWENTY, config)
        index.retrieve_many([target])
    assert [len(b) for b in fake_encoder] == [sentences, 1, 1, 1]
    retrieval.shared_index_cache().clear()  # even a rebuilt index reuses the cached sentence embeddings
    retrieval.shared_index_sync(TWENTY, config)
    assert len(fake_encoder) == 4


@needs_embeddings
def test_cached_minilm_vectors_equal_fresh_ones(tmp_path):
    cache = retrieval.EmbeddingCache(tmp_path / "e.sqlite")
    texts = [s.text for s in split_sentences(SOURCE)]
    first = retrieval.encode(texts, cache=cache)
    from_disk = retrieval.encode(texts, cache=retrieval.EmbeddingCache(tmp_path / "e.sqlite"))
    fresh = retrieval.encode(texts, cache=None)
    assert np.array_equal(first, from_disk)  # float32 bytes round-trip exactly
    assert np.abs(first - fresh).max() < 1e-5 and first.shape == (7, 384)


def test_bm25_over_sentences_without_a_term_scores_zero_instead_of_failing() -> None:
    """``bm25s`` cannot index a corpus whose sentences hold only stopwords or punctuation; the gate on such a
    source used to raise (the service answered 422)."""
    from halluscope.methods import get_method
    from halluscope.retrieval.bm25 import _bm25_index

    assert list(_bm25_index(["a b c.", "d e."]).get_scores(["cat"])) == [0.0, 0.0]
    report = get_method("gate").check("a b c. d e.", "a b")
    assert report.score is not None and len(report.verdicts) == 1
