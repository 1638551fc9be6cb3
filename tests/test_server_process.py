"""Load and fault tests against real server processes on 127.0.0.1 (a stub model endpoint behind them).
Light versions of ``benchmarks/service_load.py``: bounded in count and time (about half a minute)."""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("uvicorn", reason="server extra not installed: pip install 'halluscope[server]'")
if not sys.platform.startswith("linux"):
    pytest.skip("memory and open files are read from /proc (Linux)", allow_module_level=True)

from tests import loadtest

TOKEN = "s3cret"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("service")


@pytest.fixture(scope="module")
def stub(home):
    with loadtest.start_stub(home / "stub", latency_ms=20) as proc:
        yield proc


@pytest.fixture(scope="module")
def server(home, stub):
    with loadtest.start_server(home / "server", "--max-body-mb", "8", stub=stub, token=TOKEN) as proc:
        yield proc


def test_huge_bodies_are_refused_before_they_are_read(server):
    out = loadtest.huge_body(server, TOKEN, declared=300_000_000, send_up_to=32 * 2**20)
    statuses = [a["status"] for a in out["answers"]]
    assert statuses == [401, 413, 413], out
    for answer in out["answers"]:  # answered before the body was read (no wall-clock bound: the bytes prove it)
        assert answer["sent_bytes"] < 32 * 2**20, out  # the client was stopped long before 300 MB
    assert out["rss_after_mb"] - out["rss_before_mb"] < 30, out
    assert out["peak_rss_mb"] - out["rss_before_mb"] < 40, out


def test_distinct_options_keep_memory_and_files_bounded(server):
    out = loadtest.distinct_options(server, TOKEN, n=300, concurrency=16)
    assert out["statuses"] == {200: 300}, out
    assert out["method_cache_size"] == 32, out
    assert out["rss_after_mb"] - out["rss_before_mb"] < 40, out
    # at most the LLM connection pools (8 per worker loop) and the client's 16 connections: not one per option set
    assert out["open_files_after"] - out["open_files_before"] < 64, out


def test_200_concurrent_requests_are_all_answered(server):
    out = loadtest.concurrent_checks(server, TOKEN, n=200)
    assert out["statuses"] == {200: 200}, out


def _metric_sum(text: str, name: str) -> float:
    """The sum of a Prometheus metric's samples (all labels) in an exposition text."""
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def test_200_concurrent_requests_over_small_limits_are_answered_or_refused(home):
    """4 slots and 16 queue places: with every model request held by the stub until all 200 requests are
    admitted or refused (read from the server's metrics), exactly 20 are answered and 180 refused with 429,
    whatever the machine's speed."""
    args = ("--max-in-flight", "4", "--max-queue", "16", "--queue-timeout", "300")
    with (
        loadtest.start_stub(home / "held", latency_ms=0, hold_after=0) as held,
        loadtest.start_server(home / "small", *args, stub=held) as small,
        ThreadPoolExecutor(1) as pool,
    ):
        running = pool.submit(loadtest.concurrent_checks, small, None, 200)

        def accounted() -> float:  # requests holding a slot, waiting for one, or refused
            text = httpx.get(small.url + "/metrics", timeout=10).text
            return (
                _metric_sum(text, "halluscope_checks_in_flight")
                + _metric_sum(text, 'halluscope_queue_depth{queue="requests"}')
                + _metric_sum(text, "halluscope_http_refused_total")
            )

        deadline = time.monotonic() + 120  # only a bound on a broken run; the order is forced by the stub's hold
        while accounted() < 200:
            assert time.monotonic() < deadline and not running.done(), "the 200 requests were never all admitted"
            time.sleep(0.05)
        while not running.done():  # now answer what reaches the model (the queued checks follow the first 4)
            httpx.post(held.url + "/release?answer=held", timeout=10)
            assert time.monotonic() < deadline + 120, "the admitted checks never finished"
            time.sleep(0.05)
        out = running.result()
    assert out["statuses"] == {200: 20, 429: 180}, out  # none dropped (0), no 500, no queue timeout
    assert out["refusals_without_retry_after"] == 0, out


def test_kill_9_mid_job_resumes_without_loss_or_repeated_calls(home):
    run = loadtest.kill_resume(home / "kill", items=16, kill_after=8, concurrency=2)
    s = run.summary()
    assert s["finished_before_kill"] == 8 and s["in_flight_at_kill"] == 2, s
    assert s["status_after"] == "done" and s["attempts"] == 2, s
    assert s["items_lost"] == 0 and s["items_recorded_twice"] == 0, s
    assert s["repeated_calls_for_answered_prompts"] == 0, s
    # each prompt reached the model once, but for the 2 that were in flight (never answered) at the kill
    assert s["distinct_prompts"] == 16 and s["llm_requests"] == 16 + 2, s


def test_sigterm_mid_job_drains_then_resumes_with_each_prompt_sent_once(home):
    out = loadtest.graceful_restart(home / "term", items=24, answered_first=6, concurrency=4)
    # exactly the 6 answered and the 4 in flight at the SIGTERM were done before the restart: the drain let the
    # running items finish and started none (the stub holds every later request, so order is forced, not timed)
    assert out["done_at_restart"] == 6 + 4 and out["status_after"] == "done" and out["done"] == 24, out
    assert out["attempts"] == 2, out
    assert out["llm_requests"] == out["distinct_prompts"] == 24, out  # nothing in transit was dropped and redone
