"""Requests- and tokens-per-minute limits for remote backends (``Config.requests_per_minute`` /
``Config.tokens_per_minute``, env ``HALLUSCOPE_REQUESTS_PER_MINUTE`` / ``HALLUSCOPE_TOKENS_PER_MINUTE``).

Two token buckets, each holding at most one minute's allowance and refilled continuously at
``limit / 60`` per second (the same model providers use to enforce their limits). Before a call the
client reserves one request and an estimate of its tokens (prompt tokens + ``max_tokens``, the quantity
OpenAI counts against a tokens-per-minute limit); once the reply arrives the reservation is settled
against the tokens the provider reports, so an over-estimate is given back and an under-estimate delays
later calls. A call waits until both buckets can pay for it: items are delayed, never skipped.

The clock and the sleep are injectable, so tests prove the schedule with a fake clock instead of waiting.
One limiter may be shared by several event loops (threads): its state is guarded by a thread lock, and
waiting happens outside the lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ):
        for name, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 (or unset for no limit), got {value}")
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._requests = float(requests_per_minute or 0)  # both buckets start full
        self._tokens = float(tokens_per_minute or 0)
        self._last = clock()

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._last = now
        if self.requests_per_minute:
            self._requests = min(self.requests_per_minute, self._requests + elapsed * self.requests_per_minute / 60)
        if self.tokens_per_minute:
            self._tokens = min(self.tokens_per_minute, self._tokens + elapsed * self.tokens_per_minute / 60)

    def _wait_s(self, tokens: int) -> float:
        """Seconds until both buckets can pay for one request of ``tokens`` (0 = now)."""
        wait = 0.0
        if self.requests_per_minute and self._requests < 1:
            wait = max(wait, (1 - self._requests) * 60 / self.requests_per_minute)
        if self.tokens_per_minute and self._tokens < tokens:
            wait = max(wait, (tokens - self._tokens) * 60 / self.tokens_per_minute)
        return wait

    async def acquire(self, tokens: int = 0) -> int:
        """Wait until one request of about ``tokens`` tokens may be sent, and take it from the buckets.
        Returns the tokens reserved (capped at one minute's allowance, so one huge request cannot wait
        forever); pass it to :meth:`settle` when the provider's count is known."""
        if self.tokens_per_minute:
            tokens = int(min(max(0, tokens), self.tokens_per_minute))
        else:
            tokens = 0
        while True:
            with self._lock:
                self._refill(self._clock())
                wait = self._wait_s(tokens)
                if wait <= 0:
                    if self.requests_per_minute:
                        self._requests -= 1
                    self._tokens -= tokens
                    return tokens
            await self._sleep(wait)

    def settle(self, reserved: int, used: int) -> None:
        """Correct a reservation with the tokens the call actually used (ignored when the provider reported
        none: the reservation stands)."""
        if not self.tokens_per_minute or used <= 0:
            return
        with self._lock:
            self._tokens = min(self.tokens_per_minute, self._tokens + reserved - used)
