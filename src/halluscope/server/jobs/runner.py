"""Running job items, whichever store holds them: :class:`Runner` runs one item (or records it as a dead
letter), records its result, counts it and drains on stop; :class:`JobRunner` feeds it the queued jobs of a
:class:`JobStore` (SQLite, one server), :class:`~halluscope.server.jobs.queue_runner.QueueRunner` the items it
claims from a :class:`~halluscope.server.jobs.redis_store.RedisJobStore` (any number of replicas)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from halluscope.records import Example, Report
from halluscope.server.jobs.base import HeldItem
from halluscope.server.jobs.store import JobStore
from halluscope.server.logs import event


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


@dataclass(frozen=True)
class Started:
    """An item of a SQLite job as its runner starts it (a :class:`~halluscope.server.jobs.base.HeldItem`)."""

    index: int
    example: Example | None
    unreadable: str | None
    attempt: int


class Runner:
    """What every job runner does with an item it holds, whichever store handed it out: run it with the job's
    method (:meth:`_outcome`: or, when it cannot be read or was started more than ``max_attempts`` times,
    record it unscored with the reason), count it (``on_item``, ``on_event``), cancel a job's items
    (:meth:`cancel`) and drain on stop (:meth:`_drain`). Subclasses say where items come from and where
    results go: ``_tasks`` holds the tasks running each job's items, ``_draining`` is set on stop."""

    #: how an item started too often is described: ``{index}``, ``{times}`` (starts without a result), ``{limit}``
    too_often = "item {index} was started {times} times without a result (the limit is {limit})"

    def __init__(
        self,
        store: Any,
        *,
        build_method: Callable[[str, dict[str, Any]], Awaitable[Any]],
        run_item: ItemRunner,
        max_running: int,
        concurrency: int,
        on_item: Callable[[bool], None] | None = None,
        on_event: Callable[[str, int], None] | None = None,
        max_attempts: int = 5,
    ):
        self.store = store
        self.max_attempts = max(1, max_attempts)
        self.build_method = build_method
        self.run_item = run_item
        self.max_running = max(1, max_running)
        self.concurrency = max(1, concurrency)
        self.on_item = on_item
        self.on_event = on_event
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._draining: asyncio.Event | None = None
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}

    def _start_loop(self) -> None:
        self._wake = asyncio.Event()
        self._draining = asyncio.Event()
        self.loop = asyncio.get_running_loop()

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
            self._forget(job_id)

        self.loop.call_soon_threadsafe(_cancel)

    def _forget(self, job_id: str) -> None:
        """Drop what is kept about a cancelled job (its method)."""

    async def _method_of(self, job_id: str, job: dict[str, Any]) -> Any | None:
        """The job's method; None, once the job is failed with the reason, when it cannot be built."""
        try:
            return await self.build_method(job["method"], job["options"])
        except Exception as exc:  # noqa: BLE001 - e.g. a method unregistered since the job was accepted
            failed = await asyncio.to_thread(self.store.finish, job_id, "failed", f"cannot build the method: {exc}")
            if failed is not False:  # False: another replica ended it first
                event(logging.WARNING, "job failed", job_id=job_id, error=str(exc))
            return None

    async def _outcome(self, job_id: str, method: Any, item: HeldItem) -> tuple[bool, dict[str, Any]]:
        """Run the item, or, when it cannot be read or has had its ``max_attempts``, make its unscored dead
        letter: ``(ok, the result to record)`` (a report, or the status and error of a check that failed)."""
        if item.example is None:
            reason = f"item {item.index} could not be read: {item.unreadable or 'no data'}"
        elif item.attempt > self.max_attempts:
            reason = self.too_often.format(index=item.index, times=item.attempt - 1, limit=self.max_attempts)
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

    def _item_done(self, ok: bool) -> None:
        if self.on_item is not None:
            self.on_item(ok)

    async def _drain(self, grace_s: float) -> None:
        """Start nothing new, give the running tasks ``grace_s`` to finish (a reply in transit is not lost),
        then cancel the rest."""
        if self._draining is not None:
            self._draining.set()
        if self._wake is not None:
            self._wake.set()
        tasks = [t for ts in self._tasks.values() for t in ts]
        event(logging.INFO, "jobs draining", running_items=len(tasks), grace_s=grace_s)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


