"""OpenTelemetry spans: one per check, per pipeline stage and per LLM call (GenAI semantic conventions), received
by the SDK's in-memory exporter; nothing made (nor OpenTelemetry imported) while tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk (the dev dependency group)")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from halluscope import Config  # noqa: E402
from halluscope.llm import LLM, FakeModel  # noqa: E402
from halluscope.methods import get_method  # noqa: E402
from tests.test_factscore import JUDGE, SOURCE, TARGET  # noqa: E402

_EXPORTER = InMemorySpanExporter()


def _install_provider() -> None:
    """The global tracer provider can be set once per process: add our exporter to whichever SDK provider is set."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "another non-SDK tracer provider is installed"
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))


_install_provider()


@pytest.fixture
def spans():
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def fake_llm(**kwargs) -> LLM:
    return LLM(FakeModel(by_reply=JUDGE, name="fake-judge", **kwargs), cache=None)


def test_one_span_per_stage_and_llm_call_with_token_counts(spans):
    report = get_method("factscore", llm=fake_llm(), config=Config(otel=True), deduplicator="fuzzy").check(
        SOURCE, TARGET
    )
    finished = spans.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)

    (check,) = by_name["halluscope.check factscore"]
    stage_names = sorted(
        s.attributes["halluscope.stage.protocol"] for s in finished if s.name.startswith("halluscope.stage")
    )
    assert stage_names == sorted(["decomposer", "context_selector", "verifier", "aggregator", "localizer"])
    llm_spans = by_name["chat fake-judge"]
    assert len(llm_spans) == report.usage.calls == 4  # one decomposition + three verifications

    for span in llm_spans:
        attrs = span.attributes
        assert span.kind == SpanKind.CLIENT
        assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.provider.name"] == "halluscope.fake"
        assert attrs["gen_ai.request.model"] == "fake-judge" and attrs["gen_ai.response.model"] == "fake-judge"
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert attrs["halluscope.cache_hit"] is False
    # the spans' token counts are the Report's (the same numbers, not estimates)
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in llm_spans) == report.usage.prompt_tokens
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in llm_spans) == report.usage.completion_tokens

    # nesting: stages under the check, LLM calls under the stage that made them
    stage_by_id = {s.context.span_id: s for s in finished if s.name.startswith("halluscope.stage")}
    assert all(s.parent.span_id == check.context.span_id for s in stage_by_id.values())
    parents = sorted(stage_by_id[s.parent.span_id].attributes["halluscope.stage.protocol"] for s in llm_spans)
    assert parents == ["decomposer", "verifier", "verifier", "verifier"]
    assert {s.context.trace_id for s in finished} == {check.context.trace_id}

    # the check span carries the outcome (GenAI evaluation attributes and event)
    assert check.attributes["gen_ai.evaluation.score.value"] == pytest.approx(report.score)
    assert check.attributes["gen_ai.evaluation.score.label"] == report.label
    assert check.attributes["gen_ai.usage.input_tokens"] == report.usage.prompt_tokens
    (event,) = [e for e in check.events if e.name == "gen_ai.evaluation.result"]
    assert event.attributes["gen_ai.evaluation.name"] == "factscore"


def test_cache_hits_are_spans_without_tokens(spans, tmp_path):
    from halluscope.llm import ResponseCache

    cache = ResponseCache(tmp_path / "c.sqlite")
    config = Config(otel=True)
    for _ in range(2):
        llm = LLM(FakeModel(by_reply=JUDGE, name="fake-judge"), cache=cache)
        get_method("factscore", llm=llm, config=config, deduplicator="fuzzy").check(SOURCE, TARGET)
    llm_spans = [s for s in spans.get_finished_spans() if s.name == "chat fake-judge"]
    assert len(llm_spans) == 8
    hits = [s for s in llm_spans if s.attributes["halluscope.cache_hit"]]
    assert len(hits) == 4 and all(s.attributes["gen_ai.usage.input_tokens"] == 0 for s in hits)


def test_cached_prompt_tokens_reported_when_usage_has_them(spans):
    from types import SimpleNamespace

    from halluscope import tracing

    # a Usage carrying provider-cached prompt tokens (an optional field some backends fill)
    usage = SimpleNamespace(prompt_tokens=50, completion_tokens=5, cached_prompt_tokens=32)
    completion = SimpleNamespace(model="m", usage=usage, cached=False)
    with trace.get_tracer("test").start_as_current_span("x") as span:
        tracing.record_completion(span, completion)  # type: ignore[arg-type]
    (finished,) = spans.get_finished_spans()
    assert finished.attributes["gen_ai.usage.cache_read.input_tokens"] == 32
    assert finished.attributes["gen_ai.usage.input_tokens"] == 50


def test_no_spans_when_off(spans):
    get_method("factscore", llm=fake_llm(), config=Config(), deduplicator="fuzzy").check(SOURCE, TARGET)
    assert spans.get_finished_spans() == ()


def test_env_var_turns_it_on(spans, monkeypatch):
    monkeypatch.setenv("HALLUSCOPE_OTEL", "1")
    report = get_method("rouge", config=Config()).check("The cat sat on the mat.", "The cat sat.")
    (check,) = spans.get_finished_spans()
    assert report.score == 1.0  # every target word is in the source
    assert check.name == "halluscope.check rouge" and check.attributes["gen_ai.evaluation.score.value"] == 1.0


def test_failed_llm_call_span_records_the_error(spans):
    from halluscope.llm import LLMError

    llm = LLM(FakeModel([LLMError("backend down")], name="broken"), cache=None)
    report = get_method("geval", llm=llm, config=Config(otel=True)).check(SOURCE, TARGET)
    (call,) = [s for s in spans.get_finished_spans() if s.name == "chat broken"]
    assert not call.status.is_ok and any("backend down" in str(e.attributes) for e in call.events)
    assert report.score is None and "backend down" in (report.unscored_reason or "")


def test_tracing_off_imports_no_opentelemetry():
    code = (
        "import sys, halluscope; r = halluscope.check('The cat sat on the mat.', 'The cat sat.', method='rouge');"
        "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "HALLUSCOPE_OTEL"},
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
