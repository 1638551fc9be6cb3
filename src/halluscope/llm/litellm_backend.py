"""Any provider LiteLLM speaks (Anthropic, Bedrock, Vertex AI, Gemini, Azure, Mistral, Cohere, ...) behind the
one ``generate(messages, params) -> Completion`` (optional: ``pip install 'halluscope[litellm]'``).

Selected by the model string (see :func:`litellm_model_name`): ``litellm:<LiteLLM model>`` always, and a
``<provider>/<model>`` string whose provider is in :data:`LITELLM_PROVIDERS` when no OpenAI-compatible
``base_url`` is configured. Everything above the backend is shared with the OpenAI-compatible one: the
response cache, single flight, concurrency, the rate limiter and usage accounting live in
:class:`halluscope.llm.client.LLM`, and a reply is read as strictly (same content and usage rules, a reply
without text is an :class:`LLMError`, never an empty string). LiteLLM's own retries are turned off: the same
bounded exponential backoff as the OpenAI-compatible backend retries 408/409/425/429/5xx and timeouts.

The cost of each call comes from LiteLLM's cost map (``litellm.cost_per_token``) when the model is in it;
otherwise ``Usage.cost_usd`` stays ``None``. ``litellm`` is imported when this backend is built, never by
``import halluscope``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

from halluscope.llm.base import Completion, ContextOverflowError, GenerateParams, LLMError, Message
from halluscope.llm.cache import clean_messages, clean_text
from halluscope.llm.openai_compat import _RETRY_STATUS, _content_text, _usage

LITELLM_PREFIX = "litellm:"

LITELLM_PROVIDERS: tuple[str, ...] = (
    "anthropic",
    "azure",
    "azure_ai",
    "bedrock",
    "cohere",
    "deepseek",
    "fireworks_ai",
    "gemini",
    "groq",
    "mistral",
    "openrouter",
    "perplexity",
    "sagemaker",
    "together_ai",
    "vertex_ai",
    "watsonx",
    "xai",
)
"""Provider prefixes that select LiteLLM without the ``litellm:`` prefix (only when no ``base_url`` is set:
before this backend existed such a string without an endpoint was an error, so no working model string
changes meaning). Any other LiteLLM route, e.g. ``openai/<name>`` or ``ollama/<name>``, takes ``litellm:``."""


def litellm_model_name(model: str | None, base_url: str | None) -> str | None:
    """The LiteLLM model string that ``model`` selects, or None when it is not a LiteLLM model string."""
    if not model:
        return None
    if model.startswith(LITELLM_PREFIX):
        name = model[len(LITELLM_PREFIX) :].strip()
        if not name:
            raise ValueError(
                "'litellm:' needs a LiteLLM model after it, e.g. litellm:anthropic/claude-3-5-haiku-latest"
            )
        return name
    provider, slash, rest = model.partition("/")
    if slash and rest and provider in LITELLM_PROVIDERS and not base_url:
        return model
    return None


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


class LiteLLMModel:
    max_concurrency: int | None = None
    context_window: int | None = None

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        max_concurrency: int | None = None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 20.0,
    ):
        # Prices from the cost map bundled with the installed LiteLLM, not fetched from GitHub at import (which
        # stalls an offline import for seconds); set LITELLM_LOCAL_MODEL_COST_MAP=False to fetch the latest.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm
        except ImportError as exc:
            raise LLMError(f"model {model!r} needs LiteLLM: pip install 'halluscope[litellm]'") from exc
        litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banner on stdout with every error
        self._litellm = litellm
        self.name = model
        self.api_base = api_base.rstrip("/") if api_base else None
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self._backoff = (backoff_initial_s, backoff_max_s)

    @property
    def cache_id(self) -> str:
        return f"{LITELLM_PREFIX}{self.name}@{self.api_base or ''}"

    def count_tokens(self, text: str) -> int | None:
        return None

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The price of one call from LiteLLM's cost map; None when the model is not in it (or no tokens
        were reported: a price of nothing counted would be made up)."""
        if prompt_tokens <= 0 and completion_tokens <= 0:
            return None
        try:
            prompt_cost, completion_cost = self._litellm.cost_per_token(
                model=self.name, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
        except Exception:  # LiteLLM raises for a model it has no price for
            return None
        try:
            return float(prompt_cost) + float(completion_cost)
        except (TypeError, ValueError):
            return None

    def _request(self, messages: list[Message], params: GenerateParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.name,
            "messages": clean_messages(messages),
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "timeout": self.timeout_s,
            "num_retries": 0,  # retried below, with the same policy as the OpenAI-compatible backend
            "drop_params": True,  # a provider without e.g. ``seed`` ignores it instead of refusing the call
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.json_schema:
            schema = json.loads(params.json_schema)
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
        elif params.json_mode:
            body["response_format"] = {"type": "json_object"}
        if self.api_base:
            body["api_base"] = self.api_base
        if self.api_key:
            body["api_key"] = self.api_key
        elif self.api_base and self.name.startswith("openai/"):
            # a local OpenAI-compatible server (Ollama, vLLM, llama.cpp) needs no key, but LiteLLM's OpenAI route
            # refuses to send a request without one: send a placeholder, as the OpenAI-compatible backend sends none
            body["api_key"] = "no-key"
        return body

    def _retryable(self, exc: BaseException) -> bool:
        litellm = self._litellm
        if isinstance(exc, (litellm.Timeout, litellm.APIConnectionError)):
            return True
        return _status(exc) in _RETRY_STATUS

    def _backoff_s(self, attempt: int) -> float:
        initial, cap = self._backoff
        delay: float = initial * 2 ** (attempt - 1)
        return min(cap, delay + random.uniform(0, delay / 2))

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        litellm = self._litellm
        request = self._request(messages, params)
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                response = await litellm.acompletion(**request)
                break
            except litellm.ContextWindowExceededError as exc:
                raise ContextOverflowError(f"{self.name}: prompt exceeds the context window: {exc}") from exc
            except Exception as exc:  # LiteLLM maps every provider's errors onto its own exception types
                if not self._retryable(exc):
                    raise LLMError(f"{self.name} (LiteLLM): {type(exc).__name__}: {str(exc)[:500]}") from exc
                if attempt == attempts:
                    raise LLMError(f"{self.name} (LiteLLM): failed after {attempts} attempts: {exc!r}"[:800]) from exc
                await asyncio.sleep(self._backoff_s(attempt))
        return self._completion(response)

    def _completion(self, response: object) -> Completion:
        """The Completion in LiteLLM's (OpenAI-shaped) response; a reply without text is an LLMError."""
        dump = getattr(response, "model_dump", None)
        data = dump() if callable(dump) else response
        if not isinstance(data, dict):
            raise LLMError(f"{self.name} (LiteLLM): response is a {type(data).__name__}, not an object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise LLMError(f"{self.name} (LiteLLM): response has no choices: {str(data)[:300]}")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise LLMError(f"{self.name} (LiteLLM): first choice has no message: {str(choices[0])[:300]}")
        try:
            text = _content_text(message.get("content"))
        except ValueError as exc:
            raise LLMError(f"{self.name} (LiteLLM): unusable reply: {exc}") from exc
        usage = _usage(data)
        usage = usage.model_copy(update={"cost_usd": self.cost_usd(usage.prompt_tokens, usage.completion_tokens)})
        return Completion(text=clean_text(text), model=self.name, usage=usage)
