"""Load and fault tests against real server processes on 127.0.0.1 (a stub model endpoint behind them).
Light versions of ``benchmarks/service_load.py``: bounded in count and time (about half a minute)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("uvicorn", reason="server extra not installed: pip install 'halluscope[server]'")
if not sys.platform.startswith("linux"):
    pytest.skip("memory and open files are read from /proc (Linux)", allow_module_level=True)

from halluscope.server import loadtest

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
    for answer in out["answers"]:
        assert answer["seconds"] < 2.0, out
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


def test_200_concurrent_requests_over_small_limits_are_answered_or_refused(home, stub):
    args = ("--max-in-flight", "4", "--max-queue", "16", "--queue-timeout", "20")
    with loadtest.start_server(home / "small", *args, stub=stub) as small:
        out = loadtest.concurrent_checks(small, None, n=200)
    assert set(out["statuses"]) <= {200, 429, 503}, out  # none dropped (0), no 500
    assert sum(out["statuses"].values()) == 200
    assert out["statuses"].get(200, 0) >= 20 and out["statuses"].get(429, 0) > 0, out
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
