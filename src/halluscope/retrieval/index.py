"""A source's sentences indexed once (:class:`SourceIndex`) and the snippets retrieved from it (long-document
stress-test paper §3.2, Eq. 1): the top-K sentences for a query, each widened to 2w+1 sentences."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from halluscope.records import Span
from halluscope.retrieval.bm25 import _bm25_index, _bm25_tokens
from halluscope.retrieval.config import RetrievalConfig, resolve_retriever
from halluscope.retrieval.embeddings import _show_progress, encode
from halluscope.text import Sentence, split_sentences

log = logging.getLogger("halluscope.retrieval")

SPLIT_PROGRESS_CHARS = 500_000  # sources from this long announce their sentence splitting (and show a bar)


def _split_with_progress(source: str) -> list[Sentence]:
    """:func:`split_sentences`, announced for a long source, with a progress bar and the time left on a
    terminal (splitting a 1,000,000-word source is most of its minute of indexing)."""
    if len(source) < SPLIT_PROGRESS_CHARS:
        return split_sentences(source)
    log.warning("splitting a source of %d characters into sentences", len(source))
    bar = None
    if _show_progress(len(source)):
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(source), desc="splitting sentences", unit="char", unit_scale=True)
        except ImportError:  # tqdm comes with the embeddings extra; without it, the announcement only
            bar = None
    try:
        return split_sentences(source, progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()


@dataclass(frozen=True)
class Snippet:
    """A contiguous run of source sentences. ``span.of(source) == text``; ``score`` is the best retrieval
    score of the sentences it was built around (cosine in [-1, 1] for embeddings, raw BM25 otherwise);
    ``hits`` are those retrieved sentences, best first (one, unless windows were merged)."""

    text: str
    span: Span
    sentence_indices: tuple[int, ...]
    score: float
    hits: tuple[int, ...] = ()

    def to_dict(self, text: bool = False) -> dict[str, Any]:
        """For a Report: ``{"span": {"start", "end"}, "sentences": [...], "hits": [...], "score": s}``, plus
        ``"text"`` when asked (the span already locates it in the source)."""
        out: dict[str, Any] = {
            "span": {"start": self.span.start, "end": self.span.end},
            "sentences": list(self.sentence_indices),
            "hits": list(self.hits),
            "score": round(float(self.score), 6),
        }
        if text:
            out["text"] = self.text
        return out


class _QueryVectors:
    """A bounded, thread-safe map query text -> embedding, shared by the views of one index."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, query: str) -> np.ndarray | None:
        with self._lock:
            vector = self._items.get(query)
            if vector is not None:
                self._items.move_to_end(query)
            return vector

    def missing(self, queries: Iterable[str]) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(q for q in queries if q not in self._items))

    def put(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            for query, vector in items:
                self._items[query] = vector
                self._items.move_to_end(query)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class SourceIndex:
    """Sentences of one source with their embeddings (or a BM25 index), built once and reused. Retrieval
    settings (K, w, merging) come from ``config`` or per call; :meth:`with_config` gives a view with other
    settings over the same sentences and embeddings."""

    def __init__(
        self,
        source: str,
        sentences: list[Sentence],
        config: RetrievalConfig,
        retriever: Literal["embedding", "bm25"],
        embeddings: np.ndarray | None,
        bm25: Any,
        query_vectors: _QueryVectors | None = None,
    ):
        self.source = source
        self.sentences = sentences
        self.config = config
        self.retriever = retriever
        self._embeddings = embeddings
        self._bm25 = bm25
        self._query_vectors = query_vectors or _QueryVectors()
        # past ``embed_all_up_to``: BM25 picks candidates, whose vectors are encoded on demand and kept here
        self.embeds_candidates = retriever == "embedding" and embeddings is None and bm25 is not None
        self._sentence_vectors: dict[int, np.ndarray] = {}
        self._vectors_lock = threading.Lock()

    @classmethod
    def build(cls, source: str, config: RetrievalConfig | None = None) -> SourceIndex:
        config = config or RetrievalConfig()
        retriever = resolve_retriever(config.retriever)
        sentences = _split_with_progress(source)
        embeddings = bm25 = None
        limit = config.embed_all_up_to
        if retriever == "embedding" and (limit is None or len(sentences) <= limit):
            embeddings = encode([s.text for s in sentences], config.embedding_model)
        elif sentences:
            if retriever == "embedding":
                log.warning(
                    "long source: %d sentences, more than embed_all_up_to=%d. BM25 picks %d candidate sentences "
                    "per claim and only those are embedded (long-document stress-test paper embeds every sentence: "
                    "-o embed_all_up_to=null restores that, with a progress bar)",
                    len(sentences),
                    limit,
                    config.candidates,
                )
            bm25 = _bm25_index([s.text for s in sentences])
        return cls(source, sentences, config, retriever, embeddings, bm25)

    @classmethod
    async def abuild(cls, source: str, config: RetrievalConfig | None = None) -> SourceIndex:
        """:meth:`build` in a worker thread, so embedding a long source does not block the event loop."""
        return await asyncio.to_thread(cls.build, source, config)

    def with_config(self, config: RetrievalConfig) -> SourceIndex:
        """This index with other retrieval settings (same sentences, embeddings and query vectors); the
        retriever and embedding model must be the ones it was built with."""
        if config == self.config:
            return self
        if resolve_retriever(config.retriever) != self.retriever or (
            self.retriever == "embedding"
            and (
                config.embedding_model != self.config.embedding_model
                or config.embed_all_up_to != self.config.embed_all_up_to
            )
        ):
            raise ValueError("with_config cannot change the retriever or the embedding model; build another index")
        view = SourceIndex(
            self.source, self.sentences, config, self.retriever, self._embeddings, self._bm25, self._query_vectors
        )
        view._sentence_vectors, view._vectors_lock = self._sentence_vectors, self._vectors_lock  # shared
        return view

    def __len__(self) -> int:
        return len(self.sentences)

    def describe(self) -> dict[str, Any]:
        """What was used, for ``Report.details``."""
        out: dict[str, Any] = {
            "retriever": self.retriever,
            "top_k": self.config.top_k,
            "window": self.config.window,
            "merge_windows": self.config.merge_windows,
            "source_sentences": len(self.sentences),
        }
        if self.retriever == "embedding":
            out["embedding_model"] = self.config.embedding_model
        if self.embeds_candidates:
            out["embedded"] = (
                f"BM25's top {self.config.candidates} sentences per claim (the source has more than "
                f"{self.config.embed_all_up_to} sentences; embed_all_up_to=null embeds them all)"
            )
        return out

    # -- scoring -------------------------------------------------------------------------------------------
    def embed_queries(self, queries: Sequence[str]) -> None:
        """Embed many queries in one batch (faster than one at a time); no-op under BM25."""
        if self.retriever != "embedding":
            return
        todo = self._query_vectors.missing(queries)
        if todo:
            self._query_vectors.put(zip(todo, encode(todo, self.config.embedding_model)))

    def _query_vector(self, query: str) -> np.ndarray:
        vector = self._query_vectors.get(query)
        if vector is None:
            vector = encode([query], self.config.embedding_model)[0]
            self._query_vectors.put([(query, vector)])
        return vector

    def _bm25_scores(self, query: str) -> np.ndarray:
        tokens = _bm25_tokens([query])[0]
        if not tokens:
            return np.zeros(len(self.sentences), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)

    def _candidates(self, query: str) -> np.ndarray:
        """Past ``embed_all_up_to``: the sentences BM25 ranks highest for ``query`` (at least ``top_k``)."""
        count = min(len(self.sentences), max(self.config.candidates, self.config.top_k))
        scores = self._bm25_scores(query)
        top = np.argpartition(-scores, count - 1)[:count] if count < len(scores) else np.arange(len(scores))
        return np.sort(top)

    def _embed_sentences(self, indices: Iterable[int]) -> None:
        with self._vectors_lock:
            todo = sorted({int(i) for i in indices} - self._sentence_vectors.keys())
        if todo:
            vectors = encode([self.sentences[i].text for i in todo], self.config.embedding_model)
            with self._vectors_lock:
                self._sentence_vectors.update(zip(todo, vectors))

    def sentence_scores(self, query: str) -> np.ndarray:
        """Similarity of ``query`` to every source sentence (cosine, or BM25 score). Past ``embed_all_up_to``
        only BM25's candidates get a cosine; the other sentences score -inf (never retrieved)."""
        if not self.sentences:
            return np.zeros(0, dtype=np.float32)
        if self.embeds_candidates:
            candidates = self._candidates(query)
            self._embed_sentences(candidates)
            with self._vectors_lock:
                matrix = np.stack([self._sentence_vectors[int(i)] for i in candidates])
            scores = np.full(len(self.sentences), -np.inf, dtype=np.float32)
            scores[candidates] = matrix @ self._query_vector(query)
            return scores
        if self.retriever == "embedding":
            assert self._embeddings is not None
            return self._embeddings @ self._query_vector(query)
        tokens = _bm25_tokens([query])[0]
        if not tokens:
            return np.zeros(len(self.sentences), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)

    def density(self, query: str) -> float | None:
        """Mean cosine similarity of ``query`` to all source sentences (long-document stress-test paper Eq. 3); None
        under BM25 and past ``embed_all_up_to`` (not every sentence is embedded)."""
        if self.retriever != "embedding" or self.embeds_candidates or not self.sentences:
            return None
        return float(np.mean(self.sentence_scores(query)))

    # -- retrieval -----------------------------------------------------------------------------------------
    def retrieve(
        self, query: str, top_k: int | None = None, window: int | None = None, merge_windows: bool | None = None
    ) -> list[Snippet]:
        """The top-``top_k`` sentences for ``query``, each widened by ``window`` sentences per side into its
        own snippet (long-document stress-test paper Eq. 1), best first; with ``merge_windows`` windows sharing a
        sentence merge. Arguments left None come from the index's config."""
        k = self.config.top_k if top_k is None else top_k
        w = self.config.window if window is None else window
        merge = self.config.merge_windows if merge_windows is None else merge_windows
        if k < 1 or w < 0:
            raise ValueError(f"top_k must be >= 1 and window >= 0 (got {k}, {w})")
        scores = self.sentence_scores(query)
        if scores.size == 0:
            return []
        last_sentence = len(self.sentences) - 1
        order = [int(i) for i in np.argsort(-scores, kind="stable")[:k]]
        windows = [(max(0, i - w), min(last_sentence, i + w), float(scores[i])) for i in order]
        if not merge:
            return [self.snippet(first, last, score, hits=(i,)) for i, (first, last, score) in zip(order, windows)]
        return [
            self.snippet(first, last, score, hits=tuple(i for i in order if first <= i <= last))
            for first, last, score in _merge_windows(windows)
        ]

    def retrieve_many(
        self,
        queries: Sequence[str],
        top_k: int | None = None,
        window: int | None = None,
        merge_windows: bool | None = None,
    ) -> list[list[Snippet]]:
        """:meth:`retrieve` for each query; the queries (and, past ``embed_all_up_to``, every query's BM25
        candidates) are embedded in one batch first."""
        self.embed_queries(queries)
        if self.embeds_candidates:
            self._embed_sentences(i for q in queries for i in self._candidates(q).tolist())
        return [self.retrieve(q, top_k, window, merge_windows) for q in queries]

    def snippet(self, first: int, last: int, score: float = 0.0, hits: tuple[int, ...] = ()) -> Snippet:
        """The source text from sentence ``first`` to sentence ``last`` (inclusive)."""
        span = Span(start=self.sentences[first].span.start, end=self.sentences[last].span.end)
        return Snippet(span.of(self.source), span, tuple(range(first, last + 1)), score, hits)

    def sentences_overlapping(self, span: Span) -> list[int]:
        return [s.index for s in self.sentences if s.span.overlaps(span)]

    def context_around(self, span: Span, sentences: int = 1) -> Snippet:
        """``span`` widened to whole sentences plus ``sentences`` more on each side (clipped)."""
        hit = self.sentences_overlapping(span)
        if not hit:
            return Snippet(span.of(self.source), span, (), 0.0)
        first = max(0, hit[0] - sentences)
        last = min(len(self.sentences) - 1, hit[-1] + sentences)
        return self.snippet(first, last)


def _merge_windows(windows: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """Merge windows that share a sentence; a merged window keeps the best score. Best first."""
    merged: list[list] = []
    for first, last, score in sorted(windows):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
            merged[-1][2] = max(merged[-1][2], score)
        else:
            merged.append([first, last, score])
    return [tuple(m) for m in sorted(merged, key=lambda m: (-m[2], m[0]))]  # type: ignore[misc]
