"""The citation options of ``halluscope check`` and ``halluscope guard`` (``--citations``, ``--uncited``), and the
step that adds the citation check to a report of a check against ``--context`` chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from halluscope.cli.common import fail
from halluscope.records import Report

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.methods.base import Method

CitationsOpt = Annotated[
    str | None,
    typer.Option(
        "--citations",
        help=(
            "The answer's citation marker style: brackets ([1], [2][3], [1, 2]), footnote ([^1]) or source "
            "((Source 2)). Default: detected; an answer that mixes styles is refused. With --context, every "
            "sentence is then checked against the chunks it cites (docs/citations.md)."
        ),
    ),
]
UncitedOpt = Annotated[
    str,
    typer.Option(
        "--uncited",
        help="Sentences without a marker: flag (a finding), check (find the chunk that supports it) or ignore.",
    ),
]


def check_uncited(uncited: str) -> None:
    from halluscope.methods.citations import UNCITED_POLICIES

    if uncited not in UNCITED_POLICIES:
        raise fail(f"--uncited must be one of {', '.join(UNCITED_POLICIES)}, got {uncited!r}")


def add_citations(
    report: Report, method: Method, chunks: list[str], target: str, style: str | None, uncited: str
) -> Report:
    """``report`` with the citation check of ``target`` against ``chunks`` added (unchanged without markers). It
    scores with the method's own model; a method without one is not given a model here: its report notes that the
    citations were not checked unless ``--citations`` asked for them (then the configured model is used)."""
    from halluscope.methods.citations import with_citations
    from halluscope.text.citations import CitationStyleError, parse_citations

    check_uncited(uncited)
    try:
        found = parse_citations(target, style).style
    except CitationStyleError as exc:
        raise fail(str(exc)) from exc
    if found is None:
        return report
    llm: Any
    owned = None
    if method.uses_llm:
        llm = method.llm
    elif style is not None:
        from halluscope.llm import get_llm

        llm = owned = get_llm(method.config)
    else:
        note = (
            f"the answer carries {found} citation markers, but {method.name} uses no model; "
            "give --citations STYLE to check them with the configured model"
        )
        return report.model_copy(update={"details": {**report.details, "citations": {"not_checked": note}}})
    try:
        return with_citations(report, chunks, target, llm=llm, style=style, uncited=uncited)  # type: ignore[arg-type]
    finally:
        if owned is not None:
            owned.close()
