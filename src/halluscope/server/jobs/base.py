"""What the service asks of a job store and of its runner, whichever backend holds the jobs.

Two backends implement these: :class:`~halluscope.server.jobs.store.JobStore` (SQLite, one server process,
the default) with :class:`~halluscope.server.jobs.runner.JobRunner`, and
:class:`~halluscope.server.jobs.redis_store.RedisJobStore` (Redis Streams, any number of replicas) with
:class:`~halluscope.server.jobs.queue_runner.QueueRunner`. The routes use only the store methods below; how
a runner finds work (a SQL query, a consumer group) is its backend's own business.

A result row (``results``, ``item``; ``None`` while the item is unfinished) is a mapping with ``idx``, ``item_id``,
``status``, ``report`` (the Report JSON or None) and ``error``; a job is the dict
:func:`~halluscope.server.jobs.store._job` builds.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from halluscope.records import Example


class JobStoreUnavailable(RuntimeError):
    """The store cannot be reached right now (a Redis connection error): answered 503 with Retry-After."""


@runtime_checkable
class JobStoreAPI(Protocol):
    def create(
        self,
        method: str,
        options: dict[str, Any],
        examples: list[Example],
        *,
        dataset: str | None = None,
        name: str | None = None,
    ) -> str: ...

    def get(self, job_id: str) -> dict[str, Any] | None: ...

    def list(self, limit: int = 100, status: str | None = None) -> builtins.list[dict[str, Any]]: ...

    def active_count(self) -> int: ...

    def counts(self) -> dict[str, float]: ...

    def delete(self, job_id: str) -> bool: ...

    def results(self, job_id: str, after: int = -1, page: int = 200) -> builtins.list[Any]: ...

    def iter_results(self, job_id: str, page: int = 200) -> Iterator[Any]: ...

    def summaries(self, job_id: str, limit: int) -> builtins.list[dict[str, Any]]: ...

    def item(self, job_id: str, index: int) -> tuple[Example | None, Any] | None: ...

    def close(self) -> None: ...


class HeldItem(Protocol):
    """A job item handed to a runner, whichever store handed it out: its index, its stored example (None when
    it cannot be read, ``unreadable`` then says why) and how many times it has been started, this time
    included (:attr:`attempt`, counted by the store; past the runner's ``max_attempts`` it is a dead letter)."""

    @property
    def index(self) -> int: ...

    @property
    def example(self) -> Example | None: ...

    @property
    def unreadable(self) -> str | None: ...

    @property
    def attempt(self) -> int: ...


@runtime_checkable
class JobRunnerAPI(Protocol):
    loop: asyncio.AbstractEventLoop | None

    async def main(self) -> None: ...

    def notify(self) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    async def stop(self, grace_s: float = 10.0) -> None: ...
