"""The jobs database: schema, one exclusive lock per database, jobs, their items and their results (see the
package docstring)."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluscope.records import Example, Report, Usage
from halluscope.server.jobs.base import DUPLICATE, GONE, JOB_DONE, WRITTEN, HeldItem
from halluscope.sqlite_file import connect_wal

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
  tries INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job_id, idx));
CREATE TABLE IF NOT EXISTS results (
  job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, idx INTEGER NOT NULL, item_id TEXT,
  status INTEGER NOT NULL, score REAL, label TEXT, findings INTEGER NOT NULL DEFAULT 0,
  report TEXT, error TEXT, attempt INTEGER NOT NULL, finished REAL NOT NULL,
  PRIMARY KEY (job_id, idx));
"""

_JOB_COLUMNS = (
    "id, status, name, method, options, dataset, total, created, started, finished, attempts, error, "
    "done, scored, unscored, errors, score_sum, calls, prompt_tokens, completion_tokens, cache_hits"
)


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
            raise StoreLocked(
                f"the jobs database {self.path} is in use by another halluscope server "
                "(one server per database: give this one --jobs-db)"
            ) from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()
        self._lock = threading.Lock()
        self._conn = connect_wal(str(self.path))  # WAL + NORMAL: a killed process loses nothing committed
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(_SCHEMA)
        if "tries" not in {r[1] for r in self._conn.execute("PRAGMA table_info(items)")}:  # a file from before
            self._conn.execute("ALTER TABLE items ADD COLUMN tries INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()

    # --- jobs ---------------------------------------------------------------------------------------

    def create(
        self,
        method: str,
        options: dict[str, Any],
        examples: list[Example],
        *,
        dataset: str | None = None,
        name: str | None = None,
    ) -> str:
        job_id = uuid.uuid4().hex
        rows = ((job_id, i, ex.model_dump_json()) for i, ex in enumerate(examples))
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT INTO jobs (id, status, name, method, options, dataset, total, created) "
                    "VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
                    (job_id, name, method, json.dumps(options, sort_keys=True), dataset, len(examples), time.time()),
                )
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

    def active_ids(self) -> list[str]:
        """Queued or running jobs, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY created"
            ).fetchall()
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
                "WHERE id = ? AND status = 'queued' RETURNING attempts",
                (time.time(), job_id),
            ).fetchone()
        return row[0] if row is not None else 0

    def finish(self, job_id: str, status: str, error: str | None = None) -> bool:
        """End a queued or running job (``failed`` with its reason); False when it was not active."""
        with self._lock:
            return (
                self._conn.execute(
                    "UPDATE jobs SET status = ?, finished = ?, error = ? "
                    "WHERE id = ? AND status IN ('queued', 'running')",
                    (status, time.time(), error, job_id),
                ).rowcount
                > 0
            )

    def set_queued(self, job_id: str) -> bool:
        """A running job back to the queue (a stop); False when it was not running."""
        with self._lock:
            return (
                self._conn.execute(
                    "UPDATE jobs SET status = 'queued' WHERE id = ? AND status = 'running'", (job_id,)
                ).rowcount
                > 0
            )

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

    def unfinished(self, job_id: str, after: int = -1, page: int = 64) -> list[tuple[int, Example | str]]:
        """Up to ``page`` items with no result and index > ``after``, in index order; an item whose stored data
        cannot be read comes as the reason instead of an Example (the runner records it unscored)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT i.idx, i.example FROM items i LEFT JOIN results r ON r.job_id = i.job_id AND r.idx = i.idx "
                "WHERE i.job_id = ? AND i.idx > ? AND r.idx IS NULL ORDER BY i.idx LIMIT ?",
                (job_id, after, page),
            ).fetchall()
        return [(r[0], _read_example(r[1])) for r in rows]

    def start_item(self, job_id: str, index: int) -> int:
        """Count one start of the item; returns how many times it was started, this one included (an item that
        keeps ending its server is then recorded unscored instead of run again)."""
        with self._lock:
            row = self._conn.execute(
                "UPDATE items SET tries = tries + 1 WHERE job_id = ? AND idx = ? RETURNING tries", (job_id, index)
            ).fetchone()
        return row[0] if row is not None else 0

    def add_result(
        self,
        job_id: str,
        index: int,
        item_id: str | None,
        attempt: int,
        *,
        report: Report | None = None,
        report_json: str | None = None,
        status: int = 200,
        error: str | None = None,
    ) -> int:
        """Record one finished item and update the job's counts in one transaction; the job's last result also
        sets it ``done``. Returns :data:`~halluscope.server.jobs.base.GONE` (the job was deleted meanwhile),
        ``DUPLICATE`` (the item already had a result), ``WRITTEN`` or ``JOB_DONE``."""
        usage = report.usage if report is not None else Usage()
        scored = report is not None and report.score is not None
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                inserted = self._conn.execute(
                    "INSERT OR IGNORE INTO results (job_id, idx, item_id, status, score, label, findings, report, "
                    "error, attempt, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_id,
                        index,
                        item_id,
                        status,
                        report.score if report else None,
                        report.label if report else None,
                        len(report.findings) if report else 0,
                        report_json,
                        error,
                        attempt,
                        time.time(),
                    ),
                ).rowcount
                if inserted:
                    self._conn.execute(
                        "UPDATE jobs SET done = done + 1, scored = scored + ?, unscored = unscored + ?, "
                        "errors = errors + ?, score_sum = score_sum + ?, calls = calls + ?, "
                        "prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, "
                        "cache_hits = cache_hits + ? WHERE id = ?",
                        (
                            int(scored),
                            int(report is not None and not scored),
                            int(report is None),
                            report.score if scored else 0.0,
                            usage.calls,
                            usage.prompt_tokens,
                            usage.completion_tokens,
                            usage.cache_hits,
                            job_id,
                        ),
                    )
                    ended = self._conn.execute(
                        "UPDATE jobs SET status = 'done', finished = ?, error = NULL WHERE id = ? AND done >= total "
                        "AND status IN ('queued', 'running')",
                        (time.time(), job_id),
                    ).rowcount
                self._conn.execute("COMMIT")
            except sqlite3.IntegrityError:  # the job was deleted while the item ran
                self._conn.execute("ROLLBACK")
                return GONE
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        if not inserted:
            return DUPLICATE
        return JOB_DONE if ended else WRITTEN

    def results(self, job_id: str, after: int = -1, page: int = 200) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(
                "SELECT idx, item_id, status, report, error FROM results WHERE job_id = ? AND idx > ? "
                "ORDER BY idx LIMIT ?",
                (job_id, after, page),
            ).fetchall()

    def iter_results(self, job_id: str, page: int = 200) -> Iterator[sqlite3.Row]:
        after = -1
        while rows := self.results(job_id, after, page):
            yield from rows
            after = rows[-1]["idx"]

    def summaries(self, job_id: str, limit: int) -> list[dict[str, Any]]:
        """Index, id, score, label, findings count and status of up to ``limit`` items (the job page)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT i.idx, r.item_id, r.status, r.score, r.label, r.findings, r.error, r.report IS NOT NULL AS "
                "has, "
                "json_extract(r.report, '$.unscored_reason') AS reason, "
                "CASE WHEN json_valid(i.example) THEN json_extract(i.example, '$.id') END AS eid "
                "FROM items i LEFT JOIN results r ON r.job_id = i.job_id AND r.idx = i.idx "
                "WHERE i.job_id = ? ORDER BY i.idx LIMIT ?",
                (job_id, limit),
            ).fetchall()
        return [dict(r) for r in rows]

    def item(self, job_id: str, index: int) -> tuple[Example | None, sqlite3.Row | None] | None:
        """The item (None when its stored data cannot be read) and its result; None when there is no such item."""
        with self._lock:
            row = self._conn.execute(
                "SELECT example FROM items WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            if row is None:
                return None
            result = self._conn.execute(
                "SELECT idx, item_id, status, report, error FROM results WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
        example = _read_example(row[0])
        return (example if isinstance(example, Example) else None), result


@dataclass(frozen=True)
class Started:
    """An item of a SQLite job as the loop starts it (a :class:`~halluscope.server.jobs.base.HeldItem`)."""

    index: int
    example: Example | None
    unreadable: str | None
    attempt: int
    takeover: bool = False


@dataclass
class _Run:
    """A job this server is running: its attempt, the last index handed out, the indexes still running."""

    attempt: int
    after: int = -1
    held: set[int] = field(default_factory=set)


class SqliteQueue:
    """The items of a :class:`JobStore` as the job loop claims them (a :class:`~halluscope.server.jobs.base.ItemQueue`).

    One server per database, so a claim needs no lease: each running job is paged through in index order from
    a cursor kept here; its first claim sets it ``running`` and counts the attempt, each item's start is
    counted in the database (``tries``, survives a ``kill -9``). On stop the job goes back to ``queued``; on
    start every job left ``running`` does, and runs its items without a result."""

    lease_s: float | None = None
    too_often = (
        "item {index} was started {times} times without a result (each run ended the server or was stopped; "
        "the limit is {limit})"
    )

    def __init__(self, store: JobStore, page: int = 64):
        self.store = store
        self.page = page
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    def resume(self) -> int:
        with self._lock:
            self._runs.clear()
        return self.store.requeue_interrupted()

    def active_ids(self) -> list[str]:
        ids = self.store.active_ids()
        with self._lock:
            for gone in set(self._runs) - set(ids):  # finished or deleted
                del self._runs[gone]
        return ids

    def get(self, job_id: str) -> dict[str, Any] | None:
        return self.store.get(job_id)

    def claim(self, job_id: str, count: int) -> list[HeldItem]:
        with self._lock:
            run = self._runs.get(job_id)
            if run is None:
                attempt = self.store.mark_running(job_id)
                if not attempt:  # not queued any more (deleted, finished)
                    return []
                run = self._runs[job_id] = _Run(attempt)
            page = self.store.unfinished(job_id, run.after, min(count, self.page))
            if not page:
                if not run.held:  # nothing to hand out, nothing running (a job without items): it is done
                    self.store.finish(job_id, "done")
                return []
            items: list[HeldItem] = []
            for index, example in page:
                if isinstance(example, Example):
                    items.append(Started(index, example, None, self.store.start_item(job_id, index)))
                else:  # its stored data cannot be read: recorded unscored, not started
                    items.append(Started(index, None, example, 0))
                run.held.add(index)
            run.after = page[-1][0]
            return items

    def renew(self, job_id: str, items: list[HeldItem]) -> list[int]:
        return []  # claims do not expire

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
        with self._lock:
            run = self._runs.get(job_id)
            if run is not None:
                run.held.discard(item.index)
        item_id = item.example.id if item.example is not None else None
        attempt = run.attempt if run is not None else 0
        return self.store.add_result(
            job_id, item.index, item_id, attempt, report=report, report_json=report_json, status=status, error=error
        )

    def release(self, job_id: str, items: list[HeldItem]) -> int:
        with self._lock:
            self._runs.pop(job_id, None)
        self.store.set_queued(job_id)
        return len(items)

    def finish(self, job_id: str, status: str, error: str | None = None) -> bool:
        return self.store.finish(job_id, status, error)


def _read_example(raw: str) -> Example | str:
    """The stored item, or the reason it cannot be read (not JSON, not an Example)."""
    try:
        return Example.model_validate_json(raw)
    except ValueError as exc:  # pydantic's ValidationError
        lines = str(exc).splitlines()
        return f"its stored data is not a valid item ({lines[1].strip() if len(lines) > 1 else exc})"


def _job(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    data["options"] = json.loads(data["options"])
    data["usage"] = Usage(
        calls=data.pop("calls"),
        prompt_tokens=data.pop("prompt_tokens"),
        completion_tokens=data.pop("completion_tokens"),
        cache_hits=data.pop("cache_hits"),
    )
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
