"""OpenTelemetry spans for checks, pipeline stages and LLM calls (off by default).

Turn it on with ``Config(otel=True)`` / ``HALLUSCOPE_OTEL=1`` / ``otel = true`` in the config file, with the
``otel`` extra installed (``pip install 'halluscope[otel]'``: the OpenTelemetry API only; the application
configures the SDK and its exporter, as for every instrumented library). Spans go to the global tracer
provider. While it is off, nothing here imports OpenTelemetry and each hook costs one context-variable read.

Spans (names and attributes follow the OpenTelemetry GenAI semantic conventions where they have one):

- ``halluscope.check <method>``: one per checked pair; ``gen_ai.evaluation.name``, the score, label and
  unscored reason, summed token usage, and a ``gen_ai.evaluation.result`` event;
- ``halluscope.stage <protocol>``: one per stage run of a claim pipeline (decomposer, context selector,
  verifier, aggregator, localizer), with ``halluscope.stage.name``;
- ``chat <model>`` (kind CLIENT): one per LLM request, with ``gen_ai.operation.name``,
  ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.request.temperature`` / ``max_tokens`` /
  ``seed``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
  ``gen_ai.usage.cache_read.input_tokens`` when the backend reports cached prompt tokens, and
  ``halluscope.cache_hit`` for replies served by halluscope's own response cache (no tokens spent).

Spans are made only inside a check whose Config has ``otel`` on: the tracer travels in a context variable,
so the tasks a check spawns (batched verifiers, retrieval) inherit it and nothing global is switched.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm.base import Completion, GenerateParams
    from halluscope.records import Report

INSTRUMENTATION_NAME = "halluscope"
# gen_ai.provider.name by backend class, for backends without a ``provider`` attribute
PROVIDER_BY_BACKEND = {"OpenAICompatibleModel": "openai", "EmbeddedModel": "llama_cpp", "FakeModel": "halluscope.fake"}

_tracer: ContextVar[Any | None] = ContextVar("halluscope_tracer", default=None)
_warned_missing = False

# Usage fields a backend may fill with prompt tokens served from the provider's cache (read with getattr:
# the field is optional on Usage).
CACHED_TOKEN_FIELDS = ("cached_prompt_tokens", "cached_tokens", "cache_read_tokens", "prompt_cached_tokens")


def _load_tracer() -> Any | None:
    """The tracer of the global provider, or None (with one warning) when OpenTelemetry is not installed."""
    global _warned_missing
    try:
        from opentelemetry import trace
    except ImportError:
        if not _warned_missing:
            _warned_missing = True
            warnings.warn(
                "otel is on but OpenTelemetry is not installed: pip install 'halluscope[otel]' "
                "(checks run without spans)",
                RuntimeWarning,
                stacklevel=3,
            )
        return None
    from halluscope._version import package_version

    return trace.get_tracer(INSTRUMENTATION_NAME, package_version())


def active() -> bool:
    """Whether spans are being made in the current context."""
    return _tracer.get() is not None


@contextmanager
def check_span(method: str, model: str | None, enabled: bool) -> Iterator[Any | None]:
    """The span of one check (None when tracing is off); stage and LLM spans opened inside nest under it."""
    tracer = _load_tracer() if enabled else None
    if tracer is None:
        yield None
        return
    token = _tracer.set(tracer)
    attributes: dict[str, Any] = {"gen_ai.evaluation.name": method, "halluscope.method": method}
    if model:
        attributes["gen_ai.request.model"] = model
    try:
        with tracer.start_as_current_span(f"halluscope.check {method}", attributes=attributes) as span:
            yield span
    finally:
        _tracer.reset(token)


def record_report(span: Any | None, report: Report) -> None:
    """Put a finished Report's outcome and usage on its check span."""
    if span is None:
        return
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": report.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": report.usage.completion_tokens,
        "halluscope.llm_calls": report.usage.calls,
        "halluscope.cache_hits": report.usage.cache_hits,
        "halluscope.findings": len(report.findings),
    }
    cached = cached_input_tokens(report.usage)
    if cached is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = cached
    if report.model:
        attributes["gen_ai.response.model"] = report.model
    event: dict[str, Any] = {"gen_ai.evaluation.name": report.method}
    if report.score is not None:
        attributes["gen_ai.evaluation.score.value"] = report.score
        event["gen_ai.evaluation.score.value"] = report.score
    if report.label is not None:
        attributes["gen_ai.evaluation.score.label"] = report.label
        event["gen_ai.evaluation.score.label"] = report.label
    if report.unscored_reason:
        attributes["halluscope.unscored_reason"] = report.unscored_reason[:1000]
        event["gen_ai.evaluation.explanation"] = report.unscored_reason[:1000]
    span.set_attributes(attributes)
    span.add_event("gen_ai.evaluation.result", event)


@contextmanager
def stage_span(protocol: str, name: str) -> Iterator[Any | None]:
    """A span around one stage run (None outside a traced check)."""
    tracer = _tracer.get()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(
        f"halluscope.stage {protocol}",
        attributes={"halluscope.stage.protocol": protocol, "halluscope.stage.name": name},
    ) as span:
        yield span


@contextmanager
def llm_span(model: str, params: GenerateParams, backend: object) -> Iterator[Any | None]:
    """A GenAI client span around one LLM request to ``backend`` (None outside a traced check)."""
    tracer = _tracer.get()
    if tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider_name(backend),
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": params.temperature,
        "gen_ai.request.max_tokens": params.max_tokens,
    }
    if params.seed is not None:
        attributes["gen_ai.request.seed"] = params.seed
    if params.json_mode or params.json_schema:
        attributes["gen_ai.output.type"] = "json"
    with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


def record_completion(span: Any | None, completion: Completion) -> None:
    """Put a reply's model and token counts on its LLM span."""
    if span is None:
        return
    usage = completion.usage
    attributes: dict[str, Any] = {
        "gen_ai.response.model": completion.model,
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "halluscope.cache_hit": completion.cached,
    }
    cached = cached_input_tokens(usage)
    if cached is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = cached
    span.set_attributes(attributes)


def provider_name(backend: object) -> str:
    """The backend's ``provider`` attribute (e.g. a LiteLLM provider), else a name for its class."""
    provider = getattr(backend, "provider", None)
    if isinstance(provider, str) and provider:
        return provider
    name = type(backend).__name__
    return PROVIDER_BY_BACKEND.get(name, name)


def cached_input_tokens(usage: Any) -> int | None:
    """Prompt tokens the provider served from its cache, when the Usage record carries that number."""
    for name in CACHED_TOKEN_FIELDS:
        value = getattr(usage, name, None)
        if isinstance(value, int):
            return value
    return None
