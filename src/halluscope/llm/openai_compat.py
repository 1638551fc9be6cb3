"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio, ...)."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import random
import socket
import ssl
import weakref
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from halluscope.llm.base import (
    Completion,
    ContextOverflowError,
    EndpointUnreachable,
    GenerateParams,
    LLMError,
    Message,
    ReplyTooLargeError,
    StructuredOutput,
    parse_logprobs,
)
from halluscope.llm.cache import clean_messages, clean_text
from halluscope.records import Usage

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}

MAX_RESPONSE_BYTES = 4 * 2**20
"""Largest response body read from the endpoint. A reply of the longest text any parser accepts
(``MAX_REPLY_CHARS``, even fully \\u-escaped) fits; a larger body is refused while it arrives (from its
Content-Length when it has one), so a 300 MB reply costs 4 MB, not gigabytes."""


class _Body:
    """The parts of a response the backend reads: status, headers and a body read up to a limit."""

    def __init__(self, status_code: int, headers: httpx.Headers, content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        """The start of the body as text (for error messages, which quote at most a few hundred characters)."""
        return self.content[:65536].decode("utf-8", errors="replace")

    def json(self) -> object:
        return json.loads(self.content)


class _BoundedInflater:
    """Decodes a response body's ``Content-Encoding`` (none, gzip, deflate) in pieces of bounded size, so the
    caller can stop as soon as the decoded body passes its limit; any other encoding is refused (:class:`LLMError`:
    only these could be read with bounded memory, and the request asked for none)."""

    _WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + zlib.MAX_WBITS}

    def __init__(self, encoding: str):
        codings = [c.strip().lower() for c in encoding.split(",") if c.strip() and c.strip().lower() != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in self._WBITS):
            raise LLMError(
                f"the endpoint sent a body in the Content-Encoding {encoding!r}; only gzip and deflate "
                "are decoded (the request asks for none)"
            )
        self._z = zlib.decompressobj(self._WBITS[codings[0]]) if codings else None

    def feed(self, data: bytes, room: int) -> Iterator[bytes]:
        """The decoded bytes of ``data``, yielded in pieces of at most ``max(room, 1)`` bytes each."""
        if self._z is None:
            if data:
                yield data
            return
        try:
            piece = self._z.decompress(data, max(room, 1))
            while True:
                if piece:
                    yield piece
                if not self._z.unconsumed_tail:
                    return
                piece = self._z.decompress(self._z.unconsumed_tail, max(room, 1))
        except zlib.error as exc:
            raise LLMError(f"the endpoint's compressed body is corrupt: {exc}") from exc


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after_s(resp: _Body) -> float | None:
    """The server's Retry-After in seconds (numeric form only; HTTP dates are ignored)."""
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class _SchemaRefused(Exception):
    """The endpoint rejected the structured ``response_format`` it was sent."""


# How a reply's JSON schema is asked for, best first. An endpoint that refuses one spelling gets the next:
# OpenAI's ``json_schema`` (OpenAI, vLLM, Ollama, LM Studio, llama.cpp's llama-server), llama-cpp-python's
# server's own ``json_object`` + ``schema`` (grammar-constrained there), then plain JSON mode. The reply is
# validated against the schema by its parser whatever the endpoint enforced.
_SCHEMA_FORMATS = ("json_schema", "json_object+schema", "json_object")


_RETRYABLE = (_Retryable, httpx.TransportError)  # TransportError covers timeouts and refused connections


