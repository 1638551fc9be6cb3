"""/check/batch (NDJSON in the order items finish) and jobs (SQLite, resumed after a stop without
recomputing anything finished), in process with scripted models."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")

from fastapi.testclient import TestClient

from halluscope import methods
from halluscope.config import Config
from halluscope.llm import LLM, Completion, FakeModel, ResponseCache
from halluscope.methods import Method
from halluscope.records import Report, Usage
from halluscope.server import ServerSettings, create_app

GEVAL_REPLY = '{"reason": "ok", "score": 4}'
SOURCE = "The council met on Monday. It approved the budget of $3 million for the new ferry."


def pairs(n: int) -> list[dict[str, str]]:
    return [{"id": f"p{i}", "source": SOURCE, "target": f"The council met on day {i}."} for i in range(n)]


def make_app(tmp_path, llm=None, **settings):
    settings.setdefault("jobs_db", tmp_path / "jobs.sqlite")
    return create_app(Config(cache=False), ServerSettings(**settings), llm=llm or LLM(FakeModel(default=GEVAL_REPLY)))


FIRST_LINE_SENT = threading.Event()
HELD_RELEASED = threading.Event()


class Sleepy(Method):
    """Sleeps the seconds written in the target ("sleep 0.5"), or waits ("wait") until the test has received the
    batch's first streamed line, or ("hold") until the test releases it, then scores 1."""

    name = "_sleepy"
    uses_llm = False

    async def run(self, source: str, target: str) -> Report:
        if target in ("wait", "hold"):
            event = FIRST_LINE_SENT if target == "wait" else HELD_RELEASED
            while not event.is_set():
                await asyncio.sleep(0.01)
        else:
            await asyncio.sleep(float(target.split()[-1]))
        return Report(method=self.name, score=1.0)


@pytest.fixture
def sleepy(monkeypatch):
    monkeypatch.setitem(methods._REGISTERED, "_sleepy", Sleepy)


def wait_for_job(client: TestClient, job_id: str, until=lambda j: j["status"] == "done", timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if until(job):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job did not get there in {timeout_s}s: {job}")


async def test_batch_streams_lines_as_items_finish(tmp_path, sleepy):
    """The "slow" item can only finish once the quick item's line has reached the client: a server that held
    lines back until the batch was done would time it out (504) instead. No wall-clock bound is asserted."""
    FIRST_LINE_SENT.clear()
    app = make_app(tmp_path, timeout_s=5.0)
    items = [
        {"id": "slow", "source": SOURCE, "target": "wait"},
        {"source": SOURCE, "target": "sleep 0"},
        {"id": "stuck", "source": SOURCE, "target": "sleep 60"},
    ]
    body = json.dumps({"method": "_sleepy", "items": items}).encode()
    chunks: list[bytes] = []

    async def receive():
        nonlocal body
        if body:
            data, body = body, b""
            return {"type": "http.request", "body": data, "more_body": False}
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            assert message["status"] == 200
            assert (b"content-type", b"application/x-ndjson") in message["headers"]
        elif message.get("body"):
            chunks.append(message["body"])
            FIRST_LINE_SENT.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/check/batch",
        "raw_path": b"/check/batch",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
    }
    await asyncio.wait_for(app(scope, receive, send), 40)
    lines = [json.loads(line) for chunk in chunks for line in chunk.splitlines()]
    assert [(x["index"], x["id"], x["status"]) for x in lines] == [(1, "1", 200), (0, "slow", 200), (2, "stuck", 504)]
    assert json.loads(chunks[0].splitlines()[0])["index"] == 1  # the first thing sent was the quick item alone
    assert lines[0]["report"]["score"] == 1.0 and lines[2]["report"] is None and "longer than" in lines[2]["error"]


