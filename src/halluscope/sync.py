"""``run_sync``: run a coroutine to completion from synchronous code, also inside a running event loop.

``asyncio.run`` raises when the calling thread already runs a loop (a Jupyter notebook, an async web
handler calling a sync helper). There the coroutine runs on a fresh loop in a worker thread while the
caller waits, with a copy of the caller's context variables (as ``asyncio.run`` would have seen them).
Everything in halluscope that holds per-loop state (the LLM client's semaphores and single flights, the
HTTP connection pools) keys it by loop, so a worker loop never shares asyncio objects with the caller's.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` when no loop is running in this thread, else the same on a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="halluscope-sync") as pool:
        return pool.submit(context.run, asyncio.run, coro).result()
