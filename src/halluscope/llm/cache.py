"""Persistent SQLite response cache keyed by (model, params, messages), and the text hygiene it relies on."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from pathlib import Path

from pydantic import ValidationError

from halluscope.llm.base import Completion, GenerateParams, Message

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every unpaired UTF-16 surrogate replaced by U+FFFD (a valid pair becomes its character).

    A lone surrogate (e.g. ``"\\ud800"`` decoded from a JSON reply) is a valid Python string but cannot be
    encoded as UTF-8, so it would crash SQLite, the HTTP client or a tokenizer later on. Backends apply this
    to every reply and :class:`~halluscope.llm.client.LLM` to every message and reply."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_messages(messages: list[Message]) -> list[Message]:
    """``messages`` with :func:`clean_text` applied to every string value (the same list when nothing changes)."""
    if not any(isinstance(v, str) and _SURROGATE.search(v) for m in messages for v in m.values()):
        return messages
    return [{k: clean_text(v) if isinstance(v, str) else v for k, v in m.items()} for m in messages]


def cache_key(model: str, params: GenerateParams, messages: list[Message]) -> str:
    payload = json.dumps(
        {"model": model, "params": params.model_dump(mode="json"), "messages": messages},
        sort_keys=True,
        ensure_ascii=False,
    )
    # surrogatepass: a key for text with lone surrogates, instead of a UnicodeEncodeError
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


class ResponseCache:
    """Thread-safe; one connection guarded by a lock (SQLite calls are microseconds next to an LLM's)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL never corrupts the file; it only skips an fsync per reply, which would
        # otherwise block the event loop for milliseconds on every cache write.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT, completion TEXT,"
            " created REAL DEFAULT (julianday('now')))"
        )

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._conn.execute("SELECT completion FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return Completion.model_validate_json(row[0])
        except ValidationError:  # written by an incompatible version: a miss, overwritten on put
            return None

    def put(self, key: str, completion: Completion) -> None:
        completion = completion.model_copy(update={"text": clean_text(completion.text)})
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, model, completion) VALUES (?, ?, ?)",
                (key, completion.model, completion.model_dump_json()),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
