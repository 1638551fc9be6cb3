"""``LLM``: wraps a backend with the response cache, bounded concurrency and cost accounting.

Stages only ever call ``await llm.generate(messages, params)``. Every call is also recorded into the
current :class:`CallLog` (a context variable), which is how a Report gets its usage and audit trail
without threading a ledger through every stage.
"""

from __future__ import annotations

import asyncio
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator

from halluscope.llm.base import Completion, GenerateParams, Message, ModelAPI
from halluscope.llm.cache import ResponseCache, cache_key
from halluscope.records import LLMCall, Usage


@dataclass
class CallLog:
    """Collects every LLM exchange made while it is the current log."""

    calls: list[LLMCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def add(self, call: LLMCall) -> None:
        self.calls.append(call)
        self.usage = self.usage + call.usage


_current_log: ContextVar[CallLog | None] = ContextVar("halluscope_call_log", default=None)


@contextmanager
def track_calls() -> Iterator[CallLog]:
    """Record all LLM calls made inside the block (including from tasks it spawns)."""
    log = CallLog()
    token = _current_log.set(log)
    try:
        yield log
    finally:
        _current_log.reset(token)


class LLM:
    def __init__(
        self,
        api: ModelAPI,
        *,
        cache: ResponseCache | None = None,
        max_concurrency: int = 8,
        default_params: GenerateParams | None = None,
    ):
        self.api = api
        self.cache = cache
        limit = api.max_concurrency
        self.max_concurrency = max(1, min(max_concurrency, limit) if limit else max_concurrency)
        self.default_params = default_params or GenerateParams()
        self.usage = Usage()  # lifetime total of this client
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def name(self) -> str:
        return self.api.name

    def params(self, **overrides: object) -> GenerateParams:
        data = self.default_params.model_dump()
        data.update({k: v for k, v in overrides.items() if v is not None})
        return GenerateParams(**data)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    async def generate(self, messages: list[Message], params: GenerateParams | None = None) -> Completion:
        params = params or self.default_params
        cache_id = getattr(self.api, "cache_id", None) or self.api.name
        key = cache_key(cache_id, params, messages) if self.cache is not None else None
        completion: Completion | None = None
        if key is not None:
            hit = self.cache.get(key)  # type: ignore[union-attr]
            if hit is not None:
                completion = hit.model_copy(update={"cached": True, "usage": Usage(cache_hits=1)})
        if completion is None:
            async with self._semaphore():
                completion = await self.api.generate(messages, params)
            completion = completion.model_copy(
                update={"usage": completion.usage.model_copy(update={"calls": 1, "cache_hits": 0})}
            )
            if key is not None:
                self.cache.put(key, completion)  # type: ignore[union-attr]
        self.usage = self.usage + completion.usage
        log = _current_log.get()
        if log is not None:
            log.add(
                LLMCall(
                    model=completion.model,
                    messages=[dict(m) for m in messages],
                    reply=completion.text,
                    cached=completion.cached,
                    usage=completion.usage,
                )
            )
        return completion

    def count_tokens(self, text: str) -> int:
        n = self.api.count_tokens(text)
        return n if n is not None else max(1, len(text) // 4)

    @property
    def context_window(self) -> int | None:
        return self.api.context_window
