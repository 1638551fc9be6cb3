"""The one job loop (``server/jobs/runner.py``) over both stores: the same scenario — a job with one poisoned item,
a job deleted while its items run, a job stopped mid-way and resumed by a new runner over a reopened store — run
against SQLite and against Redis, with the same outcome asserted for each.

Offline: scripted items (no model), a real ``redis-server`` on a loopback port for the Redis run (skipped with the
reason when it is not installed). Every step waits for an event the loop causes (an item started, cancelled or
recorded), never for a guessed time; the timeouts only bound a broken run.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from halluscope.records import Example, Report
from halluscope.server.jobs.runner import Runner

SOURCE = "The council met on Monday. It approved the budget of $3 million for the new ferry."
WAIT_S = 60.0  # a bound on a broken run only


class Journal:
    """What the items did, in order, with a condition to wait on."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, int]] = []
        self.cond = threading.Condition()

    def add(self, what: str, job: str, index: int) -> None:
        with self.cond:
            self.entries.append((what, job, index))
            self.cond.notify_all()

    def poke(self, _: object = None) -> None:
        with self.cond:
            self.cond.notify_all()

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(ready, WAIT_S), f"{what}: {self.entries}"

    def count(self, what: str, job: str) -> int:
        return sum(1 for w, j, _ in self.entries if (w, j) == (what, job))


class Script:
    """Items by their target: ``ok 0.4`` scores 0.4, ``hold`` runs until cancelled, ``gate`` runs until cancelled
    unless the gate is open (the second runner)."""

    def __init__(self, journal: Journal, gate_open: bool):
        self.journal = journal
        self.gate_open = gate_open

    async def build_method(self, name: str, options: dict[str, Any]) -> str:
        return name

    async def run_item(self, method: Any, example: Example, job_id: str) -> tuple[Report, str]:
        job, index = example.id[0], int(example.id[1:])
        self.journal.add("start", job, index)
        try:
            if example.target == "hold" or (example.target == "gate" and not self.gate_open):
                await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            self.journal.add("cancelled", job, index)
            raise
        score = float(example.target.split()[-1]) if example.target.startswith("ok") else 1.0
        report = Report(method=str(method), score=score)
        return report, report.model_dump_json()


class OnItsLoop:
    """A runner on an event loop of its own thread, as on a worker loop of the service."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.main = asyncio.run_coroutine_threadsafe(runner.main(), self.loop)

    def stop(self, grace_s: float) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.stop(grace_s), self.loop).result(WAIT_S)
        self.main.result(WAIT_S)  # the loop returns once stopped
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()


class Backend:
    """Opens the store (again, as after a restart), makes the loop over it and poisons an item."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest):
        self.kind = kind
        self.db = tmp_path / "jobs.sqlite"
        self.url = ""
        self.store: Any = None
        if kind == "redis":
            self.url = f"{request.getfixturevalue('redis_url')}?prefix=loop:{uuid.uuid4().hex[:8]}:"

    def open(self) -> Any:
        if self.kind == "sqlite":
            from halluscope.server.jobs.store import JobStore

            self.store = JobStore(self.db)
        else:
            from halluscope.server.jobs.redis_store import RedisJobStore

            self.store = RedisJobStore(self.url)
        return self.store

    def runner(self, script: Script, journal: Journal, consumer: str) -> Runner:
        common: dict[str, Any] = {
            "build_method": script.build_method,
            "run_item": script.run_item,
            "max_running": 1,
            "concurrency": 2,
            "on_item": journal.poke,
            "max_attempts": 3,
        }
        if self.kind == "sqlite":
            from halluscope.server.jobs.runner import JobRunner

            return JobRunner(self.store, **common)
        from halluscope.server.jobs.queue_runner import QueueRunner

        return QueueRunner(self.store, lease_s=600.0, consumer=consumer, **common)  # a lease never expires here

    def poison(self, job_id: str, index: int) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.db) as conn:
                conn.execute("UPDATE items SET example = 'not json' WHERE job_id = ? AND idx = ?", (job_id, index))
        else:
            self.store._client.hset(self.store._k(job_id, "items"), str(index), "not json")

    def close(self, clear: bool = False) -> None:
        if clear and self.kind == "redis":
            self.store.clear()
        self.store.close()


@pytest.fixture(params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path, request)
    yield b
    if b.store is not None:
        b.close(clear=True)


def items(job: str, targets: list[str]) -> list[Example]:
    return [Example(id=f"{job}{i}", source=SOURCE, target=t) for i, t in enumerate(targets)]