def _token_count(value: object) -> int:
    """A token count from a ``usage`` field: a non-negative whole number, else 0 (never an exception)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value == int(value):
        return int(value)
    return 0


def _usage(data: dict[str, Any]) -> Usage:
    """Usage of one call. A malformed ``usage`` (missing, strings, negative, nested junk) costs the reply
    nothing: it is recorded as 0 tokens."""
    raw = data.get("usage")
    if not isinstance(raw, dict):
        raw = {}
    details = raw.get("prompt_tokens_details")
    prompt_tokens = _token_count(raw.get("prompt_tokens"))
    cached = _token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        calls=1,
        prompt_tokens=prompt_tokens,
        completion_tokens=_token_count(raw.get("completion_tokens")),
        cached_prompt_tokens=min(cached, prompt_tokens),  # never more cached than sent
    )


def _content_text(content: object) -> str:
    """The reply text of ``message.content``: a string, or OpenAI-style content parts
    (``[{"type": "text", "text": ...}, ...]``) joined. Anything else raises ValueError."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") not in (None, "text", "output_text"):
                continue  # e.g. an image or audio part: no text to read
            else:
                raise ValueError(f"content part without text: {str(part)[:100]}")
        if not texts:
            raise ValueError(f"content parts carry no text: {str(content)[:100]}")
        return "".join(texts)
    if content is None:
        raise ValueError("content is null (no text in the reply)")
    raise ValueError(f"content is a {type(content).__name__}, not text: {str(content)[:100]}")


