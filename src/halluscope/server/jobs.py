"""Background jobs persisted in SQLite: they survive a restart (also ``kill -9``) and resume where they stopped.

Tables: ``jobs`` (one row per job, with its running counts), ``items`` (the job's examples, copied in at
submission so a job does not depend on a file that may change) and ``results`` (one row per finished item:
the whole Report JSON, or the error). A result and the job's counts are written in one transaction, so after
a crash the counts match the results. On start, jobs left ``running`` go back to ``queued``; a job runs only
the items that have no result, so nothing finished is computed again, and an item that was half-way reuses
the LLM replies already in the response cache (0 repeated calls for every reply that had arrived).

One server process per database: :class:`JobStore` holds an exclusive lock on ``<db>.lock``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from halluscope.records import Example, Report, Usage
from halluscope.server.logs import event

ID_LENGTH = 32
ACTIVE = ("queued", "running")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, status TEXT NOT NULL, name TEXT, method TEXT NOT NULL, options TEXT NOT NULL,
  dataset TEXT, total INTEGER NOT NULL, created REAL NOT NULL, started REAL, finished REAL,
  attempts INTEGER NOT NULL DEFAULT 0, error TEXT,
  done INTEGER NOT NULL DEFAULT 0, scored INTEGER NOT NULL DEFAULT 0, unscored INTEGER NOT NULL DEFAULT 0,
  errors INTEGER NOT NULL DEFAULT 0, score_sum REAL NOT NULL DEFAULT 0,
  calls INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0, cache_hits INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
CREATE TABLE IF NOT EXISTS items (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, idx INTEGER NOT NULL, example TEXT NOT NULL,
  PRIMARY KEY (job_id, idx));
CREATE TABLE IF NOT EXISTS results (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, idx INTEGER NOT NULL, item_id TEXT,
  status INTEGER NOT NULL, score REAL, label TEXT, findings INTEGER NOT NULL DEFAULT 0,
  report TEXT, error TEXT, attempt INTEGER NOT NULL, finished REAL NOT NULL,
  PRIMARY KEY (job_id, idx));
"""

_JOB_COLUMNS = ("id, status, name, method, options, dataset, total, created, started, finished, attempts, error, "
                "done, scored, unscored, errors, score_sum, calls, prompt_tokens, completion_tokens, cache_hits")


class StoreLocked(RuntimeError):
    pass


def valid_job_id(value: str) -> bool:
    return len(value) == ID_LENGTH and all(c in "0123456789abcdef" for c in value)


