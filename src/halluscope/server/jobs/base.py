"""What the service asks of a job store and of its runner, whichever backend holds the jobs.

Two backends implement these: :class:`~halluscope.server.jobs.store.JobStore` (SQLite, one server process,
the default) and :class:`~halluscope.server.jobs.redis_store.RedisJobStore` (Redis Streams, any number of
replicas). The routes use only the store methods of :class:`JobStoreAPI`. The one job loop
(:class:`~halluscope.server.jobs.runner.Runner`) uses only :class:`ItemQueue`, which each backend implements
over its own storage (:class:`~halluscope.server.jobs.store.SqliteQueue`,
:class:`~halluscope.server.jobs.redis_store.RedisQueue`): how an item is handed out (a SQL cursor, a consumer
group) is the backend's business; what is done with it (claim, run, record, dead-letter, cancel, drain,
resume) is the loop's.

A result row (``results``, ``item``; ``None`` while the item is unfinished) is a mapping with ``idx``, ``item_id``,
``status``, ``report`` (the Report JSON or None) and ``error``; a job is the dict
:func:`~halluscope.server.jobs.store._job` builds.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from halluscope.records import Example, Report


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

    @property
    def takeover(self) -> bool:
        """Taken over from another holder whose claim expired (it died or stalled)."""
        ...


#: what :meth:`ItemQueue.complete` answers
GONE, DUPLICATE, WRITTEN, JOB_DONE = -1, 0, 1, 2


class ItemQueue(Protocol):
    """The storage operations the one job loop needs; nothing here decides what to do with an item.

    Every call may block (the loop runs them on a thread) and raises :class:`JobStoreUnavailable` when the
    store cannot be reached right now."""

    @property
    def lease_s(self) -> float | None:
        """How long a claim lasts unless renewed (:meth:`renew`); None: until completed or released."""
        ...

    @property
    def too_often(self) -> str:
        """How an item handed out too often is described: ``{index}``, ``{times}`` (starts without a result),
        ``{limit}``."""
        ...

    def resume(self) -> int:
        """At the loop's start: make claimable again what a stopped or killed process left half done;
        returns how many jobs that was."""
        ...

    def active_ids(self) -> list[str]:
        """The queued or running jobs, oldest first."""
        ...

    def get(self, job_id: str) -> dict[str, Any] | None: ...

    def claim(self, job_id: str, count: int) -> list[HeldItem]:
        """Up to ``count`` items of the job, each counted as one more start (:attr:`HeldItem.attempt`); the
        first claim of a queued job sets it ``running``. Empty when nothing is left to hand out now."""
        ...

    def renew(self, job_id: str, items: list[HeldItem]) -> list[int]:
        """Keep the claims of ``items``; returns the indexes of those another holder took meanwhile."""
        ...

    def complete(
        self,
        job_id: str,
        item: HeldItem,
        *,
        report: Report | None = None,
        report_json: str | None = None,
        status: int = 200,
        error: str | None = None,
    ) -> int:
        """Record the item's result and count it, once: :data:`GONE` (the job was deleted), :data:`DUPLICATE`
        (it had a result already; nothing written), :data:`WRITTEN`, or :data:`JOB_DONE` (written, and it was
        the job's last item: the job is ``done``)."""
        ...

    def release(self, job_id: str, items: list[HeldItem]) -> int:
        """Hand the job back on stop, ``items`` (claimed, not finished) claimable again at once; returns how
        many items."""
        ...

    def finish(self, job_id: str, status: str, error: str | None = None) -> bool:
        """End a queued or running job (``failed`` with its reason); False when it was not active."""
        ...


@runtime_checkable
class JobRunnerAPI(Protocol):
    loop: asyncio.AbstractEventLoop | None

    async def main(self) -> None: ...

    def notify(self) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    async def stop(self, grace_s: float = 10.0) -> None: ...