def result_rows(store: Any, job_id: str) -> list[tuple[int, str | None, int, Any]]:
    out = []
    for r in store.iter_results(job_id):
        report = json.loads(r["report"]) if r["report"] is not None else None
        value = report["score"] if report and report["score"] is not None else (report or {}).get("unscored_reason")
        out.append((r["idx"], r["item_id"], r["status"], value))
    return out


def job_counts(store: Any, job_id: str) -> tuple[Any, ...] | None:
    job = store.get(job_id)
    if job is None:
        return None
    return tuple(job[k] for k in ("status", "done", "scored", "unscored", "errors", "attempts", "progress"))


POISON_REASON = "not checked: item 2 could not be read: its stored data is not a valid item (Invalid JSON"

EXPECTED: dict[str, Any] = {
    "A": ("done", 5, 4, 1, 0, 1, 1.0),
    "A results": [
        (0, "A0", 200, 0.0),
        (1, "A1", 200, 0.1),
        (2, None, 200, POISON_REASON),
        (3, "A3", 200, 0.3),
        (4, "A4", 200, 0.4),
    ],
    "B": None,  # deleted while its two items ran: both cancelled, nothing recorded
    "B cancelled": 2,
    "C at the stop": ("queued or running", 0, 0, 0, 0, 1, 0.0),
    "C": ("done", 4, 4, 0, 0, 2, 1.0),
    "C results": [(i, f"C{i}", 200, 1.0) for i in range(4)],
    "runs": {("A", 0): 1, ("A", 1): 1, ("A", 3): 1, ("A", 4): 1, ("B", 0): 1, ("B", 1): 1}
    | {("C", 0): 2, ("C", 1): 2, ("C", 2): 1, ("C", 3): 1},
}


def test_the_same_scenario_gives_the_same_outcome_on_both_stores(backend: Backend) -> None:
    journal = Journal()
    outcome: dict[str, Any] = {}
    store = backend.open()

    # job A: five items, item 2 unreadable in the store — recorded unscored with the reason, never run
    a = store.create("m", {}, items("A", ["ok 0.0", "ok 0.1", "ok 0.2", "ok 0.3", "ok 0.4"]))
    backend.poison(a, 2)
    first = OnItsLoop(backend.runner(Script(journal, gate_open=False), journal, consumer="first"))
    journal.wait("A done", lambda: store.get(a)["status"] == "done")
    outcome["A"], outcome["A results"] = job_counts(store, a), result_rows(store, a)

    # job B runs (A has ended: one job at a time) and is deleted while both its items run
    b = store.create("m", {}, items("B", ["hold", "hold"]))
    first.runner.notify()
    journal.wait("B's items started", lambda: journal.count("start", "B") == 2)
    c = store.create("m", {}, items("C", ["gate"] * 4))  # waits: the one place is B's
    first.runner.notify()
    assert store.delete(b)
    first.runner.cancel(b)
    journal.wait("B's items cancelled", lambda: journal.count("cancelled", "B") == 2)
    outcome["B"], outcome["B cancelled"] = job_counts(store, b), journal.count("cancelled", "B")

    # job C takes the place B left; stopped with two items running: they are cancelled and handed back
    journal.wait("C's first items started", lambda: journal.count("start", "C") == 2)
    first.stop(grace_s=0.0)
    assert journal.count("cancelled", "C") == 2
    at_stop = job_counts(store, c)
    assert at_stop is not None and at_stop[0] in ("queued", "running")  # Redis keeps it running for the others
    outcome["C at the stop"] = ("queued or running", *at_stop[1:])
    order = [(w, j) for w, j, _ in journal.entries]
    assert max(i for i, e in enumerate(order) if e == ("cancelled", "B")) < order.index(("start", "C"))
    backend.close()

    # a new runner over the store opened again (a restart; on Redis another replica) resumes C
    store = backend.open()
    second = OnItsLoop(backend.runner(Script(journal, gate_open=True), journal, consumer="second"))
    try:
        journal.wait("C done", lambda: store.get(c)["status"] == "done")
    finally:
        second.stop(grace_s=1.0)
    outcome["C"], outcome["C results"] = job_counts(store, c), result_rows(store, c)
    outcome["runs"] = dict(Counter((j, i) for w, j, i in journal.entries if w == "start"))

    poisoned = outcome["A results"][2]
    assert isinstance(poisoned[3], str) and poisoned[3].startswith(POISON_REASON), poisoned
    outcome["A results"][2] = (*poisoned[:3], POISON_REASON)
    assert outcome == EXPECTED
