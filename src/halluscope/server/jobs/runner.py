"""Running the queued jobs of a :class:`JobStore` on one worker loop, resuming unfinished items, draining on stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from halluscope.records import Example, Report
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


class JobRunner:
    """Runs queued jobs on one worker loop (:meth:`main`), at most ``max_running`` at a time, each with at
    most ``concurrency`` items in flight. Wake it with :meth:`notify` after a submission."""

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
        self.store = store
        self.max_attempts = max(1, max_attempts)
        self.build_method = build_method
        self.run_item = run_item
        self.max_running = max(1, max_running)
        self.concurrency = max(1, concurrency)
        self.on_item = on_item
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._draining: asyncio.Event | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def main(self) -> None:
        self._wake = asyncio.Event()
        self._draining = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        requeued = await asyncio.to_thread(self.store.requeue_interrupted)
        if requeued:
            event(logging.INFO, "jobs resumed after a restart", jobs=requeued)
        while True:
            free = self.max_running - len(self._tasks)
            if free > 0 and not self._draining.is_set():
                for job_id in await asyncio.to_thread(self.store.queued, free):
                    if job_id not in self._tasks:
                        task = asyncio.create_task(self._run_job(job_id))
                        self._tasks[job_id] = task
                        task.add_done_callback(lambda _t, j=job_id: self._finished(j))
            await self._wake.wait()
            self._wake.clear()

    def _finished(self, job_id: str) -> None:
        self._tasks.pop(job_id, None)
        if self._wake is not None:
            self._wake.set()

    def notify(self) -> None:
        """Look for queued jobs now (thread-safe)."""
        if self.loop is not None and self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    def cancel(self, job_id: str) -> None:
        """Stop a running job (thread-safe); its finished items stay."""
        if self.loop is None:
            return

        def _cancel() -> None:
            task = self._tasks.get(job_id)
            if task is not None:
                task.cancel()

        self.loop.call_soon_threadsafe(_cancel)

    async def _run_job(self, job_id: str) -> None:
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            return
        attempt = await asyncio.to_thread(self.store.mark_running, job_id)
        if not attempt:
            return
        event(logging.INFO, "job started", job_id=job_id, attempt=attempt, total=job["total"], done=job["done"])
        try:
            method = await self.build_method(job["method"], job["options"])
        except Exception as exc:  # noqa: BLE001 - e.g. a method unregistered since the job was accepted
            await asyncio.to_thread(self.store.finish, job_id, "failed", f"cannot build the method: {exc}")
            event(logging.WARNING, "job failed", job_id=job_id, error=str(exc))
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
        item_id = example.id if isinstance(example, Example) else None
        tries = await asyncio.to_thread(self.store.start_item, job_id, index) if isinstance(example, Example) else 0
        try:
            if isinstance(example, Example) and tries <= self.max_attempts:
                report, report_json = await self.run_item(method, example, job_id)
            else:
                reason = (
                    f"item {index} could not be read: {example}"
                    if isinstance(example, str)
                    else f"item {index} was started {tries - 1} times without a result (each run ended the server "
                    f"or was stopped; the limit is {self.max_attempts})"
                )
                event(logging.WARNING, "job item recorded unscored without running", job_id=job_id, reason=reason)
                report = dead_letter(method, reason)
                report_json = report.model_dump_json()
        except CheckFailed as exc:
            await asyncio.to_thread(
                self.store.add_result, job_id, index, item_id, attempt, status=exc.status, error=str(exc)
            )
            ok = False
        else:
            await asyncio.to_thread(
                self.store.add_result, job_id, index, item_id, attempt, report=report, report_json=report_json
            )
            ok = True
        if self.on_item is not None:
            self.on_item(ok)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Drain: start no new item, give the running ones ``grace_s`` to finish (a reply in transit is not
        lost), then cancel the rest. Stopped jobs go back to ``queued`` and resume at the next start."""
        if self._draining is not None:
            self._draining.set()
        tasks = list(self._tasks.values())
        event(logging.INFO, "jobs draining", running_items=len(tasks), grace_s=grace_s)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
