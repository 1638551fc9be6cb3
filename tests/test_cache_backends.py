"""Response cache backends: SQLite (one machine) and Redis (shared), chosen by ``Config.cache_url``.

The Redis tests run against a real ``redis-server`` started on a free loopback port (Debian package
``redis-server``); they skip with the reason when the server binary or the ``redis`` client is missing.
The cross-process test runs ``halluscope bench`` in a child process against a stub OpenAI-compatible endpoint
on 127.0.0.1 and counts the requests that reach it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from halluscope.config import Config
from halluscope.llm import LLM, Completion, FakeModel, RedisCache, ResponseCache, get_llm, open_cache
from halluscope.llm.cache import CacheBackendError
from halluscope.records import Example, Usage
from tests.conftest import free_loopback_port
from tests.prompt_data import fenced

REPO = Path(__file__).resolve().parents[1]


# --- a stub OpenAI-compatible endpoint on loopback that counts what reaches it ----------------------------


def stub_reply(messages: list[dict], tag: str = "stub") -> str:
    """geval's reply for a target ``Claim number N.``: rating 5 for odd N, 2 for even N (N read from the
    fenced target, not from the prompt's wording); for the default method's verdict-first question about a
    claim ``Claim number N.``: yes for odd N, no for even N."""
    claim = fenced(messages, "claim", "")
    found = re.search(r"Claim number (\d+)\.", claim or fenced(messages, "target", ""))
    number = int(found.group(1)) if found else 1
    if claim:
        return "Yes" if number % 2 else "No"
    return json.dumps({"reason": tag, "score": 5 if number % 2 else 2})


REQUEST_TAG = re.compile(r"request ([0-9a-f]{16})")


class StubEndpoint:
    """``POST /v1/chat/completions`` after ``latency_s``; records each request body's hash on arrival and
    again once its answer was written (``answered``). The reply's reason names the request (``request
    <hash prefix>``), so a cached reply tells which request it answered. Runs in a thread of the test process."""

    def __init__(self, latency_s: float = 0.0, hold_after: int | None = None):
        self.latency_s = latency_s
        self.arrived: list[str] = []
        self.answered: list[str] = []
        self.held = 0  # requests waiting for release()
        self.hold_after = hold_after  # answer this many requests, then hold the rest until release()
        self._released = threading.Event()
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                digest = hashlib.sha256(body).hexdigest()
                with stub._lock:
                    stub.arrived.append(digest)
                    hold = stub.hold_after is not None and len(stub.arrived) > stub.hold_after
                    stub.held += hold
                if hold:
                    stub._released.wait(timeout=120)
                request = json.loads(body)
                time.sleep(stub.latency_s)
                content = stub_reply(request["messages"], f"request {digest[:16]}")
                payload = json.dumps(
                    {
                        "id": "stub",
                        "object": "chat.completion",
                        "model": request.get("model", "stub"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
                with stub._lock:
                    stub.answered.append(digest)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client killed mid-request: nothing to report
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def release(self) -> None:
        """Answer the held requests and every later one."""
        self._released.set()

    def __enter__(self) -> StubEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


def toy_examples(n: int) -> list[Example]:
    return [
        Example(
            id=f"ex{i}",
            source=f"Source {i}: the cat sat on the mat.",
            target=f"Claim number {i}.",
            label=i % 2,
            split="evaluation" if i < n // 2 else "test",
        )
        for i in range(n)
    ]


def write_jsonl(path: Path, examples: list[Example]) -> Path:
    path.write_text("".join(ex.model_dump_json() + "\n" for ex in examples), encoding="utf-8")
    return path


# --- a real redis-server on a free loopback port --------------------------------------------------------


@pytest.fixture
def redis_cache(redis_url, request):
    prefix = f"test:{request.node.name}:"
    cache = RedisCache(redis_url, prefix=prefix)
    cache.clear()
    yield cache
    cache.clear()
    cache.close()


def _completion(text: str = "hello") -> Completion:
    return Completion(text=text, model="m", usage=Usage(calls=1, prompt_tokens=3, completion_tokens=1))


# --- the interface, on both backends --------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "redis"])
def any_cache(request, tmp_path):
    if request.param == "sqlite":
        cache = ResponseCache(tmp_path / "c.sqlite")
        yield cache
        cache.close()
    else:
        yield request.getfixturevalue("redis_cache")


def test_get_put_roundtrip_and_miss(any_cache):
    assert any_cache.get("k1") is None
    any_cache.put("k1", _completion("a \ud800 b"))  # a lone surrogate is cleaned, never crashes the backend
    got = any_cache.get("k1")
    assert got is not None and got.text == "a \ufffd b" and got.model == "m" and got.usage.prompt_tokens == 3
    any_cache.put("k1", _completion("replaced"))
    assert any_cache.get("k1").text == "replaced" and len(any_cache) == 1


def test_sqlite_and_redis_store_the_same_value(tmp_path, redis_cache):
    sqlite = ResponseCache(tmp_path / "c.sqlite")
    for cache in (sqlite, redis_cache):
        cache.put("key", _completion("same"))
    assert sqlite.get("key") == redis_cache.get("key")


def test_redis_unreadable_value_is_a_miss(redis_cache):
    redis_cache._client.set(redis_cache.prefix + "bad", b"{not a completion")
    assert redis_cache.get("bad") is None


def test_redis_prefixes_and_url_options_keep_caches_apart(redis_url):
    a = RedisCache(redis_url + "?prefix=tenant-a:")
    b = RedisCache(redis_url, prefix="tenant-b:")
    try:
        a.clear(), b.clear()
        a.put("k", _completion("from a"))
        assert b.get("k") is None and a.get("k").text == "from a"
        assert a.prefix == "tenant-a:" and "prefix" not in a.url
    finally:
        a.clear(), b.clear()


def test_redis_ttl_from_url(redis_url):
    cache = RedisCache(redis_url + "?prefix=ttl-test:&ttl=60")
    try:
        cache.put("k", _completion())
        assert cache.ttl_s == 60 and 0 < cache._client.ttl("ttl-test:k") <= 60
    finally:
        cache.clear()


def test_redis_unreachable_fails_at_open_with_the_url():
    port = free_loopback_port()  # nothing listens there
    with pytest.raises(CacheBackendError, match=rf"127\.0\.0\.1:{port}") as failed:
        RedisCache(f"redis://:secret@127.0.0.1:{port}/0", socket_timeout_s=0.5)
    assert "secret" not in str(failed.value)  # the password is never printed


def test_redis_error_after_open_is_a_miss_not_a_failed_item(redis_url, capsys):
    cache = RedisCache(redis_url, prefix="down:")
    cache._client.connection_pool.disconnect()
    cache._client = type(cache._client).from_url(
        f"redis://127.0.0.1:{free_loopback_port()}/0", socket_connect_timeout=0.2
    )
    assert cache.get("k") is None
    cache.put("k", _completion())
    cache.put("k", _completion())
    assert cache.errors == 3
    assert capsys.readouterr().err.count("warning: Redis cache") == 1  # warned once


# --- choosing the backend -------------------------------------------------------------------------------


def test_open_cache_by_url(tmp_path, redis_url, monkeypatch):
    assert open_cache(Config(cache=False, cache_url=redis_url)) is None
    default = open_cache(Config(cache_path=tmp_path / "default.sqlite"))
    assert isinstance(default, ResponseCache) and default.path == tmp_path / "default.sqlite"
    named = open_cache(Config(cache_url=f"sqlite:///{tmp_path}/named.sqlite"))  # sqlite:////tmp/...: absolute
    assert isinstance(named, ResponseCache) and named.path == tmp_path / "named.sqlite"
    monkeypatch.chdir(tmp_path)
    relative = open_cache(Config(cache_url="sqlite:///rel.sqlite"))
    assert relative.path == Path("rel.sqlite") and (tmp_path / "rel.sqlite").is_file()
    assert isinstance(open_cache(Config(cache_url=redis_url)), RedisCache)
    monkeypatch.setenv("HALLUSCOPE_CACHE_URL", redis_url)
    assert Config().cache_url == redis_url and isinstance(
        get_llm(Config(base_url="http://127.0.0.1:9/v1")).cache, RedisCache
    )
    with pytest.raises(CacheBackendError, match="unsupported cache URL"):
        open_cache(Config(cache_url="postgres://db/cache"))
    with pytest.raises(CacheBackendError, match="no file"):
        open_cache(Config(cache_url="sqlite://"))


def test_two_clients_share_replies_through_redis(redis_cache):
    """Two LLM clients (as in two processes) on one Redis: the second makes no call."""
    import asyncio

    messages = [{"role": "user", "content": "Is it supported?"}]
    first = LLM(FakeModel(["yes"]), cache=redis_cache)
    asyncio.run(first.generate(messages))
    second_model = FakeModel()  # any request would raise
    second = LLM(second_model, cache=RedisCache(redis_cache.url, prefix=redis_cache.prefix))
    reply = asyncio.run(second.generate(messages))
    assert reply.text == "yes" and reply.cached and second_model.requests == [] and second.usage.calls == 0


def test_sqlite_cache_is_shared_by_processes_on_one_machine(tmp_path):
    path = tmp_path / "shared.sqlite"
    ResponseCache(path).put("k", _completion("written by the parent"))
    code = "import sys; from halluscope.llm import ResponseCache; print(ResponseCache(sys.argv[1]).get('k').text)"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "written by the parent", out.stderr


CHILD_RUN = """
import asyncio, sys
from halluscope.bench.datasets import load_dataset
from halluscope.bench.runner import run_bench
from halluscope.config import Config
from halluscope.methods import get_method
config = Config()  # model, endpoint and cache URL from HALLUSCOPE_* variables
assert config.cache_url, "HALLUSCOPE_CACHE_URL not seen"
asyncio.run(run_bench(get_method("geval", config=config), load_dataset(sys.argv[1]), sys.argv[2],
                      progress=False, n_bootstrap=0, suite_names=[]))
