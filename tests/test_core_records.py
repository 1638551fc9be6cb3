"""Records: validation rules and a lossless JSON round-trip (property-based)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from halluscope.records import Claim, Evidence, Example, Finding, LLMCall, Report, Span, Usage, Verdict

texts = st.text(max_size=40)
small_ints = st.integers(min_value=0, max_value=10_000)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def spans(draw) -> Span:
    start = draw(small_ints)
    return Span(start=start, end=start + draw(st.integers(min_value=0, max_value=500)))


usages = st.builds(
    Usage, calls=small_ints, prompt_tokens=small_ints, completion_tokens=small_ints, cache_hits=small_ints
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": texts}), max_size=3
)
calls = st.builds(LLMCall, model=texts, messages=messages, reply=texts, cached=st.booleans(), usage=usages)
claims = st.builds(
    Claim,
    text=texts,
    kind=st.sampled_from(["event", "descriptive", "sentence", "atomic", "paragraph"]),
    id=st.none() | texts,
    target_spans=st.lists(spans(), max_size=3),
    order=st.none() | small_ints,
)
evidences = st.builds(
    Evidence, text=texts, span=st.none() | spans(), relation=st.sampled_from(["supports", "contradicts", "related"])
)


@st.composite
def verdicts(draw) -> Verdict:
    label = draw(st.sampled_from(["supported", "unsupported", "contradicted", "unscored"]))
    reason = draw(texts)
    if label == "unscored" and not reason:
        reason = "could not parse"
    return Verdict(
        claim=draw(claims),
        label=label,
        reason=reason,
        score=draw(st.none() | finite),
        evidence=draw(st.lists(evidences, max_size=2)),
        calls=draw(st.lists(calls, max_size=2)),
    )


findings = st.builds(
    Finding,
    description=texts,
    kind=st.sampled_from(["unsupported", "contradicted", "event_order", "inconsistent", "other"]),
    target_spans=st.lists(spans(), max_size=2),
    evidence=st.lists(evidences, max_size=2),
    claim_ids=st.lists(texts, max_size=2),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53) | finite | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)


@st.composite
def reports(draw) -> Report:
    score = draw(st.none() | st.floats(min_value=0.0, max_value=1.0))
    return Report(
        method=draw(texts),
        model=draw(st.none() | texts),
        score=score,
        label=draw(st.none() | st.sampled_from(["consistent", "inconsistent"])),
        threshold=draw(st.none() | finite),
        unscored_reason=draw(texts.filter(bool)) if score is None else draw(st.none() | texts),
        subscores=draw(st.dictionaries(texts, st.none() | finite, max_size=3)),
        claims=draw(st.lists(claims, max_size=3)),
        verdicts=draw(st.lists(verdicts(), max_size=3)),
        findings=draw(st.lists(findings, max_size=3)),
        usage=draw(usages),
        elapsed_s=draw(st.floats(min_value=0, max_value=1e6)),
        calls=draw(st.lists(calls, max_size=2)),
        details=draw(st.dictionaries(texts, json_values, max_size=3)),
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reports())
def test_report_json_round_trip_is_lossless(report: Report) -> None:
    again = Report.model_validate_json(report.model_dump_json())
    assert again == report
    assert again.model_dump_json() == report.model_dump_json()


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        Example,
        id=texts,
        source=texts,
        target=texts,
        label=st.none() | st.sampled_from([0, 1]),
        human_score=st.none() | finite,
        descriptions=st.none() | st.lists(texts, max_size=3),
        gold_spans=st.none() | st.lists(spans(), max_size=3),
        group=st.none() | texts,
        difficulty=st.none() | texts,
        split=st.none() | texts,
        meta=st.dictionaries(texts, json_values, max_size=3),
    )
)
def test_example_json_round_trip_is_lossless(example: Example) -> None:
    assert Example.model_validate_json(example.model_dump_json()) == example


def test_span_rules() -> None:
    span = Span(start=4, end=9)
    assert span.of("The quick brown fox") == "quick"
    assert len(span) == 5
    assert span.overlaps(Span(start=8, end=12)) and not span.overlaps(Span(start=9, end=12))
    with pytest.raises(ValidationError):
        Span(start=5, end=4)
    with pytest.raises(ValidationError):
        Span(start=-1, end=2)


def test_unscored_needs_a_reason_and_keeps_calls() -> None:
    claim = Claim(text="A met B.")
    with pytest.raises(ValidationError):
        Verdict(claim=claim, label="unscored")
    call = LLMCall(model="fake", messages=[{"role": "user", "content": "q"}], reply="garbage")
    verdict = Verdict.unscored(claim, "no label in reply", [call])
    assert verdict.label == "unscored" and verdict.reason == "no label in reply" and verdict.calls == [call]


def test_report_score_rules_and_threshold() -> None:
    with pytest.raises(ValidationError):
        Report(method="m", score=1.5)
    with pytest.raises(ValidationError):
        Report(method="m")  # no score and no reason
    report = Report(method="m", score=0.5)
    assert report.with_threshold(0.5).label == "consistent"
    assert report.with_threshold(0.6).label == "inconsistent"
    unscored = Report(method="m", unscored_reason="LLM error").with_threshold(0.5)
    assert unscored.label is None and not unscored.scored


def test_usage_adds_up() -> None:
    total = Usage(calls=1, prompt_tokens=10, completion_tokens=2) + Usage(cache_hits=1, prompt_tokens=5)
    assert total == Usage(calls=1, prompt_tokens=15, completion_tokens=2, cache_hits=1)
    assert total.total_tokens == 17


def test_records_reject_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        Claim(text="x", confidence=0.3)  # type: ignore[call-arg]
