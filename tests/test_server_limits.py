"""The service's limits, in process: auth and size refused before the body is read, bounded queue (429/503
with Retry-After), bounded method cache, 4xx (never 500) for client errors, a free HTTP loop while a check
burns CPU, request ids, metrics, logs and the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

import httpx

from halluscope import methods
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.methods import Method
from halluscope.records import Report
from halluscope.server import ServerSettings, create_app

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SOURCE = "The council met on Monday. It approved the budget of $3 million."
TARGET = "The council met on Friday."
GEVAL_REPLY = '{"reason": "ok", "score": 5}'


def make_app(tmp_path, **settings):
    settings.setdefault("token", TOKEN)
    llm = LLM(FakeModel(default=GEVAL_REPLY))
    return create_app(Config(cache=False), ServerSettings(jobs_db=tmp_path / "jobs.sqlite", **settings), llm=llm)


async def asgi(
    app,
    method: str,
    path: str,
    headers: dict[str, bytes | str] | None = None,
    chunks: list[bytes] | None = None,
    endless: bool = False,
):
    """Call the ASGI app directly. Returns (status, headers, body, bytes the app pulled through receive)."""
    pulled = {"calls": 0, "bytes": 0}
    pieces = list(chunks or [b""])

    async def receive():
        pulled["calls"] += 1
        if endless:
            body = b"x" * 2**20
            pulled["bytes"] += len(body)
            return {"type": "http.request", "body": body, "more_body": True}
        if pieces:
            body = pieces.pop(0)
            pulled["bytes"] += len(body)
            return {"type": "http.request", "body": body, "more_body": bool(pieces)}
        await asyncio.sleep(30)
        return {"type": "http.disconnect"}

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    raw = [(k.lower().encode(), v if isinstance(v, bytes) else v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    await asyncio.wait_for(app(scope, receive, send), 20)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, pulled


async def test_auth_then_size_refused_before_the_body_is_read(tmp_path):
    app = make_app(tmp_path)
    huge = {"Content-Length": "500000000", "Content-Type": "application/json"}
    # no token: 401 first, whatever the size; the body is never pulled
    status, headers, body, pulled = await asgi(app, "POST", "/check", huge, endless=True)
    assert status == 401 and pulled["calls"] == 0 and headers["connection"] == "close"
    assert "token" in json.loads(body)["detail"]
    # a non-ASCII token is just a wrong token (it was a 500 from hmac.compare_digest on str)
    status, *_ = await asgi(app, "POST", "/check", {**huge, "Authorization": "Bearer \u00e9\u00e8".encode()})
    assert status == 401
    status, *_ = await asgi(app, "POST", "/check", {**huge, "Authorization": b"Bearer \xff\xfe"})
    assert status == 401
    # right token, Content-Length over the limit: 413 at once, nothing read
    status, headers, body, pulled = await asgi(app, "POST", "/check", {**huge, **AUTH}, endless=True)
    assert status == 413 and pulled["calls"] == 0  # refused from the header: not one chunk pulled
    assert "500000000" in json.loads(body)["detail"] and headers["connection"] == "close"
    status, *_ = await asgi(app, "POST", "/check", {"Content-Length": "12x", **AUTH})
    assert status == 400
    assert app.state.service.open_requests == 0  # refusals do not leak the open-request count


async def test_open_requests_are_bounded_with_503(tmp_path):
    app = make_app(tmp_path, max_open_requests=0)
    status, headers, *_ = await asgi(app, "GET", "/methods", AUTH)
    assert status == 503 and headers["retry-after"] == "2"
    status, *_ = await asgi(app, "GET", "/health")  # probes are always answered
    assert status == 200 and app.state.service.open_requests == 0


async def test_streamed_body_is_counted_as_it_arrives(tmp_path):
    app = make_app(tmp_path, max_body_bytes=3 * 2**20)
    headers = {"Transfer-Encoding": "chunked", "Content-Type": "application/json", **AUTH}
    status, _, body, pulled = await asgi(app, "POST", "/check/batch", headers, endless=True)
    assert status == 413 and "exceeds" in json.loads(body)["detail"]
    assert pulled["bytes"] <= 4 * 2**20  # stopped at the first chunk past the limit
    # the same through a route that reads with its own parser, and a body within the limit still works
    status, *_ = await asgi(app, "POST", "/jobs", headers, endless=True)
    assert status == 413
    good = json.dumps({"source": SOURCE, "target": TARGET, "method": "rouge"}).encode()
    status, _, body, _ = await asgi(
        app, "POST", "/check", {**AUTH, "Content-Type": "application/json"}, chunks=[good[:10], good[10:]]
    )
    assert status == 200 and json.loads(body)["method"] == "rouge"


def test_client_errors_are_4xx_with_a_message(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    class Fragile(Method):
        name = "_fragile"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            raise ValueError("max_tokens must be a whole number")  # options that fail only at run time

    monkeypatch.setitem(methods._REGISTERED, "_fragile", Fragile)
    client = TestClient(make_app(tmp_path), raise_server_exceptions=False)
    pair = {"source": SOURCE, "target": TARGET}
    cases = [
        ({"content": b"{not json"}, 422),
        ({"content": b"\xff\xfe\x00"}, 422),
        ({"json": [1, 2]}, 422),
        ({"json": {**pair, "options": "x"}}, 422),
        ({"json": {**pair, "extra": 1}}, 422),
        ({"json": {**pair, "method": "geval", "options": {"max_tokens": 2.5}}}, 400),
        ({"json": {**pair, "method": "geval", "options": {"nope": 1}}}, 400),
        ({"json": {**pair, "method": "geval", "options": {"max_tokens": "x" * 20000}}}, 400),
        ({"json": {**pair, "method": "no-such"}}, 400),
        ({"json": {**pair, "method": "_fragile"}}, 422),
        ({"json": {"source": " ", "target": TARGET, "method": "rouge"}}, 422),
        ({"json": {"source": "x" * 500_000, "target": TARGET, "method": "rouge"}}, 413),
    ]
    for kwargs, expected in cases:
        r = client.post("/check", headers=AUTH, **kwargs)
        assert r.status_code == expected, (kwargs, r.status_code, r.text[:300])
        assert r.json()["detail"]
    assert (
        "Valid options"
        in client.post("/check", headers=AUTH, json={**pair, "method": "geval", "options": {"nope": 1}}).json()[
            "detail"
        ]
    )
    assert "whole number" in client.post("/check", headers=AUTH, json={**pair, "method": "_fragile"}).json()["detail"]
    assert client.get("/jobs/" + "0" * 32, headers=AUTH).status_code == 404
    assert client.get("/jobs/../../etc/passwd", headers=AUTH).status_code == 404
    assert client.delete("/jobs/abc", headers=AUTH).status_code == 404
    assert client.post("/check?format=pdf", headers=AUTH, json=pair).status_code == 422
    assert client.post("/improve", headers=AUTH, json={**pair, "rounds": 9}).status_code == 422


async def _until(condition, what: str) -> None:
    """Wait for a state of the service (not for a guessed time): polls, fails only after a generous limit."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


