"""Worker threads, each running its own event loop, where the checks run.

Methods are async but do CPU work between LLM calls (sentence splitting, span location, ROUGE, rendering
the HTML report): run on the loop that serves HTTP, a 100k-character target blocked ``/health`` for 25 s.
Here a check blocks at most its own worker loop; the HTTP loop keeps answering probes, metrics and
refusals. The LLM client, the response cache and the method instances are shared by all workers (they are
made for several loops: per-loop semaphores and connection pools, a locked SQLite cache).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerPool:
    def __init__(self, n: int, name: str = "halluscope-worker"):
        self.n = max(1, n)
        self.name = name
        self.loops: list[asyncio.AbstractEventLoop] = []
        self._threads: list[threading.Thread] = []
        self._busy: list[int] = []
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return bool(self.loops)

    def start(self) -> None:
        if self.loops:
            return
        for i in range(self.n):
            loop = asyncio.new_event_loop()
            ready = threading.Event()
            thread = threading.Thread(target=self._run, args=(loop, ready), name=f"{self.name}-{i}", daemon=True)
            thread.start()
            ready.wait()
            self.loops.append(loop)
            self._threads.append(thread)
            self._busy.append(0)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    def submit(self, coro: Coroutine[Any, Any, T], worker: int | None = None) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the least busy worker loop (or on ``worker``); cancelling the future cancels it."""
        if not self.loops:
            coro.close()
            raise RuntimeError("the worker pool is not running")
        with self._lock:
            i = min(range(self.n), key=self._busy.__getitem__) if worker is None else worker % self.n
            self._busy[i] += 1
        future = asyncio.run_coroutine_threadsafe(coro, self.loops[i])
        future.add_done_callback(lambda _f, i=i: self._done(i))  # type: ignore[misc]
        return future

    def _done(self, i: int) -> None:
        with self._lock:
            if i < len(self._busy):  # not after stop()
                self._busy[i] -= 1

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on a worker loop, from any event loop; cancellation reaches it."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel what still runs on the workers and end their threads."""
        loops, threads = self.loops, self._threads
        self.loops, self._threads, self._busy = [], [], []
        for loop in loops:
            try:
                asyncio.run_coroutine_threadsafe(_cancel_all_and_stop(), loop)
            except RuntimeError:
                pass
        for thread in threads:
            if timeout_s > 0 and thread is not threading.current_thread():
                thread.join(timeout_s)


async def _cancel_all_and_stop() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    asyncio.get_running_loop().stop()
