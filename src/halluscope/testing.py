"""``assert_grounded``: a test assertion that an answer is grounded in its source, failing with the findings.

    from halluscope.testing import assert_grounded

    def test_answer():
        assert_grounded(retrieved_context, answer)            # the embedded offline model by default
        assert_grounded(context, answer, method="rouge", threshold=0.4)

It checks with :func:`halluscope.check` (default method and the embedded offline model unless ``model`` names
another; every reply is kept in the response cache, so an unchanged test costs no model call on the next run)
and raises ``AssertionError`` when the score is below the threshold (the method's default unless given) or the
pair could not be scored. The message lists each finding with the answer's span (offsets and text) and the
source evidence, or, without findings, the claims judged unsupported. Works under pytest (the plugin in
:mod:`halluscope.pytest_plugin` adds an ``assert_grounded`` fixture) and in any other test runner.
"""

from __future__ import annotations

from typing import Any

from halluscope.records import Report


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def describe_report(report: Report, source: str, answer: str) -> str:
    """What a failed grounding check says: the verdict line, then the findings with spans and evidence."""
    score = "unscored" if report.score is None else f"{report.score:.3f}"
    threshold = "-" if report.threshold is None else f"{report.threshold:.3f}"
    lines = [f"{report.method} ({report.model or 'no LLM'}): score {score}, threshold {threshold}"]
    if report.unscored_reason:
        lines.append(f"could not score: {report.unscored_reason}")
    if report.findings:
        lines.append(f"findings ({len(report.findings)}):")
        for n, finding in enumerate(report.findings, 1):
            lines.append(f"  {n}. [{finding.kind}] {finding.description}")
            for span in finding.target_spans:
                lines.append(f"     answer[{span.start}:{span.end}]: {_quote(span.of(answer))}")
            for ev in finding.evidence:
                where = f"source[{ev.span.start}:{ev.span.end}]" if ev.span else "source (not located)"
                lines.append(f"     evidence {where} ({ev.relation}): {_quote(ev.text)}")
    else:
        bad = [v for v in report.verdicts if v.label in ("unsupported", "contradicted")]
        for verdict in bad:
            lines.append(f"  [{verdict.label}] {_quote(verdict.claim.text)}"
                         + (f": {_quote(verdict.reason)}" if verdict.reason else ""))
    unscored = sum(v.label == "unscored" for v in report.verdicts)
    if unscored:
        lines.append(f"{unscored} of {len(report.verdicts)} claims could not be scored")
    return "\n".join(lines)


def assert_grounded(source: str, answer: str, method: Any = None, threshold: float | None = None,
                    model: str | None = None, **kwargs: Any) -> Report:
    """Check ``answer`` against ``source``; return the Report when it is grounded, else raise AssertionError.

    ``method``: a method name (default :data:`halluscope.DEFAULT_METHOD`) or a Method instance; ``threshold``:
    the lowest passing score (default: the method's own); ``model``: as ``--model`` (default: the embedded
    offline model); other keyword arguments (``config=``, ``llm=``, method options) go to
    :func:`halluscope.check`."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    import halluscope
    from halluscope.methods.base import Method

    if isinstance(method, Method):
        if model is not None or kwargs:
            raise TypeError("model, config, llm and options go with a method name, not a Method instance")
        report = method.check(source, answer)
    else:
        report = halluscope.check(source, answer, method, model, **kwargs)
    if threshold is not None:
        report = report.with_threshold(threshold)
    if report.score is None:
        raise AssertionError("could not check that the answer is grounded in its source\n"
                             + describe_report(report, source, answer))
    if report.threshold is not None and report.score < report.threshold:
        raise AssertionError(f"answer is not grounded in its source: {report.method} score {report.score:.3f} < "
                             f"threshold {report.threshold:.3f}\n" + describe_report(report, source, answer))
    return report