class _ClientPool:
    """Several small httpx clients instead of one big one. httpcore's connection pool does work proportional
    to (connections x waiting requests) on every request, so one pool of 32 connections costs ~4 ms of CPU
    per call; pools of at most 8 bring that under 1 ms. Each request goes to the least busy client."""

    CONNECTIONS_PER_CLIENT = 8

    def __init__(self, max_connections: int, make_client: Callable[[httpx.Limits], httpx.AsyncClient]):
        n_clients = -(-max_connections // self.CONNECTIONS_PER_CLIENT)
        per_client = -(-max_connections // n_clients)
        self._limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        self._make_client = make_client
        # built on first use: a judge's client that sends a request at a time never builds the other seven
        self.clients: list[httpx.AsyncClient | None] = [None] * n_clients
        self.in_flight = [0] * n_clients

    async def post(self, url: str, *, max_bytes: int, **kwargs: Any) -> _Body:
        """POST and read the body, refusing it (:class:`ReplyTooLargeError`) once it exceeds ``max_bytes``. The
        limit counts decoded bytes while they are decoded: the request asks for no compression
        (``Accept-Encoding: identity``), and a gzip/deflate body sent anyway is inflated at most ``max_bytes + 1``
        bytes at a time (:class:`_BoundedInflater`), so a small compressed bomb costs ``max_bytes``, not gigabytes."""
        i = min(range(len(self.clients)), key=self.in_flight.__getitem__)
        client = self.clients[i]
        if client is None:
            client = self.clients[i] = self._make_client(self._limits)
        self.in_flight[i] += 1
        headers = {**(kwargs.pop("headers", None) or {}), "Accept-Encoding": "identity"}
        try:
            async with client.stream("POST", url, headers=headers, **kwargs) as resp:
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise ReplyTooLargeError(
                        f"the endpoint's response of {int(declared)} bytes exceeds the "
                        f"{max_bytes}-byte limit; not read",
                        int(declared),
                        "bytes",
                    )
                inflater = _BoundedInflater(resp.headers.get("content-encoding", ""))
                body = bytearray()
                async for raw in resp.aiter_raw():
                    for piece in inflater.feed(raw, max_bytes + 1 - len(body)):
                        body += piece
                        if len(body) > max_bytes:
                            raise ReplyTooLargeError(
                                f"the endpoint's response exceeds the {max_bytes}-byte limit "
                                "(decoded); reading stopped",
                                len(body),
                                "bytes",
                            )
                return _Body(resp.status_code, resp.headers, bytes(body))
        finally:
            self.in_flight[i] -= 1

    async def aclose(self) -> None:
        for client in self.clients:
            if client is not None:
                await client.aclose()


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """The default verifying context, shared by every client (a server building judge clients for 2,000 option
    sets grew by one CA bundle per client and event loop)."""
    return httpx.create_ssl_context()


def _connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in words: ``connection refused``, ``host not found``, else the error's text."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "host not found"
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


class OpenAICompatibleModel:
    context_window: int | None = None

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        max_concurrency: int | None = None,
        context_window: int | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 20.0,
        structured_output: StructuredOutput = "schema",
        named: bool = True,
    ):
        self.name = model
        self.requested = model  # the name sent with every request and keying the cache
        self.named = named
        """False when no model was configured (``default`` is sent): ``name`` becomes the model the endpoint says
        it served, so reports name the model as it is."""
        # First request of a structured reply: the schema by default (constrained decoding at OpenAI, vLLM,
        # Ollama costs little and saves a repair round trip); "plain" can pay off at a llama.cpp server, whose
        # grammar slows generation of long replies on a busy CPU (docs/structured_output.md).
        self.structured_output: StructuredOutput = structured_output
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self._schema_format = 0  # index into _SCHEMA_FORMATS: moves on when the endpoint refuses one
        self.max_concurrency = max_concurrency
        self.context_window = context_window
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ClientPool] = weakref.WeakKeyDictionary()

    @property
    def cache_id(self) -> str:
        """Cache identity: two endpoints may serve different models under one name (e.g. "default")."""
        return f"{self.requested}@{self.base_url}"

    def _backoff_s(self, attempt: int, exc: BaseException) -> float:
        """Exponential backoff with jitter, but never sooner than the server's Retry-After (all capped)."""
        initial, cap = self._backoff
        delay = initial * 2 ** (attempt - 1)
        delay += random.uniform(0, delay / 2)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            delay = max(delay, float(retry_after))
        return float(min(delay, cap))

    def count_tokens(self, text: str) -> int | None:
        return None

    def _pool(self) -> _ClientPool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            ssl_context = _ssl_context()  # one for the process: each holds the CA bundle (MBs, ~50 ms to build)
            pool = self._pools[loop] = _ClientPool(
                self.max_concurrency or 64,
                lambda limits: httpx.AsyncClient(
                    base_url=self.base_url, headers=headers, timeout=self.timeout_s, limits=limits, verify=ssl_context
                ),
            )
        return pool

    async def aclose(self) -> None:
        """Close the HTTP connections opened from the running event loop (optional; they also close with it)."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()

    def close_connections(self) -> None:
        """Close the connections of every event loop, from any thread (a server evicting a method instance).
        A loop that is still running closes its pool itself; one that is gone took its connections with it."""
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, pool in list(self._pools.items()):
            self._pools.pop(loop, None)
            if loop.is_closed():
                continue
            if loop is current:
                loop.create_task(pool.aclose())
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(pool.aclose(), loop)

    def _payload(self, messages: list[Message], params: GenerateParams, schema_format: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.requested,
            "messages": clean_messages(messages),  # a lone surrogate cannot be sent as UTF-8
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = params.top_logprobs
        if params.json_schema:
            schema = json.loads(params.json_schema)
            spelling = _SCHEMA_FORMATS[schema_format]
            if spelling == "json_schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
            elif spelling == "json_object+schema":
                body["response_format"] = {"type": "json_object", "schema": schema}
            else:
                body["response_format"] = {"type": "json_object"}
        elif params.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    @staticmethod
    def _refuses_schema(resp: _Body, body: dict[str, Any]) -> bool:
        """The endpoint rejected the structured response format it was sent: a 400/422 naming the format or a
        schema, or any error naming ``json_schema`` or ``response_format`` (llama-cpp-python's server answers a
        request validation error with HTTP 500, which retrying cannot fix)."""
        response_format = body.get("response_format") or {}
        if response_format.get("type") != "json_schema" and "schema" not in response_format:
            return False  # plain JSON mode: nothing left to fall back to
        text = resp.text[:2000].lower()
        if resp.status_code in (400, 422) and any(w in text for w in ("response_format", "json_schema", "schema")):
            return True
        return "json_schema" in text or "response_format" in text

    async def _post_once(self, body: dict[str, Any]) -> object:
        resp = await self._pool().post("/chat/completions", json=body, max_bytes=MAX_RESPONSE_BYTES)
        if resp.status_code >= 400 and self._refuses_schema(resp, body):
            raise _SchemaRefused(resp.text[:500])
        if resp.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:300]}", _retry_after_s(resp))
        if resp.status_code >= 400:
            text = resp.text[:500]
            if "context" in text.lower() and ("length" in text.lower() or "exceed" in text.lower()):
                raise ContextOverflowError(f"{self.name}: prompt exceeds the context window: {text}")
            raise LLMError(f"{self.name}: HTTP {resp.status_code}: {text}")
        try:
            return resp.json()
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested beyond the parser
            raise LLMError(f"{self.name}: endpoint returned non-JSON: {resp.text[:200]!r}") from exc

    def _completion(self, data: object) -> Completion:
        """The Completion in a chat-completions response; an envelope without a text reply is an LLMError."""
        where = f"{self.name} at {self.base_url}"
        if not isinstance(data, dict):
            raise LLMError(f"{where}: response is a JSON {type(data).__name__}, not an object: {str(data)[:200]}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            error = data.get("error")
            detail = f"; error: {str(error)[:300]}" if error else f": {str(data)[:300]}"
            raise LLMError(f"{where}: response has no choices{detail}")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise LLMError(f"{where}: first choice has no message: {str(choice)[:300]}")
        try:
            text = _content_text(message.get("content"))
        except ValueError as exc:
            refusal = message.get("refusal")
            why = f" (refusal: {str(refusal)[:200]})" if refusal else ""
            raise LLMError(f"{where}: unusable reply: {exc}{why}") from exc
        served = data.get("model")
        self.learn_served_name(served if isinstance(served, str) else None)
        return Completion(text=clean_text(text), model=self.name, usage=_usage(data), logprobs=parse_logprobs(choice))

    def learn_served_name(self, served: str | None) -> None:
        """With no model configured, take the name the endpoint gives the model it served (also from a cached
        reply), so a report names it instead of ``default``."""
        if not self.named and served and served.strip() and served != self.requested:
            self.name = served.strip()[:200]

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        while True:
            schema_format = self._schema_format
            try:
                return await self._generate(messages, params, schema_format)
            except _SchemaRefused:
                # Ask with the next spelling from now on (older Ollama or LM Studio builds, llama-cpp-python's
                # server, some proxies); the reply is still validated against the schema by its parser.
                # Concurrent refusals of the same spelling move on by one step, not one step each.
                if schema_format + 1 >= len(_SCHEMA_FORMATS):
                    raise LLMError(f"{self.name} at {self.base_url}: the endpoint refuses JSON output") from None
                self._schema_format = max(self._schema_format, schema_format + 1)

    async def _generate(self, messages: list[Message], params: GenerateParams, schema_format: int = 0) -> Completion:
        body = self._payload(messages, params, schema_format)
        attempts = self.max_retries + 1
        # A plain bounded loop: a retry library's per-call bookkeeping cost more CPU than everything else
        # halluscope adds to a request (measured once: docs/benchmarks.md, "One-off measurements").
        for attempt in range(1, attempts + 1):
            try:
                data = await self._post_once(body)
                break
            except httpx.ConnectError as exc:  # refused, or an unknown host: no retry can help within one check
                why = _connect_failure(exc)
                raise EndpointUnreachable(f"cannot connect to the model's endpoint at {self.base_url} ({why})") from exc
            except _RETRYABLE as exc:
                if attempt == attempts:
                    raise LLMError(
                        f"{self.name} at {self.base_url}: failed after {attempts} attempts: {exc!r}"
                    ) from exc
                await asyncio.sleep(self._backoff_s(attempt, exc))
            except httpx.HTTPError as exc:  # e.g. an invalid URL: retrying cannot help
                raise LLMError(f"{self.name} at {self.base_url}: {exc!r}") from exc
        return self._completion(data)