"""


def _scores(out: Path) -> dict[str, tuple]:
    rows = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    return {r["example_id"]: (r["report"]["score"], r["report"]["details"]) for r in rows}


def test_rerun_from_another_process_makes_no_llm_call(tmp_path, redis_cache):
    """A child process fills the Redis cache; a re-run here, in another process with another output folder
    and no SQLite file in common, sends 0 requests to the endpoint and gives the same reports."""
    data = write_jsonl(tmp_path / "toy.jsonl", toy_examples(6))
    url = f"{redis_cache.url}?prefix={redis_cache.prefix}"
    with StubEndpoint() as stub:
        env = {
            **os.environ,
            "HALLUSCOPE_CACHE_URL": url,
            "HALLUSCOPE_MODEL": "stub",
            "HALLUSCOPE_BASE_URL": stub.base_url,
            "XDG_CACHE_HOME": str(tmp_path / "child-xdg"),
        }
        child = subprocess.run(
            [sys.executable, "-c", CHILD_RUN, str(data), str(tmp_path / "first")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert child.returncode == 0, child.stderr
        assert len(stub.answered) == 6 and len(redis_cache) == 6

        import asyncio

        from halluscope.bench.datasets import load_dataset
        from halluscope.bench.runner import run_bench
        from halluscope.methods import get_method

        config = Config(model="stub", base_url=stub.base_url, cache_url=url)
        results = asyncio.run(
            run_bench(
                get_method("geval", config=config),
                load_dataset(str(data)),
                tmp_path / "second",
                progress=False,
                n_bootstrap=0,
                suite_names=[],
            )
        )
        assert len(stub.arrived) == 6  # nothing more reached the endpoint
        assert results["usage"]["calls"] == 0 and results["usage"]["cache_hits"] == 6
        assert _scores(tmp_path / "second") == _scores(tmp_path / "first")
