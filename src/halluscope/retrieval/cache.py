"""The one cache of built indexes: every part of halluscope that indexes a source (the claim pipeline's context
selector, the gate, PROBE's no-LLM evidence finder, the ``embed`` baseline) asks :func:`shared_index`, so checking
many targets against one source (several summaries, perturbations, montage lies) splits and embeds it once."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict

from halluscope.retrieval.config import RetrievalConfig, resolve_retriever
from halluscope.retrieval.embedding_cache import clear_embedding_caches, text_key
from halluscope.retrieval.index import SourceIndex

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
    clear_embedding_caches()
