"""Thin adapters that check an answer against the documents an LLM framework gave it (see docs/integrations.md).

- :mod:`halluscope.integrations.langchain`: a callback handler (``pip install 'halluscope[langchain]'``);
- :mod:`halluscope.integrations.llamaindex`: an evaluator (``pip install 'halluscope[llamaindex]'``).

Each module imports its framework only when imported itself; ``import halluscope`` never does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

DOCUMENT_SEPARATOR = "\n\n"


def join_documents(texts: Sequence[str]) -> str:
    """The source a framework's documents make: their texts in the order given, blank-line separated."""
    return DOCUMENT_SEPARATOR.join(t for t in texts if t and t.strip())


def document_chunks(texts: Sequence[str]) -> list[str]:
    """The documents' texts as a list of chunks (blank ones dropped), checked as one source whose evidence names
    the chunk it comes from (``Evidence.chunk``: the index in this list; :mod:`halluscope.contexts`)."""
    return [t for t in texts if t and t.strip()]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, also when this thread already runs an event loop
    (a notebook, an async framework calling a sync callback): then it runs on a fresh loop in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="halluscope-check")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
