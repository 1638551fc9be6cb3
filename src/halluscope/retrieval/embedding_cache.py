"""Embeddings computed once per text: an :class:`EmbeddingCache` keyed by (model name, sha256 of the text) -- a
bounded in-memory LRU in front of a SQLite file next to the LLM response cache (``embeddings.sqlite`` in the
folder of ``Config().cache_path``; another file with ``HALLUSCOPE_EMBEDDING_CACHE_PATH``;
``HALLUSCOPE_EMBEDDING_CACHE=false`` turns both off)."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from halluscope.retrieval.config import EMBEDDING_CACHE_FILE
from halluscope.sqlite_file import SqliteTable

log = logging.getLogger("halluscope.retrieval")


def text_key(text: str) -> str:
    """sha256 of the text (lone surrogates kept, not an error): the embedding cache key with the model name."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _DiskStore(SqliteTable):
    """float32 vectors in SQLite, keyed by (model, text sha256). One connection guarded by a lock; WAL, so
    several processes can share the file."""

    _CHUNK = 500  # keys per SELECT (SQLite's bound-parameter limit is 999 on old builds)
    table = "embeddings"

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(
            str(path),
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, key TEXT NOT NULL, "
            "dim INTEGER NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, key)) "
            "WITHOUT ROWID",
        )

    def get_many(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), self._CHUNK):
                chunk = list(keys[i : i + self._CHUNK])
                rows = self._conn.execute(
                    (
                        "SELECT key, dim, vector FROM embeddings WHERE model = "
                        f"? AND key IN ({','.join('?' * len(chunk))})"
                    ),
                    [model, *chunk],
                ).fetchall()
                for key, dim, blob in rows:
                    if isinstance(blob, bytes) and len(blob) == 4 * dim:  # anything else: a miss, rewritten
                        found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, model: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        rows = [(model, key, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes()) for key, v in items]
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, key, dim, vector) VALUES (?, ?, ?, ?)", rows
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise


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


def clear_embedding_caches() -> None:
    """Forget every in-memory embedding of the process's caches and close their files (the files stay)."""
    with _CACHES_LOCK:
        caches = list(_CACHES.values())
        _CACHES.clear()
    for cache in caches:
        cache.clear_memory()
        cache.close()
