"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio, ...)."""

from __future__ import annotations

import asyncio
import random
import weakref

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from halluscope.llm.base import Completion, ContextOverflowError, GenerateParams, LLMError, Message
from halluscope.records import Usage

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after_s(resp: httpx.Response) -> float | None:
    """The server's Retry-After in seconds (numeric form only; HTTP dates are ignored)."""
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (_Retryable, httpx.TimeoutException, httpx.TransportError))


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
    ):
        self.name = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self.context_window = context_window
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def cache_id(self) -> str:
        """Cache identity: two endpoints may serve different models under one name (e.g. "default")."""
        return f"{self.name}@{self.base_url}"

    def _wait(self, retry_state: RetryCallState) -> float:
        """Exponential backoff with jitter, but never sooner than the server's Retry-After (capped)."""
        initial, _ = self._backoff
        delay = initial * 2 ** (retry_state.attempt_number - 1)
        delay += random.uniform(0, delay / 2)
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self._backoff[1])

    def count_tokens(self, text: str) -> int | None:
        return None

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            limits = httpx.Limits(max_connections=self.max_concurrency or 64, max_keepalive_connections=64)
            client = httpx.AsyncClient(
                base_url=self.base_url, headers=headers, timeout=self.timeout_s, limits=limits
            )
            self._clients[loop] = client
        return client

    def _payload(self, messages: list[Message], params: GenerateParams) -> dict:
        body: dict = {
            "model": self.name,
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    async def _post_once(self, body: dict) -> dict:
        resp = await self._client().post("/chat/completions", json=body)
        if resp.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:300]}", _retry_after_s(resp))
        if resp.status_code >= 400:
            text = resp.text[:500]
            if "context" in text.lower() and ("length" in text.lower() or "exceed" in text.lower()):
                raise ContextOverflowError(f"{self.name}: prompt exceeds the context window: {text}")
            raise LLMError(f"{self.name}: HTTP {resp.status_code}: {text}")
        try:
            return resp.json()
        except ValueError as exc:
            raise LLMError(f"{self.name}: endpoint returned non-JSON: {resp.text[:200]!r}") from exc

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        body = self._payload(messages, params)
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_is_retryable),
                stop=stop_after_attempt(self.max_retries + 1),
                wait=self._wait,
                reraise=True,
            ):
                with attempt:
                    data = await self._post_once(body)
        except (_Retryable, httpx.HTTPError) as exc:
            raise LLMError(
                f"{self.name} at {self.base_url}: failed after {self.max_retries + 1} attempts: {exc}"
            ) from exc
        try:
            text = data["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMError(f"{self.name}: unexpected response shape: {str(data)[:300]}") from exc
        raw_usage = data.get("usage") or {}
        usage = Usage(
            calls=1,
            prompt_tokens=int(raw_usage.get("prompt_tokens") or 0),
            completion_tokens=int(raw_usage.get("completion_tokens") or 0),
        )
        return Completion(text=text, model=self.name, usage=usage)
