"""``LLM``: wraps a backend with the response cache, bounded concurrency and cost accounting.

Stages only ever call ``await llm.generate(messages, params)``. Every call is also recorded into the
current :class:`CallLog` (a context variable), which is how a Report gets its usage and audit trail
without threading a ledger through every stage.

A backend that keeps a prompt-prefix cache and serves one request at a time (``prefix_affinity = True``: the
embedded llama.cpp model) gets a :class:`~halluscope.llm.affinity.PrefixAffinityGate` instead of a plain
semaphore: waiting requests are served by the prefix they share with the last one, so calls about one source
run back to back and reuse its evaluated prefix.

Identical requests in flight at the same moment share one backend call ("single flight", keyed by the
cache key even when the cache is off): the first caller makes the call, the others wait for its reply and
are accounted as cache hits.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from halluscope import tracing
from halluscope.llm.affinity import PrefixAffinityGate, prompt_text
from halluscope.llm.base import (
    CallBudgetExceeded,
    Completion,
    EndpointUnreachable,
    GenerateParams,
    Message,
    ModelAPI,
    ReplyTooLargeError,
)
from halluscope.llm.cache import Cache, cache_key, clean_messages, clean_text
from halluscope.llm.pricing import Prices, priced
from halluscope.llm.ratelimit import RateLimiter
from halluscope.records import LLMCall, Usage
from halluscope.text.parsing import MAX_REPLY_CHARS

REFUSED_EXCERPT_CHARS = 1_000
"""Characters of a reply refused for its size that are kept (in the call record and the repair request)."""


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


@dataclass
class CallBudget:
    """The LLM calls one check may still make: ``limit`` (0 = no limit), ``used`` so far, and whether a call was
    refused for it (``exceeded``). Shared by everything the check runs, nested checks included."""

    limit: int
    used: int = 0
    exceeded: bool = False
    unreachable: str | None = None
    """Set at the first :class:`EndpointUnreachable` of the check (its message): every later call of the check
    fails at once with it, and the check ends unscored with it."""

    def refuse_if_unreachable(self) -> None:
        """Fail at once, with no request, once the check found its endpoint unreachable."""
        if self.unreachable is not None:
            raise EndpointUnreachable(self.unreachable)

    def claim(self) -> None:
        """Count one call, or refuse it (:class:`CallBudgetExceeded`) when the budget is spent."""
        if self.limit and self.used >= self.limit:
            self.exceeded = True
            raise CallBudgetExceeded(f"the check reached its budget of {self.limit} LLM calls (max_calls)")
        self.used += 1


_current_budget: ContextVar[CallBudget | None] = ContextVar("halluscope_call_budget", default=None)


@contextmanager
def call_budget(limit: int) -> Iterator[CallBudget]:
    """Bound the LLM calls made inside the block (and the tasks it spawns) to ``limit``; inside a block that
    already has a budget (a check run by another check), that outer budget is the one counted."""
    outer = _current_budget.get()
    if outer is not None:
        yield outer
        return
    budget = CallBudget(limit)
    token = _current_budget.set(budget)
    try:
        yield budget
    finally:
        _current_budget.reset(token)


class _LeaderCancelled(Exception):
    """Set on a shared in-flight request whose caller was cancelled: the waiters retry without it."""


class LLM:
    def __init__(
        self,
        api: ModelAPI,
        *,
        cache: Cache | None = None,
        max_concurrency: int = 8,
        default_params: GenerateParams | None = None,
        rate_limiter: RateLimiter | None = None,
        prices: Prices | None = None,
    ):
        self.api = api
        self.prices = prices  # given prices per million tokens (else LiteLLM's map): llm/pricing.py
        self.rate_limiter = rate_limiter  # requests/tokens per minute; cache hits never pass through it
        self.cache = cache
        limit = api.max_concurrency
        self.max_concurrency = max(1, min(max_concurrency, limit) if limit else max_concurrency)
        self.default_params = default_params or GenerateParams()
        self.usage = Usage()  # lifetime total of this client
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.prefix_affinity = bool(getattr(api, "prefix_affinity", False))
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PrefixAffinityGate] = (
            weakref.WeakKeyDictionary()
        )
        self._in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Future[Completion]]] = (
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

    def gate(self) -> PrefixAffinityGate:
        """This event loop's prefix-affinity gate (backends with ``prefix_affinity``)."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = PrefixAffinityGate(capacity=self.max_concurrency)
        return gate

    def _flights(self) -> dict[str, asyncio.Future[Completion]]:
        loop = asyncio.get_running_loop()
        table = self._in_flight.get(loop)
        if table is None:
            table = self._in_flight[loop] = {}
        return table

    @property
    def in_flight(self) -> int:
        """Distinct requests being answered by the backend right now, on the running event loop (0 outside one)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return 0
        return len(self._in_flight.get(loop, {}))

    async def _call_backend(self, messages: list[Message], params: GenerateParams) -> Completion:
        slot = self.gate().slot(prompt_text(messages)) if self.prefix_affinity else self._semaphore()
        budget = _current_budget.get()
        async with slot:
            if budget is not None:  # calls that waited for a slot behind a refused one are not sent
                budget.refuse_if_unreachable()
            limiter = self.rate_limiter
            reserved = 0
            if limiter is not None:
                estimate = sum(self.count_tokens(m.get("content", "")) for m in messages) + params.max_tokens
                reserved = await limiter.acquire(estimate)
            try:
                completion = await self.api.generate(messages, params)
            except EndpointUnreachable as exc:
                if budget is not None and budget.unreachable is None:
                    budget.unreachable = str(exc)
                raise
            if limiter is not None:
                limiter.settle(reserved, completion.usage.total_tokens)
        if len(completion.text) > MAX_REPLY_CHARS:  # no parser reads it: refused here, never cached
            raise ReplyTooLargeError(
                f"the reply of {len(completion.text)} characters exceeds the {MAX_REPLY_CHARS}-character limit",
                len(completion.text),
                "characters",
                completion.text[:REFUSED_EXCERPT_CHARS],
            )
        usage = completion.usage.model_copy(update={"calls": 1, "cache_hits": 0})
        local = bool(getattr(self.api, "local", False))
        usage = priced(usage, [self.api.name, completion.model], self.prices, local)
        return completion.model_copy(update={"text": clean_text(completion.text), "usage": usage})

    async def _single_flight(self, key: str, messages: list[Message], params: GenerateParams) -> Completion:
        """The backend's reply, made once for all identical requests in flight; a joiner's copy is a cache hit."""
        flights = self._flights()
        while (pending := flights.get(key)) is not None:
            try:
                # shield: a joiner that is cancelled must not cancel the request the others wait for
                shared = await asyncio.shield(pending)
            except _LeaderCancelled:
                continue  # the caller that made the request was cancelled: try again (maybe as the leader)
            return shared.model_copy(update={"cached": True, "usage": Usage(cache_hits=1)})
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        flights[key] = future
        try:
            completion = await self._call_backend(messages, params)
            if self.cache is not None:
                self.cache.put(key, completion)
        except Exception as exc:
            future.set_exception(exc)  # every joiner gets the same error
            raise
        else:
            future.set_result(completion)
        finally:
            if not future.done():  # this caller was cancelled (or interrupted): its joiners retry without it
                future.set_exception(_LeaderCancelled())
            future.exception()  # mark retrieved: no "exception was never retrieved" warning without joiners
            del flights[key]
        return completion

    async def generate(self, messages: list[Message], params: GenerateParams | None = None) -> Completion:
        params = params or self.default_params
        budget = _current_budget.get()
        if budget is not None:
            budget.refuse_if_unreachable()
            budget.claim()
        messages = clean_messages(messages)
        cache_id = getattr(self.api, "cache_id", None) or self.api.name
        key = cache_key(cache_id, params, messages)  # also computed without a cache: it keys the single flight
        completion: Completion | None = None
        with tracing.llm_span(self.api.name, params, self.api) as span:
            if self.cache is not None:
                hit = self.cache.get(key)
                if hit is not None:
                    completion = hit.model_copy(update={"cached": True, "usage": Usage(cache_hits=1)})
                    learn = getattr(self.api, "learn_served_name", None)
                    if callable(learn):  # an unnamed endpoint's model, named by a reply cached earlier
                        learn(completion.model)
            if completion is None:
                try:
                    completion = await self._single_flight(key, messages, params)
                except ReplyTooLargeError as exc:
                    self._record_refused(messages, exc)
                    raise
            tracing.record_completion(span, completion)
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

    def close(self, *, cache: bool = True) -> None:
        """Release what this client holds: the backend's HTTP connections (loaded weights are shared and stay)
        and, when ``cache``, the response cache's connection. For a client no one uses any more."""
        close_connections = getattr(self.api, "close_connections", None)
        if callable(close_connections):
            close_connections()
        if cache and self.cache is not None:
            self.cache.close()

    def _record_refused(self, messages: list[Message], exc: ReplyTooLargeError) -> None:
        """Audit a reply refused for its size once, cut to its first characters, with its size."""
        usage = Usage(calls=1)
        self.usage = self.usage + usage
        log = _current_log.get()
        if log is not None:
            log.add(
                LLMCall(
                    model=self.name,
                    messages=[dict(m) for m in messages],
                    reply=exc.excerpt,
                    usage=usage,
                    reply_size=exc.size,
                    reply_size_unit=exc.unit,  # type: ignore[arg-type]
                )
            )

    def count_tokens(self, text: str) -> int:
        n = self.api.count_tokens(text)
        return n if n is not None else max(1, len(text) // 4)

    @property
    def context_window(self) -> int | None:
        return self.api.context_window
