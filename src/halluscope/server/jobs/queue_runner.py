"""Running the items of the jobs in a :class:`RedisJobStore`: one consumer of every job's stream per replica.

The runner claims items while it has capacity (at most ``max_running`` jobs and ``concurrency`` items of each
at once, as :class:`~halluscope.server.jobs.runner.JobRunner` per server), runs them on the worker loops,
renews the lease of every item it holds from a thread of its own (so a worker loop busy with CPU work does not
lose its items), and writes each result once. It looks for work when an item ends, when a job is submitted
here, and every ``poll_s`` otherwise (a job submitted to another replica, a lease that expired).

A replica killed mid-item leaves its items claimed; once their lease (``lease_s``) has run out another
replica takes them over and runs them again: the LLM replies that had arrived are in the response cache (0
calls when it is shared, e.g. Redis), the requests in flight at the kill are sent again. On a graceful stop
the items still running after the grace are handed back at once (their lease marked expired).

A dead letter never stalls a job: an item whose stored data cannot be read, or that was handed out
``max_attempts`` times without a result (each run ended its replica or lost its lease), is recorded as an
unscored item with the reason instead of being run again, so the job still finishes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from halluscope.server.jobs.base import JobStoreUnavailable
from halluscope.server.jobs.redis_store import Lease, RedisJobStore
from halluscope.server.jobs.runner import ItemRunner, Runner
from halluscope.server.logs import event

_log = logging.getLogger("halluscope.server")


class QueueRunner(Runner):
    """Runs the items this replica claims from a :class:`RedisJobStore` (:meth:`main`), renewing their leases
    from a thread of its own and handing back, on stop, those still running after the grace."""

    too_often = (
        "item {index} was handed out {times} times without a result (each run ended its replica or lost its "
        "lease; the limit is {limit})"
    )

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
            store,
            build_method=build_method,
            run_item=run_item,
            max_running=max_running,
            concurrency=concurrency,
            on_item=on_item,
            on_event=on_event,
            max_attempts=max_attempts,
        )
        self.store: RedisJobStore = store
        self.lease_s = lease_s
        self.renew_s = lease_s / 4
        self.poll_s = poll_s if poll_s is not None else min(1.0, lease_s / 4)
        self.consumer = consumer
        self._methods: dict[str, Any] = {}
        self._held: dict[tuple[str, str], Lease] = {}  # (job id, entry id) -> the claim; renewed by the thread
        self._lost: set[tuple[str, str]] = set()  # held items whose lease another replica took
        self._handed_back: dict[str, list[str]] = {}  # job id -> entry ids cancelled while draining
        self._held_lock = threading.Lock()
        self._stop_renewing = threading.Event()
        self._renewer: threading.Thread | None = None
        self._store_down_since: float | None = None

    # --- the loop -----------------------------------------------------------------------------------

    async def main(self) -> None:
        self._start_loop()
        assert self._wake is not None and self._draining is not None
        self._renewer = threading.Thread(target=self._renew_forever, name="halluscope-lease-renewer", daemon=True)
        self._renewer.start()
        try:
            while not self._draining.is_set():
                try:
                    await self._fill()
                    if self._store_down_since is not None:
                        event(
                            logging.INFO,
                            "jobs store reachable again",
                            down_s=round(time.monotonic() - self._store_down_since, 1),
                        )
                        self._store_down_since = None
                except JobStoreUnavailable as exc:  # Redis away: keep what runs, look again later
                    if self._store_down_since is None:
                        self._store_down_since = time.monotonic()
                        event(logging.WARNING, "jobs store unreachable", error=str(exc))
                except Exception:  # noqa: BLE001 - a bug must not stop the replica's job processing
                    _log.exception("claiming job items failed")
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                except TimeoutError:
                    pass
                self._wake.clear()
        finally:
            self._stop_renewing.set()

    async def _fill(self) -> None:
        assert self._draining is not None
        jobs = await asyncio.to_thread(self.store.active_ids)
        for gone in [j for j in self._methods if j not in jobs and not self._tasks.get(j)]:
            self._methods.pop(gone, None)
        for job_id in jobs:
            if self._draining.is_set():
                return
            running = self._tasks.get(job_id, set())
            working = sum(1 for tasks in self._tasks.values() if tasks)
            if not running and working >= self.max_running:
                continue
            free = self.concurrency - len(running)
            if free <= 0:
                continue
            method = await self._method(job_id)
            if method is None:
                continue
            claims = await asyncio.to_thread(self.store.claim, job_id, self.consumer, free, self.lease_s)
            if self._draining.is_set():  # stop() began while claiming: these are handed back, not started
                await asyncio.to_thread(
                    self.store.release, job_id, self.consumer, [c.entry_id for c in claims], self.lease_s
                )
                return
            started = 0
            for claim in claims:
                key = (job_id, claim.entry_id)
                with self._held_lock:
                    if key in self._held:  # ours, still running (its renewal was late): the claim renewed it
                        continue
                    self._held[key] = claim
                    self._lost.discard(key)
                self._track(job_id, asyncio.create_task(self._one(job_id, method, claim)))
                started += 1
            if started:
                self._count("claimed", started)
                self._count("retried", sum(1 for c in claims if c.takeover))
                if any(c.takeover for c in claims):
                    event(
                        logging.INFO,
                        "job items taken over after a lease expired",
                        job_id=job_id,
                        items=sum(1 for c in claims if c.takeover),
                        consumer=self.consumer,
                    )

    async def _method(self, job_id: str) -> Any | None:
        method = self._methods.get(job_id)
        if method is not None:
            return method
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            return None
        method = await self._method_of(job_id, job)
        if method is not None:
            self._methods[job_id] = method
        return method

    async def _one(self, job_id: str, method: Any, claim: Lease) -> None:
        key = (job_id, claim.entry_id)
        try:
            ok, result = await self._outcome(job_id, method, claim)
            outcome = await asyncio.to_thread(self.store.complete, job_id, claim, **result)
        except asyncio.CancelledError:
            if self._draining is not None and self._draining.is_set():
                self._handed_back.setdefault(job_id, []).append(claim.entry_id)
            raise
        except JobStoreUnavailable as exc:  # the result is lost here; the item's lease expires and it runs again
            event(logging.WARNING, "job item result not stored", job_id=job_id, index=claim.index, error=str(exc))
            return
        except Exception:  # noqa: BLE001 - a bug: the item's lease expires and it runs again
            _log.exception("storing a job item's result failed")
            return
        finally:
            with self._held_lock:
                self._held.pop(key, None)
                self._lost.discard(key)
        if outcome > 0:
            self._count("done")
            self._item_done(ok)
            if outcome == 2:
                event(logging.INFO, "job done", job_id=job_id, consumer=self.consumer)
        elif outcome == 0:
            self._count("duplicate")  # another replica wrote this item's result first (this one was slow)
        else:
            self.cancel(job_id)  # deleted meanwhile: stop its other items here

    # --- leases -------------------------------------------------------------------------------------

    def _renew_forever(self) -> None:
        while not self._stop_renewing.wait(self.renew_s):
            self.renew_now()

    def renew_now(self) -> None:
        """Renew the lease of every item held (the renewing thread calls it every ``lease_s / 4``)."""
        with self._held_lock:
            by_job: dict[str, list[str]] = {}
            for job_id, entry_id in self._held:
                by_job.setdefault(job_id, []).append(entry_id)
        for job_id, entry_ids in by_job.items():
            try:
                lost = self.store.renew(job_id, self.consumer, entry_ids)
            except Exception as exc:  # noqa: BLE001 - Redis away: the next round tries again
                _log.debug("renewing leases failed: %s", exc)
                continue
            with self._held_lock:
                new = [(job_id, e) for e in lost if (job_id, e) in self._held and (job_id, e) not in self._lost]
                self._lost.update(new)
            if new:  # the item goes on here too: whichever result comes first is kept
                self._count("lease_lost", len(new))
                event(
                    logging.WARNING,
                    "job item leases lost (this replica was too slow to renew them)",
                    job_id=job_id,
                    items=len(new),
                    consumer=self.consumer,
                )

    # --- control ------------------------------------------------------------------------------------

    def _forget(self, job_id: str) -> None:
        self._methods.pop(job_id, None)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain: claim nothing more, give the running items ``grace_s`` to finish, cancel the rest and hand
        them back so another replica takes them at once."""
        await self._drain(grace_s)
        self._stop_renewing.set()
        for job_id, entry_ids in self._handed_back.items():
            try:
                n = await asyncio.to_thread(self.store.release, job_id, self.consumer, entry_ids, self.lease_s)
                event(logging.INFO, "job items handed back", job_id=job_id, items=n)
            except Exception:  # noqa: BLE001 - they come back anyway once their lease expires
                pass
        self._handed_back.clear()
