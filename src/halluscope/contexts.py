"""Sources given as a list of retrieved chunks (a RAG pipeline's contexts).

Every method checks one source text. A list of chunks is joined into one with :data:`CHUNK_SEPARATOR` between
them, the method runs on the joined text, and the report is then mapped back: ``Report.source_chunks`` holds
where each chunk lies in the joined source, and every :class:`~halluscope.records.Evidence` located in it gets
``chunk`` (the chunk's index in the list) and ``chunk_span`` (its offsets inside that chunk). Evidence that
that runs over several chunks (a retrieval window can) is cut into one piece per chunk when it is a verbatim
quote; a paraphrase is attributed to the chunk it starts in, with ``chunk_span`` cut at that chunk's end.

    >>> from halluscope.contexts import join_contexts
    >>> joined, spans = join_contexts(["Paris is in France.", "It has 2.1 million inhabitants."])
    >>> joined
    'Paris is in France.\\n\\nIt has 2.1 million inhabitants.'
    >>> [s.of(joined) for s in spans]
    ['Paris is in France.', 'It has 2.1 million inhabitants.']
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from halluscope.records import Evidence, Report, Span

CHUNK_SEPARATOR = "\n\n"
"""Between two chunks of a joined source: a paragraph break, so no sentence of one chunk runs into the next."""

Source = str | Sequence[str]
"""A source: one text, or the list of chunks a retriever returned."""


class ContextsError(ValueError):
    """A list of chunks that cannot be a source (not text, or empty)."""


def is_chunk_list(source: object) -> bool:
    """Whether ``source`` is a list or tuple of chunks rather than one text."""
    return isinstance(source, (list, tuple))


def join_contexts(chunks: Sequence[object]) -> tuple[str, list[Span]]:
    """The joined source and the span of each chunk in it. Refuses an empty list and non-text chunks
    (naming the chunk); blank chunks are kept, so indices match the caller's list."""
    if not chunks:
        raise ContextsError("source is an empty list of chunks")
    parts: list[str] = []
    spans: list[Span] = []
    position = 0
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, str):
            raise ContextsError(f"source chunk {i} must be a string, got {type(chunk).__name__}")
        if i:
            parts.append(CHUNK_SEPARATOR)
            position += len(CHUNK_SEPARATOR)
        parts.append(chunk)
        spans.append(Span(start=position, end=position + len(chunk)))
        position += len(chunk)
    return "".join(parts), spans


def as_source_text(source: object) -> tuple[object, list[Span]]:
    """``(text, chunk spans)``: a chunk list joined, anything else passed through with no chunks."""
    if is_chunk_list(source):
        return join_contexts(source)  # type: ignore[arg-type]
    return source, []


def chunk_of(spans: Sequence[Span], span: Span) -> tuple[int, Span] | None:
    """The chunk ``span`` (an offset range in the joined source) starts in, and its offsets inside that chunk;
    ``None`` when it starts in a separator."""
    starts = [s.start for s in spans]
    i = bisect_right(starts, span.start) - 1
    if i < 0 or span.start > spans[i].end:
        return None
    chunk = spans[i]
    if span.start == chunk.end and span.end > chunk.end:
        return None  # starts exactly at the separator
    return i, Span(start=span.start - chunk.start, end=min(span.end, chunk.end) - chunk.start)


def _with_chunk(evidence: Evidence, spans: Sequence[Span], source: str) -> list[Evidence]:
    """``evidence`` naming its chunk; a verbatim quote that runs over several chunks becomes one piece per chunk
    (each its own chunk's text), so every piece names exactly one chunk."""
    if evidence.span is None:
        return [evidence]
    found = chunk_of(spans, evidence.span)
    if found is None:
        return [evidence]
    i, inner = found
    start, end = evidence.span.start, evidence.span.end
    if end <= spans[i].end or evidence.text != source[start:end]:
        return [evidence.model_copy(update={"chunk": i, "chunk_span": inner})]
    pieces = []
    for j in range(i, len(spans)):
        chunk = spans[j]
        if chunk.start >= end:
            break
        a, b = max(start, chunk.start), min(end, chunk.end)
        if b > a:
            pieces.append(
                evidence.model_copy(
                    update={
                        "text": source[a:b],
                        "span": Span(start=a, end=b),
                        "chunk": j,
                        "chunk_span": Span(start=a - chunk.start, end=b - chunk.start),
                    }
                )
            )
    return pieces or [evidence.model_copy(update={"chunk": i, "chunk_span": inner})]


def _pieces(evidence: list[Evidence], spans: Sequence[Span], source: str) -> list[Evidence]:
    return [piece for e in evidence for piece in _with_chunk(e, spans, source)]


def attribute_chunks(report: Report, spans: Sequence[Span], source: str) -> Report:
    """``report`` with ``source_chunks`` set and every located piece of evidence naming its chunk (``source``:
    the joined text the spans index into)."""
    if not spans:
        return report
    verdicts = [v.model_copy(update={"evidence": _pieces(v.evidence, spans, source)}) for v in report.verdicts]
    findings = [f.model_copy(update={"evidence": _pieces(f.evidence, spans, source)}) for f in report.findings]
    return report.model_copy(update={"verdicts": verdicts, "findings": findings, "source_chunks": list(spans)})