class JobStore:
    """Thread-safe: one connection behind a lock (each statement is short; pages bound the long reads)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(f"{self.path}.lock", "a+")  # noqa: SIM115 - held for the store's life
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            raise StoreLocked(f"the jobs database {self.path} is in use by another halluscope server "
                              "(one server per database: give this one --jobs-db)") from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses nothing committed
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()

    # --- jobs ---------------------------------------------------------------------------------------

    def create(self, method: str, options: dict[str, Any], examples: list[Example], *,
               dataset: str | None = None, name: str | None = None) -> str:
        job_id = uuid.uuid4().hex
        rows = ((job_id, i, ex.model_dump_json()) for i, ex in enumerate(examples))
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT INTO jobs (id, status, name, method, options, dataset, total, created) "
                    "VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
                    (job_id, name, method, json.dumps(options, sort_keys=True), dataset, len(examples), time.time()))
                self._conn.executemany("INSERT INTO items (job_id, idx, example) VALUES (?, ?, ?)", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return job_id

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(row) if row is not None else None

    def list(self, limit: int = 100, status: str | None = None) -> list[dict[str, Any]]:
        query = f"SELECT {_JOB_COLUMNS} FROM jobs"
        args: tuple[Any, ...] = ()
        if status is not None:
            query += " WHERE status = ?"
            args = (status,)
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY created DESC LIMIT ?", (*args, limit)).fetchall()
        return [_job(r) for r in rows]

    def active_count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'running')").fetchone()[0]

    def queued(self, limit: int) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT id FROM jobs WHERE status = 'queued' ORDER BY created LIMIT ?",
                                      (limit,)).fetchall()
        return [r[0] for r in rows]

    def requeue_interrupted(self) -> int:
        """Jobs a stopped (or killed) server left ``running`` go back to the queue."""
        with self._lock:
            return self._conn.execute("UPDATE jobs SET status = 'queued' WHERE status = 'running'").rowcount

    def mark_running(self, job_id: str) -> int:
        """Set ``running``, count the attempt; returns the attempt number (0 when the job is gone)."""
        with self._lock:
            row = self._conn.execute(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, started = COALESCE(started, ?) "
                "WHERE id = ? AND status = 'queued' RETURNING attempts", (time.time(), job_id)).fetchone()
        return row[0] if row is not None else 0

    def finish(self, job_id: str, status: str, error: str | None = None) -> None:
        with self._lock:
            self._conn.execute("UPDATE jobs SET status = ?, finished = ?, error = ? WHERE id = ?",
                               (status, time.time(), error, job_id))

    def set_queued(self, job_id: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE jobs SET status = 'queued' WHERE id = ? AND status = 'running'", (job_id,))

    def delete(self, job_id: str) -> bool:
        with self._lock:
            return self._conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,)).rowcount > 0

    def counts(self) -> dict[str, float]:
        """Jobs by status, and ``pending_items``: items of queued or running jobs without a result."""
        with self._lock:
            rows = self._conn.execute("SELECT status, COUNT(*), SUM(total - done) FROM jobs GROUP BY status").fetchall()
        out: dict[str, float] = {s: 0 for s in ("queued", "running", "done", "failed", "cancelled")}
        pending = 0
        for status, n, left in rows:
            out[status] = n
            if status in ACTIVE:
                pending += left or 0
        out["pending_items"] = pending
        return out

    # --- items and results --------------------------------------------------------------------------

    def unfinished(self, job_id: str, after: int = -1, page: int = 64) -> list[tuple[int, Example]]:
        """Up to ``page`` items with no result and index > ``after``, in index order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT i.idx, i.example FROM items i LEFT JOIN results r ON r.job_id = i.job_id AND r.idx = i.idx "
                "WHERE i.job_id = ? AND i.idx > ? AND r.idx IS NULL ORDER BY i.idx LIMIT ?",
                (job_id, after, page)).fetchall()
        return [(r[0], Example.model_validate_json(r[1])) for r in rows]

    def add_result(self, job_id: str, index: int, item_id: str, attempt: int, *,
                   report: Report | None = None, report_json: str | None = None,
                   status: int = 200, error: str | None = None) -> bool:
        """Record one finished item and update the job's counts in one transaction. False when the job is
        gone (deleted meanwhile) or the item already had a result."""
        usage = report.usage if report is not None else Usage()
        scored = report is not None and report.score is not None
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                inserted = self._conn.execute(
                    "INSERT OR IGNORE INTO results (job_id, idx, item_id, status, score, label, findings, report, "
                    "error, attempt, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job_id, index, item_id, status, report.score if report else None,
                     report.label if report else None, len(report.findings) if report else 0,
                     report_json, error, attempt, time.time())).rowcount
                if inserted:
                    self._conn.execute(
                        "UPDATE jobs SET done = done + 1, scored = scored + ?, unscored = unscored + ?, "
                        "errors = errors + ?, score_sum = score_sum + ?, calls = calls + ?, "
                        "prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, "
                        "cache_hits = cache_hits + ? WHERE id = ?",
                        (int(scored), int(report is not None and not scored), int(report is None),
                         report.score if scored else 0.0, usage.calls, usage.prompt_tokens,
                         usage.completion_tokens, usage.cache_hits, job_id))
                self._conn.execute("COMMIT")
            except sqlite3.IntegrityError:  # the job was deleted while the item ran
                self._conn.execute("ROLLBACK")
                return False
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return bool(inserted)

    def results(self, job_id: str, after: int = -1, page: int = 200) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(
                "SELECT idx, item_id, status, report, error FROM results WHERE job_id = ? AND idx > ? "
                "ORDER BY idx LIMIT ?", (job_id, after, page)).fetchall()

    def iter_results(self, job_id: str, page: int = 200) -> Iterator[sqlite3.Row]:
        after = -1
        while rows := self.results(job_id, after, page):
            yield from rows
            after = rows[-1]["idx"]

    def summaries(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        """Index, id, score, label, findings count and status of up to ``limit`` items (the job page)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT i.idx, r.item_id, r.status, r.score, r.label, r.findings, r.error, r.report IS NOT NULL AS has, "
                "json_extract(r.report, '$.unscored_reason') AS reason, json_extract(i.example, '$.id') AS eid "
                "FROM items i LEFT JOIN results r ON r.job_id = i.job_id AND r.idx = i.idx "
                "WHERE i.job_id = ? ORDER BY i.idx LIMIT ?", (job_id, limit)).fetchall()
        return [dict(r) for r in rows]

    def item(self, job_id: str, index: int) -> tuple[Example, sqlite3.Row | None] | None:
        with self._lock:
            row = self._conn.execute("SELECT example FROM items WHERE job_id = ? AND idx = ?", (job_id, index)).fetchone()
            if row is None:
                return None
            result = self._conn.execute(
                "SELECT idx, item_id, status, report, error FROM results WHERE job_id = ? AND idx = ?",
                (job_id, index)).fetchone()
        return Example.model_validate_json(row[0]), result


def _job(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    data["options"] = json.loads(data["options"])
    data["usage"] = Usage(calls=data.pop("calls"), prompt_tokens=data.pop("prompt_tokens"),
                          completion_tokens=data.pop("completion_tokens"), cache_hits=data.pop("cache_hits"))
    score_sum = data.pop("score_sum")
    data["mean_score"] = score_sum / data["scored"] if data["scored"] else None
    data["progress"] = data["done"] / data["total"] if data["total"] else 1.0
    return data


def result_line(index: int, item_id: str | None, status: int, report_json: str | None, error: str | None) -> bytes:
    """One NDJSON line of an item result (the Report JSON is spliced in, not parsed and re-encoded)."""
    head = f'{{"index":{index},"id":{json.dumps(item_id, ensure_ascii=False)},"status":{status},'
    if report_json is not None:
        return f'{head}"report":{report_json},"error":null}}\n'.encode()
    return f'{head}"report":null,"error":{json.dumps(error, ensure_ascii=False)}}}\n'.encode()


class CheckFailed(Exception):
    """A check that ended without a report; ``status`` is the HTTP status it answers with (422, 504, ...)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# (method, example, job id) -> (report, its JSON); raises CheckFailed
ItemRunner = Callable[[Any, Example, str], Awaitable[tuple[Report, str]]]


class JobRunner:
    """Runs queued jobs on one worker loop (:meth:`main`), at most ``max_running`` at a time, each with at
    most ``concurrency`` items in flight. Wake it with :meth:`notify` after a submission."""

    def __init__(self, store: JobStore, *, build_method: Callable[[str, dict[str, Any]], Awaitable[Any]],
                 run_item: ItemRunner, max_running: int, concurrency: int,
                 on_item: Callable[[bool], None] | None = None):
        self.store = store
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

    async def _one(self, job_id: str, attempt: int, method: Any, index: int, example: Example) -> None:
        try:
            report, report_json = await self.run_item(method, example, job_id)
        except CheckFailed as exc:
            await asyncio.to_thread(self.store.add_result, job_id, index, example.id, attempt,
                                    status=exc.status, error=str(exc))
            ok = False
        else:
            await asyncio.to_thread(self.store.add_result, job_id, index, example.id, attempt,
                                    report=report, report_json=report_json)
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
