"""halluscope: find, locate, explain and fix hallucinations in generated text against its source.

    >>> import halluscope
    >>> report = halluscope.check(source, target, method="rouge")
    >>> report.score, report.findings

``source`` is one text or a list of retrieved chunks (a RAG pipeline's contexts); with a list, every piece of
evidence names its chunk (:mod:`halluscope.contexts`).
"""

import collections.abc as _abc
import typing as _t

from halluscope._version import package_version as _package_version
from halluscope.config import DEFAULT_METHOD, Config
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Usage, Verdict
from halluscope.sync import run_sync as _run_sync

if _t.TYPE_CHECKING:  # pragma: no cover
    from halluscope.methods.base import Method

__all__ = [
    "Claim",
    "Config",
    "Evidence",
    "Finding",
    "LLMCall",
    "Report",
    "Span",
    "Usage",
    "Verdict",
    "acheck",
    "acheck_citations",
    "acheck_many",
    "aevaluate",
    "check",
    "check_citations",
    "check_many",
    "evaluate",
    "aguard",
    "aguard_stream",
    "guard",
    "guard_stream",
    "DEFAULT_METHOD",
    "__version__",
]
__version__ = _package_version()

_Source = str | _abc.Sequence[str]
"""One source text, or a list of retrieved chunks."""


def _build_method(method: "str | None", **settings: _t.Any) -> "Method":
    from halluscope.methods.named import build_method  # imported when used: `import halluscope` stays light

    return build_method(method, **settings)


async def acheck(
    source: _Source,
    target: str,
    method: "str | None" = None,
    model: "str | None" = None,
    *,
    config: "Config | None" = None,
    llm: _t.Any = None,
    **options: _t.Any,
) -> Report:
    """The async form of :func:`check`."""
    return await _build_method(method, model=model, config=config, llm=llm, options=options).acheck(source, target)


def check(
    source: _Source,
    target: str,
    method: "str | None" = None,
    model: "str | None" = None,
    *,
    config: "Config | None" = None,
    llm: _t.Any = None,
    **options: _t.Any,
) -> Report:
    """Check ``target`` against ``source`` with the named method (see ``halluscope methods``; default: the config
    file's ``method``, else :data:`DEFAULT_METHOD`). ``threshold=`` sets the threshold the report is labelled with.

    ``source`` is one text or a list of chunks (joined; each Evidence then names its ``chunk``)."""
    return _run_sync(acheck(source, target, method, model, config=config, llm=llm, **options))


async def acheck_many(
    pairs: "_abc.Iterable[tuple[_Source, str]]",
    method: "str | None" = None,
    model: "str | None" = None,
    *,
    config: "Config | None" = None,
    llm: _t.Any = None,
    **options: _t.Any,
) -> "list[Report]":
    """The async form of :func:`check_many`."""
    return await _build_method(method, model=model, config=config, llm=llm, options=options).acheck_many(pairs)


def check_many(
    pairs: "_abc.Iterable[tuple[_Source, str]]",
    method: "str | None" = None,
    model: "str | None" = None,
    *,
    config: "Config | None" = None,
    llm: _t.Any = None,
    **options: _t.Any,
) -> "list[Report]":
    """Check many ``(source, target)`` pairs concurrently; a bad pair becomes an unscored Report."""
    return _run_sync(acheck_many(pairs, method, model, config=config, llm=llm, **options))


def evaluate(
    data: _t.Any,
    source: "str | None" = None,
    target: "str | None" = None,
    method: _t.Any = None,
    model: "str | None" = None,
    **kwargs: _t.Any,
) -> _t.Any:
    """Check every row of a DataFrame (or of a list of dicts) -> a pandas DataFrame with score, label,
    unscored reason, findings and usage per row; also inside a running event loop. Column names default to
    ``source``/``target``, RAGAS's ``retrieved_contexts``/``response`` or DeepEval's
    ``retrieval_context``/``actual_output`` (a cell may hold a list of chunks). See :mod:`halluscope.tabular`
    (needs ``pip install 'halluscope[dataframe]'``)."""
    from halluscope.tabular import evaluate as _evaluate

    return _evaluate(data, source, target, method, model, **kwargs)


