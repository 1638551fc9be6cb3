"""LLM backends behind one async ``generate``; see :func:`get_llm` to build one from a Config."""

from __future__ import annotations

from halluscope.config import Config
from halluscope.llm.base import (
    Completion,
    ContextOverflowError,
    EndpointUnreachable,
    GenerateParams,
    LLMError,
    Message,
    ModelAPI,
    ReplyTooLargeError,
)
from halluscope.llm.cache import RedisCache, ResponseCache, open_cache
from halluscope.llm.client import LLM, CallLog, track_calls
from halluscope.llm.fake import FakeModel
from halluscope.llm.pricing import Prices
from halluscope.llm.ratelimit import RateLimiter

__all__ = [
    "LLM",
    "CallLog",
    "Completion",
    "Config",
    "ContextOverflowError",
    "EndpointUnreachable",
    "FakeModel",
    "GenerateParams",
    "LLMError",
    "Message",
    "ModelAPI",
    "RateLimiter",
    "RedisCache",
    "ReplyTooLargeError",
    "ResponseCache",
    "build_api",
    "get_llm",
    "open_cache",
    "track_calls",
]

_EMBEDDED_APIS: dict[
    tuple[str, int, int | None, int | None, str | None, str], ModelAPI
] = {}  # loaded weights are reused across LLM clients


def build_api(config: Config) -> ModelAPI:
    """Pick the backend named by ``config.model`` (see :class:`Config.model`)."""
    model = config.model
    if model == "fake":
        raise ValueError(
            "the fake model is scripted: build FakeModel(...) and wrap it in LLM(...) yourself, "
            "or name a script: fake:script.json (docs/testing.md)"
        )
    if model is not None and model.startswith("fake:"):
        return FakeModel.from_script(model.split(":", 1)[1])  # replies keyed by reply type (FakeModel.by_reply)
    if model is None and not config.base_url:
        model = "embedded"
    if model is not None and (model == "embedded" or model.startswith("embedded:")):
        from halluscope.llm.embedded import EmbeddedModel, default_embedded_model

        name = model.split(":", 1)[1] if ":" in model else (config.embedded_model or default_embedded_model())
        way = None if config.structured_output == "auto" else config.structured_output
        key = (name, config.embedded_n_ctx, config.embedded_threads, config.seed, way, config.embedded_grammar)
        if key not in _EMBEDDED_APIS:
            _EMBEDDED_APIS[key] = EmbeddedModel(
                name,
                n_ctx=config.embedded_n_ctx,
                n_threads=config.embedded_threads,
                seed=config.seed or 0,
                structured_output=way,
                grammar=config.embedded_grammar,
            )
        return _EMBEDDED_APIS[key]
    from halluscope.llm.litellm_backend import litellm_model_name

    litellm_model = litellm_model_name(model, config.base_url)
    if litellm_model is not None:
        from halluscope.llm.litellm_backend import LiteLLMModel  # imports litellm (optional extra) now

        return LiteLLMModel(
            litellm_model,
            api_base=config.base_url,
            api_key=config.api_key,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            max_concurrency=config.max_concurrency,
        )
    if not config.base_url:
        raise ValueError(
            f"model {model!r} needs an OpenAI-compatible endpoint: set --base-url / HALLUSCOPE_BASE_URL "
            "(or OPENAI_BASE_URL, e.g. https://api.openai.com/v1)"
        )
    from halluscope.llm.openai_compat import OpenAICompatibleModel

    return OpenAICompatibleModel(
        model or "default",
        config.base_url,
        config.api_key,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
        max_concurrency=config.max_concurrency,
        structured_output="schema" if config.structured_output == "auto" else config.structured_output,
        named=model is not None,
    )


def get_llm(config: Config | None = None, api: ModelAPI | None = None) -> LLM:
    """An :class:`LLM` client for ``config`` (or for an explicit backend ``api``)."""
    config = config or Config()
    api = api or build_api(config)
    cache = open_cache(config)  # None when config.cache is off; SQLite or Redis by config.cache_url
    params = GenerateParams(temperature=config.temperature, max_tokens=config.max_tokens, seed=config.seed)
    limiter = None
    if config.requests_per_minute or config.tokens_per_minute:
        limiter = RateLimiter(config.requests_per_minute, config.tokens_per_minute)
    prices = None
    if config.price_in is not None or config.price_out is not None:
        prices = Prices(config.price_in or 0.0, config.price_out or 0.0)
    return LLM(
        api,
        cache=cache,
        max_concurrency=config.max_concurrency,
        default_params=params,
        rate_limiter=limiter,
        prices=prices,
    )