async def test_queue_full_429_and_queue_timeout_503_with_retry_after(tmp_path, monkeypatch):
    gate = threading.Event()

    class Gate(Method):
        name = "_gate"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            await asyncio.to_thread(gate.wait, 60)
            return Report(method=self.name, score=1.0)

    monkeypatch.setitem(methods._REGISTERED, "_gate", Gate)
    app = make_app(tmp_path, max_in_flight=1, max_queue=1, queue_timeout_s=60, retry_after_s=3)
    admission = app.state.service.admission
    body = {"source": SOURCE, "target": TARGET, "method": "_gate"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=90) as client:
        first = asyncio.create_task(client.post("/check", json=body, headers=AUTH))
        await _until(lambda: admission.in_flight == 1, "the first check holds the only slot")
        second = asyncio.create_task(client.post("/check", json=body, headers=AUTH))
        await _until(lambda: admission.queued == 1, "the second check waits in the queue")
        third = await client.post("/check", json=body, headers=AUTH)
        assert third.status_code == 429 and third.headers["retry-after"] == "3"
        ready = await client.get("/ready")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "3"
        assert (await client.get("/health")).status_code == 200  # probes are never queued
        gate.set()
        assert (await first).status_code == 200 and (await second).status_code == 200
        # a wait longer than the queue timeout: 503 (the slot stays held until the gate opens again)
        gate.clear()
        admission.timeout_s = 0.2
        held = asyncio.create_task(client.post("/check", json=body, headers=AUTH))
        await _until(lambda: admission.in_flight == 1, "a check holds the only slot again")
        late = await client.post("/check", json=body, headers=AUTH)
        assert late.status_code == 503 and late.headers["retry-after"] == "3"
        gate.set()
        assert (await held).status_code == 200
        assert (await client.post("/check", json=body, headers=AUTH)).status_code == 200
        metrics = (await client.get("/metrics", headers=AUTH)).text
    assert 'halluscope_http_refused_total{reason="queue_full"} 1.0' in metrics
    assert 'halluscope_http_refused_total{reason="queue_timeout"} 1.0' in metrics
    assert 'halluscope_http_requests_total{method="POST",route="/check",status="429"} 1.0' in metrics