def test_batch_validates_before_streaming(tmp_path):
    client = TestClient(make_app(tmp_path, max_batch_items=3, max_chars=200))
    ok = client.post("/check/batch", json={"method": "geval", "items": pairs(3)})
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in ok.text.splitlines()]
    assert sorted(x["index"] for x in lines) == [0, 1, 2] and {x["id"] for x in lines} == {"p0", "p1", "p2"}
    assert all(Report.model_validate(x["report"]).score == 0.75 for x in lines)
    assert client.post("/check/batch", json={"items": pairs(4)}).status_code == 413
    assert client.post("/check/batch", json={"items": []}).status_code == 422
    empty = client.post("/check/batch", json={"items": [*pairs(1), {"source": SOURCE, "target": "  "}]})
    assert empty.status_code == 422 and "item 1" in empty.json()["detail"]
    long = client.post("/check/batch", json={"items": [{"source": "x" * 300, "target": "y"}]})
    assert long.status_code == 413
    assert client.post("/check/batch", json={"items": pairs(1), "options": {"bad": 1}}).status_code == 400


def test_job_lifecycle_results_page_and_delete(tmp_path, monkeypatch):
    class Fragile(Method):
        name = "_fragile_items"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            if "3" in target:
                raise ValueError("cannot handle item 3")
            return Report(method=self.name, score=int(target.split()[-1].rstrip(".")) / 10)

    monkeypatch.setitem(methods._REGISTERED, "_fragile_items", Fragile)
    client = TestClient(make_app(tmp_path))
    r = client.post("/jobs", json={"method": "_fragile_items", "items": pairs(5), "name": "nightly <run>"})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert r.headers["location"] == f"/jobs/{job_id}" and r.json()["total"] == 5
    job = wait_for_job(client, job_id)
    assert (job["done"], job["scored"], job["unscored"], job["errors"], job["attempts"]) == (5, 4, 0, 1, 1)
    assert job["progress"] == 1.0 and job["mean_score"] == pytest.approx((0 + 0.1 + 0.2 + 0.4) / 4)

    lines = [json.loads(line) for line in client.get(f"/jobs/{job_id}/results").text.splitlines()]
    assert [x["index"] for x in lines] == [0, 1, 2, 3, 4]
    assert lines[3]["status"] == 422 and "cannot handle" in lines[3]["error"] and lines[3]["report"] is None
    assert [x["index"] for x in map(json.loads, client.get(f"/jobs/{job_id}/results?after=2").text.splitlines())] == [
        3,
        4,
    ]

    page = client.get(f"/jobs/{job_id}/report")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "nightly &lt;run&gt;" in page.text and "<run>" not in page.text
    for i in range(5):
        assert f'href="items/{i}?format=html"' in page.text
    assert 'data-score="0.4"' in page.text and "error 422" in page.text
    item = client.get(f"/jobs/{job_id}/items/2?format=html")
    assert item.status_code == 200 and item.text.startswith("<!doctype html>") and "day 2" in item.text
    assert client.get(f"/jobs/{job_id}/items/2").json()["report"]["score"] == 0.2
    assert client.get(f"/jobs/{job_id}/items/3?format=html").status_code == 409
    assert client.get(f"/jobs/{job_id}/items/9").status_code == 404
    assert [j["id"] for j in client.get("/jobs").json()["jobs"]] == [job_id]

    assert client.delete(f"/jobs/{job_id}").json() == {"id": job_id, "deleted": True}
    assert client.get(f"/jobs/{job_id}").status_code == 404
    assert client.get(f"/jobs/{job_id}/results").status_code == 404
    assert client.delete(f"/jobs/{job_id}").status_code == 404


