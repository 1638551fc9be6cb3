"""The one job loop, whichever store holds the jobs: :class:`Runner` claims items of the active jobs while it
has capacity, runs each with its job's method (or records it as a dead letter), records and counts its
result, renews its claims when they expire, cancels a deleted job's items, and drains on stop. It asks the
store only for the operations of :class:`~halluscope.server.jobs.base.ItemQueue`;
:class:`JobRunner` is the loop over a :class:`JobStore` (SQLite, one server),
:class:`~halluscope.server.jobs.queue_runner.QueueRunner` over a
:class:`~halluscope.server.jobs.redis_store.RedisJobStore` (any number of replicas).

What the loop does, for both stores:

- **claim**: the active jobs oldest first, at most ``max_running`` with items running here and ``concurrency``
  items of each at once; it looks again when an item ends, when a job is submitted here (:meth:`notify`), and
  every ``poll_s`` when other processes add work too.
- **run and record**: the item runs with its job's method (built once per job; a method that cannot be built
  fails the job with the reason) and its result is written once; the job's last result ends it ``done``.
- **dead letters**: an item whose stored data cannot be read, or started more than ``max_attempts`` times
  without a result, is recorded unscored with the reason instead of being run, so no item stalls its job.
- **store errors**: while the store is unreachable (:class:`JobStoreUnavailable`) what runs goes on and the
  loop looks again later (an unwritten result is handed out again when its claim expires, or at the next
  start); any other error of the store or of an item fails that job with the reason.
- **cancel**: :meth:`cancel` (a deleted job) stops its running items; their finished ones stay.
- **stop and resume**: :meth:`stop` starts nothing new, gives the running items ``grace_s``, cancels the rest
  and hands every job back to the store, its cancelled items claimable at once; at the next start the store
  resumes what a stop or a ``kill -9`` left (:meth:`~halluscope.server.jobs.base.ItemQueue.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from halluscope.records import Example, Report
from halluscope.server.jobs.base import DUPLICATE, GONE, JOB_DONE, HeldItem, ItemQueue, JobStoreUnavailable
from halluscope.server.jobs.store import JobStore, SqliteQueue
from halluscope.server.logs import event

_log = logging.getLogger("halluscope.server")


class CheckFailed(Exception):
    """A check that ended without a report; ``status`` is the HTTP status it answers with (422, 504, ...)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def dead_letter(method: Any, reason: str) -> Report:
    """The unscored report of a job item that is not run (its stored data cannot be read, or it failed too
    often): recorded like any unscored item, so the job finishes and the reason shows on the item."""
    return Report(method=getattr(method, "name", "unknown"), unscored_reason=f"not checked: {reason}")


# (method, example, job id) -> (report, its JSON); raises CheckFailed
ItemRunner = Callable[[Any, Example, str], Awaitable[tuple[Report, str]]]


