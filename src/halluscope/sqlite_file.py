"""One SQLite file shared by threads and processes, the way every halluscope store opens one (the LLM response
cache, the embedding cache, the server's jobs database): one connection guarded by a lock, WAL journal (readers
never block the writer, and several processes can share the file), ``synchronous=NORMAL`` (in WAL mode it never
corrupts the file; it only skips an fsync per write, which would otherwise block the event loop for milliseconds
on every cache write)."""

from __future__ import annotations

import sqlite3
import threading
from typing import ClassVar


def connect_wal(path: str) -> sqlite3.Connection:
    """A connection to ``path`` usable from any thread (callers hold a lock), in autocommit mode, waiting up to
    30 s for another process's write lock, with the WAL journal and ``synchronous=NORMAL``."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


class SqliteTable:
    """A store kept in one table of a SQLite file (:func:`connect_wal`), every use of the connection under
    ``_lock``; ``schema`` creates the table when it is not there."""

    table: ClassVar[str]

    def __init__(self, path: str, schema: str):
        self._lock = threading.Lock()
        self._conn = connect_wal(path)
        self._conn.execute(schema)

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
