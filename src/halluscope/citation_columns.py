"""The citation columns of :func:`halluscope.evaluate`: for a row whose target carries citation markers (``[1]``,
``[^1]``, ``(Source 1)``; or every row, with ``citations=STYLE``), the citation check of the target against the
row's chunks (:mod:`halluscope.methods.citations`: the verdict-first scorer, ALCE's citation recall and precision)
with the method's model. Its findings join the row's ``findings`` and its label.

- ``citation_recall``, ``citation_precision``: the report-level measures (None when nothing could be counted);
- ``wrong_citations``: how many sentences cite a chunk that does not support them while another chunk does;
- ``chunks_to_cite``: per such sentence (and, with ``uncited="check"``, per uncited sentence a chunk supports)
  ``{"sentence", "span", "cites", "cite"}``: the sentence as written, its place in the target, the chunks it cites
  and the chunk to cite instead, numbered from 1 as the markers are;
- ``citations_unchecked``: why the row's citations were not checked (no marker, an ambiguous marker style, a
  method with no model and no ``citations=``, a pair that is not text), None when they were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halluscope.records import Report

if TYPE_CHECKING:
    from halluscope.methods.base import Method

CITATION_COLUMNS = ("citation_recall", "citation_precision", "wrong_citations", "chunks_to_cite", "citations_unchecked")
"""The columns :func:`halluscope.evaluate` adds when a target carries citation markers or ``citations=`` is given."""


def carries_markers(target: Any, style: str | None) -> bool:
    """Whether ``target`` holds citation markers (of ``style``, when named); an ambiguous mix counts as holding
    them (its row then says why it was not checked)."""
    from halluscope.text.citations import CitationStyleError, detect_style, find_markers

    if not isinstance(target, str):
        return False
    try:
        return bool(find_markers(target, style)) if style else detect_style(target) is not None
    except CitationStyleError:
        return True


def check_options(style: str | None, uncited: str) -> None:
    """``ValueError`` for an unknown marker style or uncited policy (before any row is checked)."""
    from halluscope.methods.citations import UNCITED_POLICIES
    from halluscope.text.citations import STYLES, CitationStyleError

    if style is not None and style not in STYLES:
        raise CitationStyleError(f"unknown citation style {style!r}; styles: {', '.join(STYLES)}")
    if uncited not in UNCITED_POLICIES:
        raise ValueError(f"uncited must be one of {', '.join(UNCITED_POLICIES)}, got {uncited!r}")


def unchecked(reason: str) -> dict[str, Any]:
    """The citation columns of a row whose citations were not checked."""
    return {
        "citation_recall": None,
        "citation_precision": None,
        "wrong_citations": None,
        "chunks_to_cite": [],
        "citations_unchecked": reason,
    }


def columns_of(report: Report) -> dict[str, Any]:
    """The citation columns of a report the citation check was added to."""
    details = report.details.get("citations") or {}
    sentences = details.get("sentences") or []
    to_cite = [
        {"sentence": s["text"], "span": s["span"], "cites": s["cited"], "cite": s["supporting"][0]}
        for s in sentences
        if s["supporting"] and (s["status"] == "wrong_citation" or (s["status"] == "supported" and not s["cited"]))
    ]
    return {
        "citation_recall": report.subscores.get("citation_recall"),
        "citation_precision": report.subscores.get("citation_precision"),
        "wrong_citations": sum(1 for s in sentences if s["status"] == "wrong_citation"),
        "chunks_to_cite": to_cite,
        "citations_unchecked": None,
    }


async def add_citation_columns(
    method: Method, report: Report, source: Any, target: Any, style: str | None, uncited: str
) -> tuple[Report, dict[str, Any]]:
    """``report`` with the citation check of ``target`` against ``source`` (a list of chunks; one text is one
    chunk) added, and the row's citation columns."""
    from halluscope.methods.citations import awith_citations
    from halluscope.text.citations import CitationStyleError, parse_citations

    chunks = [source] if isinstance(source, str) else source
    if not isinstance(target, str) or not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
        return report, unchecked("the pair is not text (a target, and a source or a list of chunks)")
    try:
        found = parse_citations(target, style).style
    except CitationStyleError as exc:
        return report, unchecked(str(exc))
    if found is None:
        return report, unchecked("the target carries no citation marker")
    if not method.uses_llm and style is None:
        return report, unchecked(
            f"the target carries {found} citation markers, but {method.name} uses no model; give citations=STYLE "
            "to check them with the configured model (or llm=)"
        )
    merged = await awith_citations(report, chunks, target, llm=method.llm, style=style, uncited=uncited)  # type: ignore[arg-type]
    return merged, columns_of(merged)