def test_job_inputs_are_validated(tmp_path, sleepy):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"id": f"d{i}", "source": SOURCE, "target": "sleep 0", "label": 1} for i in range(3)]
    (data / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "outside.jsonl").write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    client = TestClient(make_app(tmp_path, datasets_dir=data, max_jobs=1))
    assert client.post("/jobs", json={"items": pairs(1), "dataset": "mine.jsonl"}).status_code == 422
    assert client.post("/jobs", json={"items": []}).status_code == 422
    assert client.post("/jobs", json={"items": pairs(1), "options": {"bad": 1}}).status_code == 400
    assert client.post("/jobs", json={"dataset": "../outside.jsonl", "method": "_sleepy"}).status_code == 400
    assert client.post("/jobs", json={"dataset": "nope.jsonl", "method": "_sleepy"}).status_code == 400
    assert client.post("/jobs", json={"dataset": "imaginary:dev", "method": "_sleepy"}).status_code == 400
    r = client.post("/jobs", json={"dataset": "mine.jsonl", "method": "_sleepy", "limit": 2})
    assert r.status_code == 202, r.text
    job = wait_for_job(client, r.json()["id"])
    assert job["total"] == 2 and job["scored"] == 2 and job["dataset"] == "mine"
    HELD_RELEASED.clear()
    try:  # a job that runs until released (not for a guessed time): the next one finds the only place taken
        slow = client.post("/jobs", json={"method": "_sleepy", "items": [{"source": SOURCE, "target": "hold"}]})
        assert slow.status_code == 202
        full = client.post("/jobs", json={"method": "_sleepy", "items": pairs(1)})
        assert full.status_code == 429 and int(full.headers["retry-after"]) > 0
        assert client.get(f"/jobs/{slow.json()['id']}").json()["done"] == 0  # still running when refused
        assert client.delete(f"/jobs/{slow.json()['id']}").status_code == 200  # cancels the running job
    finally:
        HELD_RELEASED.set()
    assert TestClient(make_app(tmp_path / "b")).post("/jobs", json={"dataset": "mine.jsonl"}).status_code == 400


class Hanging:
    """A model that answers the first ``answer`` requests and leaves the others hanging."""

    name = "hanging"
    max_concurrency = None
    context_window = None

    def __init__(self, answer: int | None):
        self.left = answer
        self.requested: list[str] = []
        self.answered: list[str] = []
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def generate(self, messages, params) -> Completion:
        prompt = messages[-1]["content"]
        with self._lock:
            self.requested.append(prompt)
            hang = self.left is not None and self.left <= 0
            if self.left is not None:
                self.left -= 1
        if hang:
            await asyncio.sleep(3600)
        with self._lock:
            self.answered.append(prompt)
        return Completion(
            text=GEVAL_REPLY, model=self.name, usage=Usage(calls=1, prompt_tokens=10, completion_tokens=5)
        )


def test_job_resumes_after_a_stop_without_recomputing(tmp_path):
    cache_path = tmp_path / "llm_cache.sqlite"
    first = Hanging(answer=4)
    app = make_app(tmp_path, llm=LLM(first, cache=ResponseCache(cache_path)), job_concurrency=2, shutdown_grace_s=0.2)
    with TestClient(app) as client:
        job_id = client.post("/jobs", json={"method": "geval", "items": pairs(8)}).json()["id"]
        wait_for_job(client, job_id, lambda j: j["done"] == 4)
        deadline = time.monotonic() + 10
        while len(first.requested) < 6 and time.monotonic() < deadline:  # two items hang mid-way
            time.sleep(0.02)
        assert len(first.requested) == 6 and len(first.answered) == 4
    # the server stopped with the job half done; a new one on the same database and cache resumes it
    second = Hanging(answer=None)
    app2 = make_app(tmp_path, llm=LLM(second, cache=ResponseCache(cache_path)), job_concurrency=2)
    with TestClient(app2) as client:
        job = wait_for_job(client, job_id)
        results = [json.loads(line) for line in client.get(f"/jobs/{job_id}/results").text.splitlines()]
    assert (job["done"], job["scored"], job["attempts"]) == (8, 8, 2)
    assert [r["index"] for r in results] == list(range(8))  # nothing lost, nothing twice
    assert len(second.requested) == 4  # the 4 unfinished items, one call each
    assert not set(second.requested) & set(first.answered)  # 0 repeated calls for replies that had arrived
    assert job["usage"]["calls"] == 8
