"""The job loop over a :class:`RedisJobStore`: one consumer of every job's stream per replica.

:class:`QueueRunner` is :class:`~halluscope.server.jobs.runner.Runner` (the one loop: claim, run, record,
dead-letter, cancel, drain) over :class:`~halluscope.server.jobs.redis_store.RedisQueue`. Its items are claimed
on a lease of ``lease_s``, renewed from a thread of the loop's own every ``lease_s / 4`` (so a worker loop busy
with CPU work does not lose its items), and it looks for work every ``poll_s`` too (a job submitted to another
replica, a lease that expired).

A replica killed mid-item leaves its items claimed; once their lease has run out another replica takes them
over and runs them again: the LLM replies that had arrived are in the response cache (0 calls when it is
shared, e.g. Redis), the requests in flight at the kill are sent again. On a graceful stop the items still
running after the grace are handed back at once (their lease marked expired). An item handed out
``max_attempts`` times without a result (each run ended its replica or lost its lease) is a dead letter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from halluscope.server.jobs.redis_store import RedisJobStore, RedisQueue
from halluscope.server.jobs.runner import ItemRunner, Runner


class QueueRunner(Runner):
    """The job loop over the items this replica (``consumer``) claims from a :class:`RedisJobStore`."""

    def __init__(
        self,
        store: RedisJobStore,
        *,
        build_method: Callable[[str, dict[str, Any]], Awaitable[Any]],
        run_item: ItemRunner,
        max_running: int,
        concurrency: int,
        lease_s: float,
        consumer: str,
        on_item: Callable[[bool], None] | None = None,
        on_event: Callable[[str, int], None] | None = None,
        poll_s: float | None = None,
        max_attempts: int = 5,
    ):
        super().__init__(
            RedisQueue(store, consumer, lease_s),
            build_method=build_method,
            run_item=run_item,
            max_running=max_running,
            concurrency=concurrency,
            on_item=on_item,
            on_event=on_event,
            max_attempts=max_attempts,
            poll_s=poll_s if poll_s is not None else min(1.0, lease_s / 4),
        )
