"""``assert_grounded``: a test assertion that an answer is grounded in its source, failing with the findings.

    from halluscope.testing import assert_grounded

    def test_answer():
        assert_grounded(retrieved_context, answer)            # the embedded offline model by default
        assert_grounded(context, answer, method="rouge", threshold=0.4)

It checks with :func:`halluscope.check` (default method and the embedded offline model unless ``model`` names
another; every reply is kept in the response cache, so an unchanged test costs no model call on the next run)
and raises ``AssertionError`` when the report is inconsistent (a score below the threshold -- the method's
default unless given -- or any finding) or the pair could not be scored. The message lists each finding with the
answer's span (offsets and text) and the whole source evidence (its chunk too, for a source given as a list of
chunks), or, without findings, the claims judged unsupported. A model that cannot be used at all (the default
embedded model not installed, a bad endpoint setting) raises :class:`GroundingSetupError` instead: the test
could not run, it did not fail. Works under pytest (the plugin in
:mod:`halluscope.pytest_plugin` adds an ``assert_grounded`` fixture) and in any other test runner.
"""

from __future__ import annotations

from typing import Any

from halluscope.records import Report


class GroundingSetupError(RuntimeError):
    """The check could not run at all (e.g. the model is not installed): a set-up problem, not a failed check."""


def _quote(text: str, limit: int | None = 300) -> str:
    """``text`` on one line, quoted; cut at ``limit`` characters (``None``: whole, as for evidence)."""
    text = " ".join(text.split())
    return repr(text if limit is None or len(text) <= limit else text[: limit - 1] + "…")


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
                if ev.chunk is not None and ev.chunk_span is not None:
                    where += f" = chunk {ev.chunk}[{ev.chunk_span.start}:{ev.chunk_span.end}]"
                lines.append(f"     evidence {where} ({ev.relation}): {_quote(ev.text, None)}")
            if finding.fix:
                lines.append(f"     fix: {_quote(finding.fix)}")
    else:
        bad = [v for v in report.verdicts if v.label in ("unsupported", "contradicted")]
        for verdict in bad:
            lines.append(
                f"  [{verdict.label}] {_quote(verdict.claim.text)}"
                + (f": {_quote(verdict.reason)}" if verdict.reason else "")
            )
    unscored = sum(v.label == "unscored" for v in report.verdicts)
    if unscored:
        lines.append(f"{unscored} of {len(report.verdicts)} claims could not be scored")
    return "\n".join(lines)


def assert_grounded(
    source: Any,
    answer: str,
    method: Any = None,
    threshold: float | None = None,
    model: str | None = None,
    **kwargs: Any,
) -> Report:
    """Check ``answer`` against ``source`` (one text or a list of chunks); return the Report when it is grounded,
    else raise AssertionError.

    ``method``: a method name (default :data:`halluscope.DEFAULT_METHOD`) or a Method instance; ``threshold``:
    the lowest passing score (default: the method's own); ``model``: as ``--model`` (default: the embedded
    offline model); other keyword arguments (``config=``, ``llm=``, method options) go to the method.
    Raises :class:`GroundingSetupError` when the model cannot be used at all."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    from halluscope.llm import LLMError
    from halluscope.methods.base import Method
    from halluscope.methods.named import build_method

    if isinstance(method, Method):
        if model is not None or kwargs:
            raise TypeError("model, config, llm and options go with a method name, not a Method instance")
        m = method
    else:
        if threshold is not None:
            kwargs["threshold"] = threshold  # one setting with a method's own threshold option (the gate's)
        config, llm = kwargs.pop("config", None), kwargs.pop("llm", None)
        m = build_method(method, model=model, config=config, llm=llm, options=kwargs)
    if m.uses_llm:
        try:
            m.llm  # noqa: B018 - build the model now: one that cannot be built is a set-up error
        except (LLMError, ValueError, ImportError) as exc:
            raise GroundingSetupError(f"cannot check grounding with {m.name}: its model cannot be used: {exc}") from exc
    report = m.decide(m.check(source, answer), threshold)
    if isinstance(source, (list, tuple)):
        from halluscope.contexts import join_contexts

        source = join_contexts(source)[0]
    if report.score is None:
        raise AssertionError(
            "could not check that the answer is grounded in its source\n" + describe_report(report, source, answer)
        )
    if report.label == "inconsistent":
        why = (
            f"{report.method} score {report.score:.3f} < threshold {report.threshold:.3f}"
            if report.threshold is not None and report.score < report.threshold
            else f"{report.method} found {len(report.findings)} problem(s)"
        )
        raise AssertionError(f"answer is not grounded in its source: {why}\n" + describe_report(report, source, answer))
    return report
