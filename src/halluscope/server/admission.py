"""Bounded work: a fixed number of slots and a bounded FIFO queue in front of them.

A request that finds every slot taken waits in the queue; one that finds the queue full is refused at once
(:class:`QueueFull` -> 429), and one that waits longer than the queue timeout gives up (:class:`QueueTimeout`
-> 503). Both carry Retry-After. Works from any event loop (the test client runs one per request).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class QueueFull(Exception):
    pass


class QueueTimeout(Exception):
    pass


class Admission:
    def __init__(self, slots: int, queue: int, timeout_s: float):
        if slots < 1 or queue < 0:
            raise ValueError("admission needs at least one slot and a non-negative queue")
        self.slots, self.queue, self.timeout_s = slots, queue, timeout_s
        self.in_flight = 0
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._lock = threading.Lock()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.in_flight < self.slots and not self._waiters:
                self.in_flight += 1
                return
            if len(self._waiters) >= self.queue:
                raise QueueFull
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await asyncio.wait_for(waiter, self.timeout_s)
        except BaseException as exc:
            with self._lock:
                try:
                    self._waiters.remove((loop, waiter))  # still queued: no slot was handed over
                    owned = False
                except ValueError:  # release() handed this waiter a slot
                    owned = waiter.done() and not waiter.cancelled()
            if owned:  # handed over and woken just as it gave up: pass the slot on
                self.release()
            # a slot handed over but not woken yet is passed on by _wake (the waiter is cancelled)
            if isinstance(exc, asyncio.TimeoutError):
                raise QueueTimeout from None
            raise

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                loop, waiter = self._waiters.popleft()  # the slot goes to the longest waiting request
            else:
                self.in_flight -= 1
                return
        try:
            loop.call_soon_threadsafe(self._wake, waiter)
        except RuntimeError:  # that loop is closed: its request is gone
            self.release()

    def _wake(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # gave up in the meantime
            self.release()
        else:
            waiter.set_result(None)