def _slow_receive(first: bytes, gone: asyncio.Event | None = None):
    """An ASGI receive that hands over ``first`` and then never sends the rest (a client at ~0 bytes/s)."""
    sent = {"first": False}

    async def receive():
        if not sent["first"]:
            sent["first"] = True
            return {"type": "http.request", "body": first, "more_body": True}
        await (gone or asyncio.Event()).wait()
        return {"type": "http.disconnect"}

    return receive


async def _call(app, path: str, receive, headers: dict[str, str]):
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return (
        start["status"],
        {k.decode(): v.decode() for k, v in start["headers"]},
        b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"),
    )


async def test_a_body_that_does_not_arrive_in_time_gets_408_and_holds_no_slot(tmp_path):
    app = make_app(tmp_path, max_in_flight=1, body_timeout_s=0.3)
    body = json.dumps({"source": SOURCE, "target": TARGET, "method": "rouge"}).encode()
    headers = {**AUTH, "Content-Type": "application/json", "Content-Length": str(len(body))}
    status, answer_headers, answer = await asyncio.wait_for(_call(app, "/check", _slow_receive(body[:5]), headers), 60)
    assert status == 408 and answer_headers["connection"] == "close"
    assert "did not arrive within 0.3s" in json.loads(answer)["detail"]
    assert app.state.service.admission.in_flight == 0 and app.state.service.open_requests == 0


async def test_slow_senders_do_not_stop_another_clients_check(tmp_path):
    app = make_app(tmp_path, max_in_flight=4, max_queue=0, body_timeout_s=120)
    service = app.state.service
    body = json.dumps({"source": SOURCE, "target": TARGET, "method": "rouge"}).encode()
    headers = {**AUTH, "Content-Type": "application/json", "Content-Length": str(len(body))}
    gone = asyncio.Event()
    slow = [asyncio.create_task(_call(app, "/check", _slow_receive(body[:1], gone), headers)) for _ in range(4)]
    await _until(lambda: service.open_requests == 4, "four slow senders are connected")
    assert service.admission.in_flight == 0  # none of them holds a check slot
    fast = await asyncio.wait_for(asgi(app, "POST", "/check", headers, chunks=[body]), 60)
    assert fast[0] == 200 and json.loads(fast[2])["method"] == "rouge"
    assert all(not t.done() for t in slow)
    gone.set()  # the slow clients hang up
    await asyncio.gather(*slow, return_exceptions=True)
    assert service.admission.in_flight == 0


async def test_health_answers_while_a_check_burns_cpu(tmp_path, monkeypatch):
    burning, stop = threading.Event(), threading.Event()

    class Busy(Method):
        name = "_busy"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            burning.set()
            deadline = time.monotonic() + 60  # only a hang guard: the test stops the burn once /health answered
            while not stop.is_set() and time.monotonic() < deadline:  # CPU work inside the coroutine: blocks
                sum(range(1000))  # its own loop only
            return Report(method=self.name, score=0.5 if stop.is_set() else 0.0)

    monkeypatch.setitem(methods._REGISTERED, "_busy", Busy)
    app = make_app(tmp_path)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=90
        ) as client:
            check = asyncio.create_task(
                client.post("/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": "_busy"})
            )
            await _until(burning.is_set, "the check burns CPU")
            for _ in range(5):  # answered while the burn goes on: it ends only when the test sets stop below
                assert (await client.get("/health")).status_code == 200
            assert not check.done()
            stop.set()
            answer = await check
        # a blocked HTTP loop would have answered /health only after the burn's 60 s guard: score 0.0, not 0.5
        assert answer.status_code == 200 and answer.json()["score"] == 0.5
    finally:
        stop.set()


