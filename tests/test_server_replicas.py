"""Jobs shared by replicas through Redis (``--jobs-url``): the store's exactly-once writes, leases and takeovers
against a real ``redis-server`` on a loopback port, the service running a job on it in process, and two real
server processes where one is killed with SIGKILL mid-job and the other finishes the job.

Skipped with the reason when ``redis-server`` is not on PATH or the ``redis`` client is missing.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from halluscope.records import Example, Report

REPO = Path(__file__).resolve().parents[1]
GEVAL_REPLY = '{"reason": "ok", "score": 4}'
SOURCE = "The council met on Monday. It approved the budget of $3 million for the new ferry."


@pytest.fixture
def jobs_url(redis_url):
    """A URL with a prefix of its own: each test sees only its jobs."""
    return f"{redis_url}?prefix=test:{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def store(jobs_url):
    from halluscope.server.jobs.redis_store import RedisJobStore

    s = RedisJobStore(jobs_url)
    yield s
    s.clear()
    s.close()


def examples(n: int) -> list[Example]:
    return [Example(id=f"e{i}", source=SOURCE, target=f"The council met on day {i}.") for i in range(n)]


# --- the store ------------------------------------------------------------------------------------------


def test_racing_replicas_write_each_result_once(store):
    """The same item claimed twice (its first owner stalled past the lease) and finished by both: one result,
    counted once; the job is done exactly when every item has its one result."""
    job = store.create("geval", {"k": 1}, examples(3), name="race")
    first = store.claim(job, "a", 3, lease_s=60)
    assert [c.index for c in first] == [0, 1, 2] and all(c.attempt == 1 and not c.takeover for c in first)
    assert store.claim(job, "b", 3, lease_s=60) == []  # nothing new, nothing expired
    assert store.release(job, "a", [first[0].entry_id], lease_s=60) == 1  # as if a's lease had expired
    taken = store.claim(job, "b", 3, lease_s=60)
    assert [(c.index, c.attempt, c.takeover) for c in taken] == [(0, 2, True)]
    assert store.renew(job, "a", [first[0].entry_id, first[1].entry_id]) == [first[0].entry_id]  # a lost item 0

    outcomes = []
    barrier = threading.Barrier(2)

    def finish(claim, score):
        barrier.wait()
        outcomes.append(
            store.complete(
                job, claim, report=Report(method="geval", score=score), report_json=json.dumps({"score": score})
            )
        )

    threads = [
        threading.Thread(target=finish, args=(first[0], 0.25)),
        threading.Thread(target=finish, args=(taken[0], 0.75)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == [0, 1]
    info = store.get(job)
    assert info["done"] == 1 and info["scored"] == 1 and info["status"] == "running" and info["attempts"] == 2
    assert store.complete(job, first[1], status=504, error="slow") == 1
    assert store.complete(job, first[2], report=Report(method="geval", score=1.0), report_json="{}") == 2
    info = store.get(job)
    assert (info["status"], info["done"], info["scored"], info["errors"]) == ("done", 3, 2, 1)
    assert [r["idx"] for r in store.results(job)] == [0, 1, 2]
    assert store.counts() == {"queued": 0, "running": 0, "done": 1, "failed": 0, "cancelled": 0, "pending_items": 0}
    assert store.complete(job, first[0], status=500, error="late") == 0  # after the end: nothing changes
    assert store.get(job)["done"] == 3


def test_store_reads_match_the_sqlite_store(store):
    job = store.create("geval", {}, examples(4), dataset="final:dev")
    claims = store.claim(job, "a", 2, lease_s=60)
    store.complete(job, claims[1], report=Report(method="geval", score=0.5, label="consistent"), report_json='{"a":1}')
    assert store.results(job) == [
        {"idx": 1, "item_id": "e1", "status": 200, "report": '{"a":1}', "error": None, "attempt": 1}
    ]
    assert store.results(job, after=1) == []
    example, row = store.item(job, 1)
    assert example.id == "e1" and row["report"] == '{"a":1}'
    assert store.item(job, 0)[1] is None and store.item(job, 9) is None
    sums = store.summaries(job, 3)
    assert [s["eid"] for s in sums] == ["e0", "e1", "e2"]
    assert sums[1] | {} == {
        "idx": 1,
        "item_id": "e1",
        "status": 200,
        "score": 0.5,
        "label": "consistent",
        "findings": 0,
        "error": None,
        "has": 1,
        "reason": None,
        "eid": "e1",
    }
    assert sums[0]["status"] is None
    counts = store.counts()
    assert counts["running"] == 1 and counts["pending_items"] == 3
    assert store.queue_stats()[job] == {"total": 4, "done": 1, "in_flight": 1, "claims": 2, "takeovers": 0}
    info = store.get(job)
    assert info["dataset"] == "final:dev" and info["name"] is None and info["mean_score"] == 0.5
    assert [j["id"] for j in store.list(10, "running")] == [job] and store.list(10, "done") == []
    assert store.active_count() == 1
    assert store.delete(job) and store.get(job) is None and not store.delete(job)
    assert store.complete(job, claims[0], status=504, error="x") == -1  # deleted meanwhile: nothing resurrected
    assert store.claim(job, "a", 2, lease_s=60) == [] and store.active_count() == 0


def test_failed_job_leaves_the_queue(store):
    job = store.create("geval", {}, examples(2))
    assert store.finish(job, "failed", "cannot build the method")
    assert not store.finish(job, "failed", "again")
    info = store.get(job)
    assert info["status"] == "failed" and info["error"] == "cannot build the method"
    assert store.claim(job, "a", 2, lease_s=60) == [] and store.counts()["failed"] == 1


def test_unreachable_redis_is_a_clear_error():
    from halluscope.server.jobs.base import JobStoreUnavailable
    from halluscope.server.jobs.redis_store import RedisJobStore, parse_jobs_url
    from tests.loadtest import free_port

    if importlib.util.find_spec("redis") is None:
        pytest.skip("the redis client is not installed: pip install -e '.[redis]'")
    with pytest.raises(JobStoreUnavailable, match="cannot reach the jobs Redis"):
        RedisJobStore(f"redis://:pw@127.0.0.1:{free_port()}/0", socket_timeout_s=1)
    with pytest.raises(ValueError, match="not a Redis URL"):
        parse_jobs_url("http://example.org")
    assert parse_jobs_url("redis://h:1/2?prefix=t:") == ("redis://h:1/2", "t:")


class _Held:
    """A QueueRunner on a loop of its own whose items run until ``release`` is set."""

    def __init__(self, store, consumer: str, lease_s: float, concurrency: int = 2):
        import asyncio

        from halluscope.server.jobs.queue_runner import QueueRunner

        self.release = threading.Event()
        self.started = 0

        async def run_item(method, example, job_id):
            self.started += 1
            while not self.release.is_set():
                await asyncio.sleep(0.01)
            return Report(method="geval", score=1.0), '{"score": 1.0}'

        async def build_method(name, options):
            return name

        self.runner = QueueRunner(
            store,
            build_method=build_method,
            run_item=run_item,
            max_running=1,
            concurrency=concurrency,
            lease_s=lease_s,
            consumer=consumer,
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)  # as a worker loop of the service
        self.thread.start()
        self.main = asyncio.run_coroutine_threadsafe(self.runner.main(), self.loop)

    def stop(self, grace_s: float = 5.0) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.runner.stop(grace_s), self.loop).result(60)
        self.main.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def _until(what: str, ready, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_slow_item_keeps_its_lease_while_it_runs(store):
    """Items running for several leases are renewed, so another consumer finds nothing to take over; they finish
    with one attempt. (Waiting out the leases is the point here; nothing is asserted about speed.)"""
    lease_s = 1.5  # renewed every 0.375 s from a thread: only a stall of over a second could lose it
    job = store.create("geval", {}, examples(2))
    held = _Held(store, "slow", lease_s)
    try:
        _until("both items claimed", lambda: store.queue_stats()[job]["in_flight"] == 2 and held.started == 2)
        deadline = time.monotonic() + 3 * lease_s
        while time.monotonic() < deadline:
            assert store.claim(job, "other", 2, lease_s=lease_s) == []
            time.sleep(lease_s / 8)
        held.release.set()
        _until("the job done", lambda: store.get(job)["status"] == "done")
    finally:
        held.release.set()
        held.stop()
    info = store.get(job)
    assert info["attempts"] == 1 and info["done"] == 2, info
    assert [r["attempt"] for r in store.results(job)] == [1, 1]


def test_a_draining_replica_hands_its_items_back_at_once(store):
    """SIGTERM-like stop with items that cannot finish within the grace: they are handed back, so another
    consumer takes them over at once, without waiting for the (long) lease."""
    job = store.create("geval", {}, examples(2))
    held = _Held(store, "leaving", lease_s=600)
    try:
        _until("both items claimed", lambda: held.started == 2)
        assert store.claim(job, "other", 2, lease_s=600) == []
        held.stop(grace_s=0.05)
    finally:
        held.release.set()
    taken = store.claim(job, "other", 2, lease_s=600)
    assert sorted((c.index, c.takeover, c.attempt) for c in taken) == [(0, True, 2), (1, True, 2)]
    assert store.get(job)["attempts"] == 2


# --- the service, in process ----------------------------------------------------------------------------


def test_service_runs_a_job_from_redis_and_answers_every_route(jobs_url):
    from fastapi.testclient import TestClient

    from halluscope.config import Config
    from halluscope.llm import LLM, FakeModel
    from halluscope.server import ServerSettings, create_app

    settings = ServerSettings(jobs_url=jobs_url, job_lease_s=5.0, job_concurrency=3)
    app = create_app(Config(cache=False), settings, llm=LLM(FakeModel(default=GEVAL_REPLY)))
    items = [{"id": f"p{i}", "source": SOURCE, "target": f"The council met on day {i}."} for i in range(7)]
    with TestClient(app) as client:
        created = client.post("/jobs", json={"method": "geval", "items": items, "name": "shared"})
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        deadline = time.monotonic() + 60
        while (job := client.get(f"/jobs/{job_id}").json())["status"] != "done":
            assert time.monotonic() < deadline, job
            time.sleep(0.05)
        assert (job["done"], job["scored"], job["attempts"], job["name"]) == (7, 7, 1, "shared")
        lines = [json.loads(line) for line in client.get(f"/jobs/{job_id}/results").text.splitlines()]
        assert [line["index"] for line in lines] == list(range(7)) and lines[3]["id"] == "p3"
        assert client.get(f"/jobs/{job_id}/items/2").json()["report"]["score"] is not None
        assert "p6" in client.get(f"/jobs/{job_id}/report").text
        assert [j["id"] for j in client.get("/jobs").json()["jobs"]] == [job_id]
        metrics = client.get("/metrics").text
        assert 'halluscope_job_queue_items_total{event="done"} 7.0' in metrics
        assert 'halluscope_job_queue_items_total{event="claimed"} 7.0' in metrics
        assert "halluscope_replica_info{replica=" in metrics
        assert 'halluscope_jobs{status="done"} 1.0' in metrics
        assert client.delete(f"/jobs/{job_id}").status_code == 200
        assert client.get(f"/jobs/{job_id}").status_code == 404


def test_redis_away_answers_503_and_the_scrape_still_works(jobs_url):
    """With the jobs' Redis unreachable (its client pointed at a closed port after the start), the job routes
    answer 503 with Retry-After instead of 500, and /health and /metrics still answer."""
    import redis
    from fastapi.testclient import TestClient
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from halluscope.config import Config
    from halluscope.llm import LLM, FakeModel
    from halluscope.server import ServerSettings, create_app
    from tests.loadtest import free_port

    app = create_app(
        Config(cache=False), ServerSettings(jobs_url=jobs_url, job_lease_s=5.0), llm=LLM(FakeModel(default=GEVAL_REPLY))
    )
    with TestClient(app) as client:
        store = app.state.service.store
        live = store._client
        store._client = redis.Redis(
            host="127.0.0.1", port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
        )  # refused at once, not retried
        try:
            answer = client.get("/jobs")
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "2", answer.text
            assert "job store is unavailable" in answer.json()["detail"]
            assert client.get(f"/jobs/{'0' * 32}").status_code == 503
            assert client.get("/health").status_code == 200
            metrics = client.get("/metrics")
            assert metrics.status_code == 200 and 'halluscope_queue_depth{queue="requests"}' in metrics.text
        finally:
            store._client = live
        assert client.get("/jobs").status_code == 200


# --- two server processes, one killed mid-job -----------------------------------------------------------


def _metric(text: str, name: str, labels: str = "") -> float:
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.server
def test_replica_killed_mid_job_the_other_finishes_it(redis_url, tmp_path):
    """A 100-item geval job (one LLM request per item) on two replicas of 4 items at a time. The stub answers
    40 requests and holds the next ones, so both replicas stop with 4 items each in flight (the order is forced
    by the hold, not by timing). The first replica is killed with SIGKILL; then the stub answers everything.
    The second replica finishes the job, taking over the killed one's 4 items once their lease expires: 100
    results, none twice, and only those 4 prompts reach the model a second time."""
    import httpx

    from tests import loadtest

    concurrency, answered_first, lease_s = 4, 40, 4
    prefix = f"test:{uuid.uuid4().hex[:8]}:"
    env = {"HALLUSCOPE_CACHE_URL": f"{redis_url}?prefix={prefix}llm:"}  # the response cache shared too
    args = (
        "--jobs-url",
        f"{redis_url}?prefix={prefix}jobs:",
        "--job-lease",
        str(lease_s),
        "--job-concurrency",
        str(concurrency),
    )
    wait_s = 180  # only a bound on a broken run: every step below waits for an event
    with (
        loadtest.start_stub(tmp_path / "stub", latency_ms=5, hold_after=answered_first) as stub,
        loadtest.start_server(tmp_path / "a", *args, stub=stub, env=env) as first,
        loadtest.start_server(tmp_path / "b", *args, stub=stub, env=env) as second,
    ):

        def stats() -> dict:
            return httpx.get(stub.url + "/stats", timeout=30).json()

        def wait(what: str, ready) -> None:
            deadline = time.monotonic() + wait_s
            while not ready():
                assert time.monotonic() < deadline, f"{what}: {stats()}"
                time.sleep(0.05)

        items = [
            {"id": f"item-{i}", "source": SOURCE, "target": f"The ferry costs {i + 1} million."} for i in range(100)
        ]
        job = httpx.post(first.url + "/jobs", json={"method": "geval", "items": items}, timeout=60)
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]

        # both replicas full (8 requests held), the 40 answered items all stored: mid-job, nothing moving
        wait("both replicas saturated", lambda: stats()["held"] == 2 * concurrency)
        wait(
            "the answered items stored",
            lambda: httpx.get(f"{second.url}/jobs/{job_id}", timeout=30).json()["done"] == answered_first,
        )
        before = httpx.get(f"{first.url}/jobs/{job_id}", timeout=30).json()
        assert before["status"] == "running" and before["done"] == answered_first
        assert stats()["received"] == answered_first + 2 * concurrency

        first.kill9()
        wait("the killed replica's held requests dropped", lambda: stats()["held"] == concurrency)
        httpx.post(stub.url + "/release?answer=all", timeout=30)

        deadline = time.monotonic() + wait_s
        while (info := httpx.get(f"{second.url}/jobs/{job_id}", timeout=30).json())["status"] != "done":
            assert time.monotonic() < deadline and info["status"] == "running", info
            time.sleep(0.1)
        assert (info["done"], info["total"], info["scored"], info["errors"]) == (100, 100, 100, 0), info
        assert info["attempts"] == 2, info  # started once, resumed once on the other replica

        lines = [json.loads(x) for x in httpx.get(f"{second.url}/jobs/{job_id}/results", timeout=60).text.splitlines()]
        indexes = [line["index"] for line in lines]
        assert sorted(indexes) == list(range(100)), "an item lost or recorded twice"
        assert all(line["status"] == 200 and line["report"]["score"] is not None for line in lines)
        assert sum(1 for line in lines if line["id"] == f"item-{line['index']}") == 100

        s = stats()
        assert s["distinct"] == 100 and s["repeated_answered"] == 0, s  # no answered prompt asked again
        assert s["received"] <= 100 + concurrency, s  # only the killed replica's in-flight items asked again
        assert s["received"] == 100 + concurrency, s  # ... and each of them exactly once

        page = httpx.get(f"{second.url}/jobs/{job_id}/report", timeout=60)
        assert page.status_code == 200 and "item-99" in page.text
        metrics = httpx.get(second.url + "/metrics", timeout=30).text
        assert _metric(metrics, "halluscope_job_queue_items_total", '{event="retried"}') == concurrency
        assert _metric(metrics, "halluscope_job_queue_items_total", '{event="duplicate"}') == 0


# --- the compose file -----------------------------------------------------------------------------------


def test_compose_file_parses_with_two_replicas_redis_and_a_secret_token():
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed")
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert {"redis", "halluscope-1", "halluscope-2"} <= set(services)
    for name in ("halluscope-1", "halluscope-2"):
        svc = services[name]
        env = svc["environment"]
        assert env["HALLUSCOPE_SERVER_JOBS_URL"].startswith("redis://redis:6379/")
        assert env["HALLUSCOPE_CACHE_URL"].startswith("redis://redis:6379/")
        assert "HALLUSCOPE_SERVER_TOKEN" not in env and "halluscope_token" in svc["secrets"]
        assert "/run/secrets/halluscope_token" in " ".join(svc["entrypoint"])  # read from the secret's file
        assert svc["build"]["args"]["EXTRAS"] == "server,redis" and (REPO / svc["build"]["dockerfile"]).is_file()
        assert "/health" in " ".join(svc["healthcheck"]["test"])
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "halluscope_token" in compose["secrets"]


# --- the command line -----------------------------------------------------------------------------------


@pytest.fixture
def served(monkeypatch):
    """Run `halluscope serve` up to where it would start uvicorn; keep the settings it would have used."""
    import uvicorn

    import halluscope.server as server

    seen: dict = {}
    monkeypatch.setattr(server, "create_app", lambda config, settings: seen.update(settings=settings) or "app")
    monkeypatch.setattr(uvicorn, "run", lambda app_obj, **kwargs: None)
    for key in list(__import__("os").environ):
        if key.startswith("HALLUSCOPE_"):
            monkeypatch.delenv(key)
    return seen


def test_serve_takes_the_jobs_url_and_lease_from_flags_or_the_environment(served):
    from typer.testing import CliRunner

    from halluscope.cli.main import app

    env = {
        "HALLUSCOPE_SERVER_JOBS_URL": "redis://redis:6379/0?prefix=a:",
        "HALLUSCOPE_SERVER_JOB_LEASE": "12",
        "HALLUSCOPE_SERVER_JOBS_DB": "/data/jobs.sqlite",
    }  # the container image sets the SQLite path
    result = CliRunner().invoke(app, ["serve"], env=env)
    assert result.exit_code == 0, result.output
    assert served["settings"].jobs_url == "redis://redis:6379/0?prefix=a:" and served["settings"].job_lease_s == 12.0
    result = CliRunner().invoke(app, ["serve", "--jobs-url", "http://redis:6379"])
    assert result.exit_code == 2 and "not a Redis URL" in result.output
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0 and served["settings"].jobs_url is None and served["settings"].job_lease_s == 30.0