class Runner:
    """The job loop over one :class:`~halluscope.server.jobs.base.ItemQueue` (see the module docstring). Run
    :meth:`main` on a worker loop; :meth:`notify` and :meth:`cancel` are thread-safe; :meth:`stop` runs on
    the same loop as :meth:`main`. ``on_item(ok)`` counts each recorded item, ``on_event(name, n)`` the
    queue events (claimed, retried, done, duplicate, lease_lost, dead_letter)."""

    def __init__(
        self,
        queue: ItemQueue,
        *,
        build_method: Callable[[str, dict[str, Any]], Awaitable[Any]],
        run_item: ItemRunner,
        max_running: int,
        concurrency: int,
        on_item: Callable[[bool], None] | None = None,
        on_event: Callable[[str, int], None] | None = None,
        max_attempts: int = 5,
        poll_s: float | None = None,
    ):
        self.queue = queue
        self.build_method = build_method
        self.run_item = run_item
        self.max_running = max(1, max_running)
        self.concurrency = max(1, concurrency)
        self.on_item = on_item
        self.on_event = on_event
        self.max_attempts = max(1, max_attempts)
        self.poll_s = poll_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._draining: asyncio.Event | None = None
        self._stopped: asyncio.Event | None = None
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}
        self._methods: dict[str, Any] = {}
        self._held: dict[tuple[str, int], HeldItem] = {}  # (job id, index) -> the claim; renewed by the thread
        self._lost: set[tuple[str, int]] = set()  # held items another holder took meanwhile
        self._handed_back: dict[str, list[HeldItem]] = {}  # job id -> items cancelled while draining
        self._held_lock = threading.Lock()
        self._stop_renewing = threading.Event()
        self._store_down_since: float | None = None

    # --- the loop -----------------------------------------------------------------------------------

    async def main(self) -> None:
        self._wake, self._draining, self._stopped = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.loop = asyncio.get_running_loop()
        try:
            resumed = await asyncio.to_thread(self.queue.resume)
            if resumed:
                event(logging.INFO, "jobs resumed after a restart", jobs=resumed)
            if self.queue.lease_s is not None:
                renew_s = self.queue.lease_s / 4
                threading.Thread(
                    target=self._renew_forever, args=(renew_s,), name="halluscope-lease-renewer", daemon=True
                ).start()
            while not self._draining.is_set():
                await self._look()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                self._wake.clear()
        finally:
            self._stop_renewing.set()
            self._stopped.set()

    async def _look(self) -> None:
        """Claim what there is room for; a store away is logged once, not fatal."""
        try:
            await self._fill()
            if self._store_down_since is not None:
                down_s = round(time.monotonic() - self._store_down_since, 1)
                event(logging.INFO, "jobs store reachable again", down_s=down_s)
                self._store_down_since = None
        except JobStoreUnavailable as exc:  # keep what runs, look again later
            if self._store_down_since is None:
                self._store_down_since = time.monotonic()
                event(logging.WARNING, "jobs store unreachable", error=str(exc))
        except Exception:  # noqa: BLE001 - a bug must not stop the job processing
            _log.exception("claiming job items failed")

    async def _fill(self) -> None:
        assert self._draining is not None
        jobs = await asyncio.to_thread(self.queue.active_ids)
        for gone in [j for j in self._methods if j not in jobs and not self._tasks.get(j)]:
            self._methods.pop(gone, None)
        for job_id in jobs:
            if self._draining.is_set():
                return
            running = self._tasks.get(job_id, set())
            if not running and len(self._tasks) >= self.max_running:
                continue
            free = self.concurrency - len(running)
            if free > 0 and (method := await self._method(job_id)) is not None:
                await self._claim(job_id, method, free)

    async def _claim(self, job_id: str, method: Any, count: int) -> None:
        assert self._draining is not None
        try:
            claims = await asyncio.to_thread(self.queue.claim, job_id, count)
        except JobStoreUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - the store failed for this job (disk full, ...): it ends so
            await self._fail(job_id, exc)
            return
        if self._draining.is_set():  # stop() began while claiming: these are handed back, not started
            self._handed_back.setdefault(job_id, []).extend(claims)
            return
        started = 0
        for claim in claims:
            key = (job_id, claim.index)
            with self._held_lock:
                if key in self._held:  # ours, still running (its renewal was late): the claim renewed it
                    continue
                self._held[key] = claim
                self._lost.discard(key)
            self._track(job_id, asyncio.create_task(self._one(job_id, method, claim)))
            started += 1
        if started:
            takeovers = sum(1 for c in claims if c.takeover)
            self._count("claimed", started)
            self._count("retried", takeovers)
            if takeovers:
                event(logging.INFO, "job items taken over after a lease expired", job_id=job_id, items=takeovers)

    async def _method(self, job_id: str) -> Any | None:
        """The job's method, built once per job here; None, once the job is failed with the reason, when it
        cannot be built."""
        if (method := self._methods.get(job_id)) is not None:
            return method
        job = await asyncio.to_thread(self.queue.get, job_id)
        if job is None:
            return None
        try:
            method = await self.build_method(job["method"], job["options"])
        except Exception as exc:  # noqa: BLE001 - e.g. a method unregistered since the job was accepted
            await self._fail(job_id, f"cannot build the method: {exc}")
            return None
        event(logging.INFO, "job started", job_id=job_id, total=job["total"], done=job["done"])
        self._methods[job_id] = method
        return method

    async def _fail(self, job_id: str, reason: Exception | str) -> None:
        """End the job ``failed`` with the reason and stop its items here."""
        if isinstance(reason, Exception):
            _log.error("job failed", exc_info=reason)
            reason = f"{type(reason).__name__}: {reason}"
        try:
            failed = await asyncio.to_thread(self.queue.finish, job_id, "failed", reason)
        except Exception as exc:  # noqa: BLE001 - the store is away too: the job is resumed at the next start
            event(logging.WARNING, "job failure not stored", job_id=job_id, error=str(exc))
            failed = False
        if failed:  # False: another replica ended it first
            event(logging.WARNING, "job failed", job_id=job_id, error=reason)
        self.cancel(job_id)

    # --- one item -----------------------------------------------------------------------------------

    async def _one(self, job_id: str, method: Any, item: HeldItem) -> None:
        key = (job_id, item.index)
        try:
            ok, result = await self._outcome(job_id, method, item)
            outcome = await asyncio.to_thread(self.queue.complete, job_id, item, **result)
        except asyncio.CancelledError:
            if self._draining is not None and self._draining.is_set():
                self._handed_back.setdefault(job_id, []).append(item)
            raise
        except JobStoreUnavailable as exc:  # the result is lost here; the item is handed out again later
            event(logging.WARNING, "job item result not stored", job_id=job_id, index=item.index, error=str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - the store or the item failed: the job ends with the reason
            await self._fail(job_id, exc)
            return
        finally:
            with self._held_lock:
                self._held.pop(key, None)
                self._lost.discard(key)
        self._record(job_id, ok, outcome)

    async def _outcome(self, job_id: str, method: Any, item: HeldItem) -> tuple[bool, dict[str, Any]]:
        """Run the item, or, when it cannot be read or has had its ``max_attempts``, make its unscored dead
        letter: ``(ok, the result to record)`` (a report, or the status and error of a check that failed)."""
        if item.example is None:
            reason = f"item {item.index} could not be read: {item.unreadable or 'no data'}"
        elif item.attempt > self.max_attempts:
            reason = self.queue.too_often.format(index=item.index, times=item.attempt - 1, limit=self.max_attempts)
        else:
            try:
                report, report_json = await self.run_item(method, item.example, job_id)
            except CheckFailed as exc:
                return False, {"status": exc.status, "error": str(exc)}
            return True, {"report": report, "report_json": report_json}
        self._count("dead_letter")
        event(logging.WARNING, "job item recorded unscored without running", job_id=job_id, reason=reason)
        report = dead_letter(method, reason)
        return True, {"report": report, "report_json": report.model_dump_json()}

    def _record(self, job_id: str, ok: bool, outcome: int) -> None:
        if outcome == GONE:
            self.cancel(job_id)  # deleted meanwhile: stop its other items here
            return
        if outcome == DUPLICATE:
            self._count("duplicate")  # another replica wrote this item's result first (this one was slow)
            return
        self._count("done")
        if self.on_item is not None:
            self.on_item(ok)
        if outcome == JOB_DONE:
            event(logging.INFO, "job done", job_id=job_id)

    def _count(self, name: str, n: int = 1) -> None:
        if self.on_event is not None and n:
            self.on_event(name, n)

    def _track(self, job_id: str, task: asyncio.Task[None]) -> None:
        self._tasks.setdefault(job_id, set()).add(task)
        task.add_done_callback(lambda t: self._ended(job_id, t))

    def _ended(self, job_id: str, task: asyncio.Task[None]) -> None:
        tasks = self._tasks.get(job_id)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._tasks[job_id]
        if self._wake is not None:
            self._wake.set()  # a slot is free

    # --- claims that expire -------------------------------------------------------------------------

    def _renew_forever(self, renew_s: float) -> None:
        while not self._stop_renewing.wait(renew_s):
            self.renew_now()

    def renew_now(self) -> None:
        """Renew the claim of every item held (the renewing thread calls it every ``lease_s / 4``): from a
        thread of its own, so a worker loop busy with CPU work does not lose its items."""
        with self._held_lock:
            by_job: dict[str, list[HeldItem]] = {}
            for (job_id, _), item in self._held.items():
                by_job.setdefault(job_id, []).append(item)
        for job_id, items in by_job.items():
            try:
                lost = self.queue.renew(job_id, items)
            except Exception as exc:  # noqa: BLE001 - the store away: the next round tries again
                _log.debug("renewing leases failed: %s", exc)
                continue
            with self._held_lock:
                new = [(job_id, i) for i in lost if (job_id, i) in self._held and (job_id, i) not in self._lost]
                self._lost.update(new)
            if new:  # the item goes on here too: whichever result comes first is kept
                self._count("lease_lost", len(new))
                event(logging.WARNING, "job item leases lost (renewed too late)", job_id=job_id, items=len(new))

    # --- control ------------------------------------------------------------------------------------

    def notify(self) -> None:
        """Look for work now (thread-safe)."""
        if self.loop is not None and self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    def cancel(self, job_id: str) -> None:
        """Stop what runs here of a job (thread-safe); its finished items stay."""
        if self.loop is None:
            return

        def _cancel() -> None:
            for task in list(self._tasks.get(job_id, ())):
                task.cancel()
            self._methods.pop(job_id, None)

        self.loop.call_soon_threadsafe(_cancel)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain: start no new item, give the running ones ``grace_s`` to finish (a reply in transit is not
        lost), cancel the rest, and hand every job worked on here back to the store (its cancelled items
        claimable at once: the SQLite job goes back to ``queued``, a Redis item to any replica)."""
        if self._draining is None or self._wake is None or self._stopped is None:
            return  # never started
        self._draining.set()
        self._wake.set()
        tasks = [t for ts in self._tasks.values() for t in ts]
        event(logging.INFO, "jobs draining", running_items=len(tasks), grace_s=grace_s)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(TimeoutError):  # the loop's last claim, if one was under way, is handed back too
            await asyncio.wait_for(self._stopped.wait(), 10.0)
        self._stop_renewing.set()
        for job_id in {*self._methods, *self._handed_back}:
            items = self._handed_back.get(job_id, [])
            try:
                n = await asyncio.to_thread(self.queue.release, job_id, items)
            except Exception:  # noqa: BLE001 - a lease expires anyway; a SQLite job is requeued at the next start
                continue
            event(logging.INFO, "job paused for shutdown", job_id=job_id, items_handed_back=n)
        self._handed_back.clear()


class JobRunner(Runner):
    """The job loop over a :class:`JobStore` (SQLite, one server): its queued jobs, resumed at start."""

    def __init__(
        self,
        store: JobStore,
        *,
        build_method: Callable[[str, dict[str, Any]], Awaitable[Any]],
        run_item: ItemRunner,
        max_running: int,
        concurrency: int,
        on_item: Callable[[bool], None] | None = None,
        on_event: Callable[[str, int], None] | None = None,
        max_attempts: int = 5,
    ):
        super().__init__(
            SqliteQueue(store),
            build_method=build_method,
            run_item=run_item,
            max_running=max_running,
            concurrency=concurrency,
            on_item=on_item,
            on_event=on_event,
            max_attempts=max_attempts,
        )
