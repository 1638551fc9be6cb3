"""A prefix-affinity gate: when requests wait for a model, serve next the one that shares the longest prompt
prefix with the last one served.

Why: llama.cpp keeps the KV cache of the last prompt it evaluated and evaluates only what follows the prefix a
new prompt shares with it. Methods check many claims about one source concurrently, and a bench checks several
items concurrently; served first come, first served, the sources interleave (item A's claim, item B's claim,
...) and every call evaluates its source again. Served by affinity, the calls about one source run back to back
and each evaluates only its own claim.

Fairness: a waiting request passed over ``max_skips`` times is served next (oldest first), so no request waits
for ever behind a stream of better-matching ones.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from halluscope.llm.base import Message


def prompt_text(messages: list[Message]) -> str:
    """The messages in the order a chat template lays them out: what a prefix cache compares."""
    return "".join(f"\x00{m.get('role', '')}\x01{m.get('content', '')}" for m in messages)


def shared_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on the slice comparison (C speed) instead of a Python loop per character
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class _Waiter:
    order: int
    prompt: str
    granted: asyncio.Future[None]
    skipped: int = 0


@dataclass
class PrefixAffinityGate:
    """At most ``capacity`` holders at once; a freed slot goes to the waiter whose prompt shares the longest prefix
    with the prompt last admitted (ties: the oldest), or to the oldest waiter passed over ``max_skips`` times."""

    capacity: int = 1
    max_skips: int = 8
    last_prompt: str = ""
    served: list[str] = field(default_factory=list, repr=False)
    """Prompts in the order they were admitted, when ``record`` is on (tests)."""
    record: bool = False
    _active: int = 0
    _waiters: list[_Waiter] = field(default_factory=list, repr=False)
    _orders: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, prompt: str) -> AsyncIterator[None]:
        await self.acquire(prompt)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, prompt: str) -> None:
        if self._active < self.capacity and not self._waiters:
            self._admit(prompt)
            return
        waiter = _Waiter(next(self._orders), prompt, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.granted.done() and not waiter.granted.cancelled():
                self.release()  # the slot was handed over just as the caller gave up: pass it on
            raise

    def release(self) -> None:
        self._active -= 1
        self._dispatch()

    def _admit(self, prompt: str) -> None:
        self._active += 1
        self.last_prompt = prompt
        if self.record:
            self.served.append(prompt)

    def _dispatch(self) -> None:
        self._waiters = [w for w in self._waiters if not w.granted.done()]  # callers cancelled meanwhile
        while self._active < self.capacity and self._waiters:
            chosen = self._choose()
            self._waiters.remove(chosen)
            for other in self._waiters:
                if other.order < chosen.order:
                    other.skipped += 1  # an older request was passed over
            self._admit(chosen.prompt)
            chosen.granted.set_result(None)

    def _choose(self) -> _Waiter:
        starved = [w for w in self._waiters if w.skipped >= self.max_skips]
        if starved:
            return min(starved, key=lambda w: w.order)
        return max(self._waiters, key=lambda w: (shared_prefix(w.prompt, self.last_prompt), -w.order))