class JobRunner(Runner):
    """Runs the queued jobs of a :class:`JobStore` on one worker loop (:meth:`main`), at most ``max_running``
    at a time, each with at most ``concurrency`` items in flight. Wake it with :meth:`notify` after a
    submission."""

    too_often = (
        "item {index} was started {times} times without a result (each run ended the server or was stopped; "
        "the limit is {limit})"
    )

    def __init__(
        self,
        store: JobStore,
        *,
        build_method: Callable[[str, dict[str, Any]], Awaitable[Any]],
        run_item: ItemRunner,
        max_running: int,
        concurrency: int,
        on_item: Callable[[bool], None] | None = None,
        max_attempts: int = 5,
    ):
        super().__init__(
            store,
            build_method=build_method,
            run_item=run_item,
            max_running=max_running,
            concurrency=concurrency,
            on_item=on_item,
            max_attempts=max_attempts,
        )
        self.store: JobStore = store

    async def main(self) -> None:
        self._start_loop()
        assert self._wake is not None and self._draining is not None
        requeued = await asyncio.to_thread(self.store.requeue_interrupted)
        if requeued:
            event(logging.INFO, "jobs resumed after a restart", jobs=requeued)
        while True:
            free = self.max_running - len(self._tasks)
            if free > 0 and not self._draining.is_set():
                for job_id in await asyncio.to_thread(self.store.queued, free):
                    if job_id not in self._tasks:
                        self._track(job_id, asyncio.create_task(self._run_job(job_id)))
            await self._wake.wait()
            self._wake.clear()

    async def _run_job(self, job_id: str) -> None:
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            return
        attempt = await asyncio.to_thread(self.store.mark_running, job_id)
        if not attempt:
            return
        event(logging.INFO, "job started", job_id=job_id, attempt=attempt, total=job["total"], done=job["done"])
        method = await self._method_of(job_id, job)
        if method is None:
            return
        sem = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        draining = self._draining
        assert draining is not None
        try:
            after, stopping = -1, False
            while not stopping and (page := await asyncio.to_thread(self.store.unfinished, job_id, after)):
                for index, example in page:
                    await sem.acquire()
                    if draining.is_set():  # shutting down: finish what runs, start nothing new
                        sem.release()
                        stopping = True
                        break
                    task = asyncio.create_task(self._one(job_id, attempt, method, index, example))
                    running.add(task)
                    task.add_done_callback(lambda t: (running.discard(t), sem.release()))
                after = page[-1][0]
            if running:
                await asyncio.gather(*running)
            if stopping:
                await asyncio.to_thread(self.store.set_queued, job_id)
                event(logging.INFO, "job paused for shutdown", job_id=job_id, attempt=attempt)
                return
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            if await asyncio.to_thread(self.store.get, job_id) is not None:  # stopped, not deleted
                await asyncio.to_thread(self.store.set_queued, job_id)
            raise
        except Exception as exc:  # the store failed (disk full, ...): the job stops with the reason
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            logging.getLogger("halluscope.server").exception("job failed")
            await asyncio.to_thread(self.store.finish, job_id, "failed", f"{type(exc).__name__}: {exc}")
            return
        await asyncio.to_thread(self.store.finish, job_id, "done")
        event(logging.INFO, "job done", job_id=job_id, attempt=attempt)

    async def _one(self, job_id: str, attempt: int, method: Any, index: int, example: Example | str) -> None:
        """Run one item; ``example`` is the reason instead when its stored data cannot be read (a dead letter)."""
        if isinstance(example, Example):
            tries = await asyncio.to_thread(self.store.start_item, job_id, index)
            item = Started(index, example, None, tries)
        else:
            item = Started(index, None, example, 0)
        ok, result = await self._outcome(job_id, method, item)
        item_id = example.id if isinstance(example, Example) else None
        await asyncio.to_thread(self.store.add_result, job_id, index, item_id, attempt, **result)
        self._item_done(ok)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain: start no new item, give the running ones ``grace_s`` to finish (a reply in transit is not
        lost), then cancel the rest. Stopped jobs go back to ``queued`` and resume at the next start."""
        await self._drain(grace_s)
