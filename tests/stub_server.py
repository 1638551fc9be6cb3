"""A stub OpenAI-compatible endpoint for the service's load and fault tests (loopback only).

    python tests/stub_server.py --port 9100 [--latency-ms 50] [--hold-after N]

``POST /v1/chat/completions`` waits ``latency`` and answers a geval-style JSON rating whose score is a
function of the prompt (so reports vary, deterministically). It counts what it receives, by a hash of the
messages: ``GET /stats`` -> ``received``, ``distinct``, ``answered``, ``repeated_answered`` (requests for a
prompt it had already answered: what a resumed job must never cause), ``held``.

A prompt containing ``HOSTILE-THINK`` is answered with ``<think>`` repeated 28,000 times (a 196 KB reply just
under the parsers' size cap, which once took a quadratic regex minutes to strip): the service's load benchmark
uses it to show that parsing never holds the HTTP loop.

``POST /hold?after=N`` makes every request after the N-th (counted from the start) wait, unanswered, until
``POST /release`` (they then get 503 and are not counted as answered) or until their client goes away: the
fault tests use it to stop a job at a known point before killing the server. ``POST /release?answer=held``
answers the requests held so far normally and keeps holding later ones (a drain test lets exactly the
requests in flight at a SIGTERM finish); ``POST /release?answer=all`` answers them and stops holding.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from typing import Any
from urllib.parse import parse_qs

HOSTILE_MARKER = "HOSTILE-THINK"


class StubEndpoint:
    def __init__(self, latency_s: float = 0.0, hold_after: int | None = None):
        self.latency_s = latency_s
        self.hold_after = hold_after
        self.received = 0
        self.prompts: dict[str, int] = {}
        self.answered: set[str] = set()
        self.repeated_answered = 0
        self.held = 0
        self._release = asyncio.Event()

    def stats(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "distinct": len(self.prompts),
            "answered": len(self.answered),
            "repeated_answered": self.repeated_answered,
            "held": self.held,
            "hold_after": self.hold_after,
        }

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body, _ = await read_body(receive)
        path = scope["path"]
        if path.endswith("/chat/completions"):
            await self._complete(json.loads(body), receive, send)
        elif path == "/stats":
            await send_json(send, 200, self.stats())
        elif path == "/hold":
            after = parse_qs(scope.get("query_string", b"").decode()).get("after", ["0"])[0]
            self.hold_after = int(after)
            self._release = asyncio.Event()
            await send_json(send, 200, self.stats())
        elif path == "/release":
            mode = parse_qs(scope.get("query_string", b"").decode()).get("answer", [""])[0]
            released = self._release
            if mode in ("held", "all"):
                released.answer = True  # type: ignore[attr-defined]
                self._release = asyncio.Event()
            if mode != "held":  # "held": later requests are still held; "all" and none: no more holding
                self.hold_after = None
            released.set()
            await send_json(send, 200, self.stats())
        else:
            await send_json(send, 200, {"ok": True})

    async def _complete(self, request: dict[str, Any], receive: Any, send: Any) -> None:
        key = hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode()).hexdigest()
        self.received += 1
        self.prompts[key] = self.prompts.get(key, 0) + 1
        if key in self.answered:
            self.repeated_answered += 1
        if self.hold_after is not None and self.received > self.hold_after:
            self.held += 1
            held_by = self._release
            release = asyncio.ensure_future(held_by.wait())
            gone = asyncio.ensure_future(receive())  # http.disconnect when the client dies
            await asyncio.wait({release, gone}, return_when=asyncio.FIRST_COMPLETED)
            release.cancel()
            gone.cancel()
            self.held -= 1
            if gone.done() or not getattr(held_by, "answer", False):
                await send_json(send, 503, {"error": {"message": "held by the stub"}})
                return
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        score = 1 + int(key[:8], 16) % 5
        content = json.dumps({"reason": "The stub rated this text.", "score": score})
        if HOSTILE_MARKER in json.dumps(request["messages"]):
            content = "<think>" * 28_000
        words = sum(len(str(m.get("content", "")).split()) for m in request["messages"])
        payload = chat_completion(
            f"stub-{self.received}", request.get("model", "stub"), content, words, len(content.split())
        )
        await send_json(send, 200, payload)
        self.answered.add(key)


# --- the ASGI and OpenAI-format pieces (also used by the endpoint of benchmarks/ray_throughput.py)


async def answer_lifespan(receive: Any, send: Any) -> None:
    """Complete the ASGI lifespan protocol: acknowledge startup, then return once shutdown is acknowledged."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Any) -> tuple[bytes, bool]:
    """The request body, and whether it arrived whole (False: the client went away before its end)."""
    body = b""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body, False
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body, True


def chat_completion(
    completion_id: str, model: str, content: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object with one finished assistant message."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


async def send_json(send: Any, status: int, payload: Any) -> None:
    """Send ``payload`` as a JSON response with ``status``."""
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--hold-after", type=int, default=None)
    args = parser.parse_args()
    app = StubEndpoint(args.latency_ms / 1000, args.hold_after)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