def test_method_cache_is_bounded_and_shares_one_llm(tmp_path):
    from fastapi.testclient import TestClient

    app = make_app(tmp_path, method_cache_size=8)
    client = TestClient(app)
    for n in range(1, 41):
        r = client.post(
            "/check",
            headers=AUTH,
            json={"source": SOURCE, "target": TARGET, "method": "geval", "options": {"max_tokens": n}},
        )
        assert r.status_code == 200, r.text
    service = app.state.service
    assert len(service.methods) == 8
    llms = {id(service.methods.get("geval", {"max_tokens": n}).llm) for n in range(33, 41)}
    assert llms == {id(service._llm)}
    metrics = client.get("/metrics", headers=AUTH).text
    assert "halluscope_method_cache_size 8.0" in metrics
    assert "halluscope_method_cache_evictions_total 32.0" in metrics
    assert 'halluscope_llm_calls_total{method="geval"} 40.0' in metrics


def test_request_id_logs_metrics_and_docs(tmp_path, caplog):
    import logging

    from fastapi.testclient import TestClient

    from halluscope.server.logs import JsonFormatter

    client = TestClient(make_app(tmp_path))
    with caplog.at_level(logging.INFO, logger="halluscope.server"):
        r = client.post(
            "/check",
            headers={**AUTH, "X-Request-ID": "abc-123"},
            json={"source": SOURCE, "target": TARGET, "method": "geval"},
        )
    assert r.status_code == 200 and r.headers["x-request-id"] == "abc-123"
    line = next(json.loads(JsonFormatter().format(rec)) for rec in caplog.records if rec.getMessage() == "request")
    assert line["request_id"] == "abc-123" and line["status"] == 200 and line["route"] == "/check"
    assert line["duration_ms"] >= 0 and line["level"] == "info"
    fresh = client.get("/health", headers={"X-Request-ID": "bad id with spaces"}).headers["x-request-id"]
    assert fresh != "bad id with spaces" and len(fresh) == 32

    assert client.get("/metrics").status_code == 401  # the token guards metrics unless --metrics-public
    text = client.get("/metrics", headers=AUTH).text
    for name in (
        "halluscope_http_requests_total",
        "halluscope_http_request_duration_seconds_bucket",
        "halluscope_llm_calls_total",
        "halluscope_llm_tokens_total",
        "halluscope_llm_cache_hits_total",
        "halluscope_queue_depth",
        "halluscope_reports_total",
        "halluscope_jobs",
        "process_resident_memory_bytes",
    ):
        assert name in text, name
    unscored = LLM(FakeModel(default="no json here"))
    app2 = create_app(
        Config(cache=False),
        ServerSettings(metrics_public=True, token=TOKEN, jobs_db=tmp_path / "other.sqlite"),
        llm=unscored,
    )
    client2 = TestClient(app2)
    r = client2.post("/check", headers=AUTH, json={"source": SOURCE, "target": TARGET, "method": "geval"})
    assert r.status_code == 200 and r.json()["score"] is None
    metrics = client2.get("/metrics").text  # public
    assert 'halluscope_unscored_reports_total{method="geval",reason="unparseable_reply"} 1.0' in metrics

    spec = client.get("/openapi.json").json()  # the docs need no token
    assert client.get("/docs").status_code == 200
    for path in (
        "/check",
        "/improve",
        "/check/batch",
        "/jobs",
        "/jobs/{job_id}",
        "/jobs/{job_id}/results",
        "/jobs/{job_id}/report",
        "/jobs/{job_id}/items/{index}",
        "/metrics",
        "/health",
        "/ready",
    ):
        assert path in spec["paths"], path
    for record in ("Report", "CheckRequest", "BatchRequest", "JobRequest", "JobInfo", "ItemResult", "Pair", "Finding"):
        assert record in spec["components"]["schemas"], record
    body = spec["paths"]["/check/batch"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/BatchRequest"}