async def aevaluate(
    data: _t.Any,
    source: "str | None" = None,
    target: "str | None" = None,
    method: _t.Any = None,
    model: "str | None" = None,
    **kwargs: _t.Any,
) -> _t.Any:
    """The async form of :func:`evaluate`."""
    from halluscope.tabular import aevaluate as _aevaluate

    return await _aevaluate(data, source, target, method, model, **kwargs)


def check_citations(
    contexts: "_abc.Sequence[str]",
    answer: str,
    *,
    style: "str | None" = None,
    uncited: str = "flag",
    threshold: float = 0.5,
    llm: _t.Any = None,
    config: "Config | None" = None,
) -> Report:
    """Check every citation of ``answer`` against ``contexts`` (the chunks its markers ``[1]``, ``[^1]`` or
    ``(Source 1)`` number from 1) with the verdict-first scorer: citation recall and precision as in the ALCE
    benchmark, and a finding per wrong citation naming the chunk that supports the sentence
    (:mod:`halluscope.methods.citations`, docs/citations.md)."""
    return _run_sync(
        acheck_citations(contexts, answer, style=style, uncited=uncited, threshold=threshold, llm=llm, config=config)
    )


async def acheck_citations(
    contexts: "_abc.Sequence[str]",
    answer: str,
    *,
    style: "str | None" = None,
    uncited: str = "flag",
    threshold: float = 0.5,
    llm: _t.Any = None,
    config: "Config | None" = None,
) -> Report:
    """The async form of :func:`check_citations`."""
    from halluscope.methods.citations import acheck_citations as _acheck

    return await _acheck(
        contexts,
        answer,
        style=style,
        uncited=uncited,  # type: ignore[arg-type]
        threshold=threshold,
        llm=llm,
        config=config,
    )


def guard(contexts: "_abc.Sequence[str]", answer: str, on_fail: str = "filter", **options: _t.Any) -> _t.Any:
    """Check ``answer`` against ``contexts`` sentence by sentence and act on what fails: ``on_fail`` is
    ``filter`` (remove unsupported sentences, point wrong citations at the chunk that supports them), ``fix``
    (apply only fixes the same scorer re-verified), ``raise`` (:class:`~halluscope.methods.guard.GuardError` with
    the findings) or ``annotate`` (mark the spans). Returns a :class:`~halluscope.methods.guard.GuardResult`:
    ``.text`` to ship and ``.report``. Options: ``style``, ``uncited`` (default ``check``), ``threshold``, ``llm``,
    ``config`` (docs/guard.md)."""
    return _run_sync(aguard(contexts, answer, on_fail, **options))


async def aguard(contexts: "_abc.Sequence[str]", answer: str, on_fail: str = "filter", **options: _t.Any) -> _t.Any:
    """The async form of :func:`guard`."""
    from halluscope.methods.guard import aguard as _aguard

    return await _aguard(contexts, answer, on_fail, **options)  # type: ignore[arg-type]


def guard_stream(
    contexts: "_abc.Sequence[str]", tokens: "_abc.Iterable[str]", on_fail: str = "filter", **options: _t.Any
) -> _t.Any:
    """Guard a streamed answer: each sentence is checked as soon as it is complete, and the sentences are yielded
    in order (:class:`~halluscope.methods.guard.Released`, ``.text`` None when removed), none before its check.
    Options as for :func:`guard`."""
    from halluscope.methods.guard import guard_stream as _guard_stream

    return _guard_stream(contexts, tokens, on_fail, **options)  # type: ignore[arg-type]


def aguard_stream(contexts: "_abc.Sequence[str]", tokens: _t.Any, on_fail: str = "filter", **options: _t.Any) -> _t.Any:
    """The async form of :func:`guard_stream` (``tokens``: an async or a plain iterable of text pieces)."""
    from halluscope.methods.guard import aguard_stream as _aguard_stream

    return _aguard_stream(contexts, tokens, on_fail, **options)  # type: ignore[arg-type]
