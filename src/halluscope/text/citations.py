"""Inline citation markers in a RAG answer: which chunks each sentence cites.

Three marker styles are read, all numbering the chunks from 1 (``[1]`` cites the first chunk of the list):

- ``brackets``: ``[1]``, ``[2][3]``, ``[1, 2]`` (and ``[1-3]``, a range);
- ``footnote``: ``[^1]`` (Markdown footnotes; the definition lines ``[^1]: ...`` are not sentences);
- ``source``: ``(Source 2)``, ``(Sources 1, 2)`` (any case).

``style=None`` detects the style from the answer and refuses an answer that mixes styles (which marker means
what is then a guess): :class:`CitationStyleError` says which styles it found and how to name one. A marker
numbered 0 is refused the same way (it suggests chunks numbered from 0, which would shift every citation).

    >>> answer = parse_citations("Paris is in France [1]. It has 2.1 million inhabitants [2][1].")
    >>> answer.style, [(s.claim, s.cited) for s in answer.sentences]
    ('brackets', [('Paris is in France.', (0,)), ('It has 2.1 million inhabitants.', (1, 0))])

A marker written after the sentence's full stop (``... France. [1]``) belongs to the sentence before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from halluscope.records import Span
from halluscope.text.sentences import split_sentences

STYLES = ("brackets", "footnote", "source")
"""The marker styles read (``--citations STYLE``)."""

_NUMBERS = r"\d+(?:\s*(?:,|-|–|and)\s*\d+)*"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "brackets": re.compile(rf"\[(?P<n>{_NUMBERS})\]"),
    "footnote": re.compile(r"\[\^(?P<n>\d+)\](?!:)"),
    "source": re.compile(rf"\((?:source|sources)\s+(?P<n>{_NUMBERS})\)", re.I),
}
_FOOTNOTE_DEFINITION = re.compile(r"^\[\^\d+\]:.*$", re.M)


class CitationStyleError(ValueError):
    """Citation markers that cannot be read without guessing (mixed styles, a chunk numbered 0, an unknown style)."""


@dataclass(frozen=True)
class Marker:
    """One marker: where it is in the answer and the chunks it cites (0-based indices into the chunk list)."""

    span: Span
    chunks: tuple[int, ...]


@dataclass(frozen=True)
class CitedSentence:
    """One sentence of the answer with its markers.

    ``text`` is the sentence as written (markers included), ``span`` its place in the answer, ``claim`` the text
    that is checked (markers removed), ``markers`` the markers inside it."""

    index: int
    text: str
    span: Span
    claim: str
    markers: tuple[Marker, ...]

    @property
    def cited(self) -> tuple[int, ...]:
        """The chunks the sentence cites, each once, in the order first cited."""
        seen: dict[int, None] = {}
        for marker in self.markers:
            for chunk in marker.chunks:
                seen.setdefault(chunk, None)
        return tuple(seen)


@dataclass(frozen=True)
class CitedAnswer:
    """An answer split into cited sentences; ``style`` is ``None`` when it carries no marker at all."""

    text: str
    style: str | None
    sentences: tuple[CitedSentence, ...]


def _numbers(group: str) -> list[int]:
    out: list[int] = []
    for part in re.split(r"\s*(?:,|and)\s*", group.strip()):
        bounds = [int(n) for n in re.split(r"\s*[-–]\s*", part) if n]
        if len(bounds) == 2 and bounds[0] <= bounds[1] and bounds[1] - bounds[0] < 100:
            out.extend(range(bounds[0], bounds[1] + 1))
        else:
            out.extend(bounds)
    return out


def find_markers(text: str, style: str) -> list[Marker]:
    """Every ``style`` marker of ``text``, in order; refuses a marker numbered 0."""
    if style not in _PATTERNS:
        raise CitationStyleError(f"unknown citation style {style!r}; styles: {', '.join(STYLES)}")
    markers = []
    for match in _PATTERNS[style].finditer(text):
        numbers = _numbers(match.group("n"))
        if 0 in numbers:
            raise CitationStyleError(
                f"citation marker {match.group(0)!r} numbers a chunk 0: markers number the chunks from 1 "
                "([1] is the first chunk); renumber the markers"
            )
        markers.append(Marker(span=Span(start=match.start(), end=match.end()), chunks=tuple(n - 1 for n in numbers)))
    return markers


def detect_style(text: str) -> str | None:
    """The one marker style ``text`` uses, ``None`` when it has no marker; refuses a mix of styles."""
    found = {style: m for style in STYLES if (m := _PATTERNS[style].search(text)) is not None}
    if len(found) > 1:
        shown = ", ".join(f"{style} ({m.group(0)})" for style, m in found.items())
        raise CitationStyleError(
            f"the answer mixes citation styles: {shown}; which markers are citations is ambiguous. Name the style: "
            f"--citations STYLE (Python: style=...), one of {', '.join(STYLES)}"
        )
    return next(iter(found), None)


def render_marker(style: str | None, chunks: tuple[int, ...]) -> str:
    """The marker citing ``chunks`` (0-based) in ``style`` (``brackets`` when the answer had none)."""
    numbers = [str(c + 1) for c in chunks]
    if style == "footnote":
        return "".join(f"[^{n}]" for n in numbers)
    if style == "source":
        return f"(Source{'s' if len(numbers) > 1 else ''} {', '.join(numbers)})"
    return "".join(f"[{n}]" for n in numbers)


def strip_markers(text: str, markers: tuple[Marker, ...] | list[Marker], offset: int = 0) -> str:
    """``text`` (starting at ``offset`` in the answer the markers index into) without its markers, the space
    before each one removed and runs of spaces closed up."""
    out: list[str] = []
    position = 0
    for marker in markers:
        start, end = marker.span.start - offset, marker.span.end - offset
        out.append(text[position:start].rstrip(" \t"))
        position = end
    out.append(text[position:])
    joined = "".join(out)
    joined = re.sub(r"[ \t]{2,}", " ", joined)
    joined = re.sub(r"\s+([.,;:!?])", r"\1", joined)
    return joined.strip()


def cite_sentence(text: str, span: Span, index: int, markers: list[Marker]) -> CitedSentence:
    """The sentence ``text`` at ``span`` of the answer, with the markers (answer offsets) that lie inside it."""
    inside = tuple(m for m in markers if m.span.start >= span.start and m.span.end <= span.end)
    return CitedSentence(
        index=index, text=text, span=span, claim=strip_markers(text, inside, span.start), markers=inside
    )


def sentence_pieces(text: str, markers: list[Marker]) -> list[Span]:
    """The spans of the answer's sentences. The text is split with every marker blanked out (a marker glued to a
    full stop, ``1889.[^1] It``, would otherwise hide the boundary from the splitter); each marker then belongs
    to the sentence it lies in, or else to the sentence before it (``... France. [1] It ...``). Footnote
    definition lines are left out."""
    definitions = [Span(start=m.start(), end=m.end()) for m in _FOOTNOTE_DEFINITION.finditer(text)]
    masked = list(text)
    for marker in markers:
        masked[marker.span.start : marker.span.end] = " " * len(marker.span)
    spans = [
        sentence.span
        for sentence in split_sentences("".join(masked))
        if not any(d.start <= sentence.span.start < d.end for d in definitions)
    ]
    if not spans:
        return []
    for marker in markers:
        i = max((n for n, span in enumerate(spans) if span.start <= marker.span.start), default=0)
        span = spans[i]
        spans[i] = Span(start=min(span.start, marker.span.start), end=max(span.end, marker.span.end))
    return spans


def parse_citations(text: str, style: str | None = None) -> CitedAnswer:
    """``text`` as cited sentences. ``style``: one of :data:`STYLES`, or ``None`` to detect it (refusing a mix)."""
    if style is not None and style not in STYLES:
        raise CitationStyleError(f"unknown citation style {style!r}; styles: {', '.join(STYLES)}")
    style = style or detect_style(text)
    markers = find_markers(text, style) if style else []
    sentences = tuple(
        cite_sentence(span.of(text), span, i, markers) for i, span in enumerate(sentence_pieces(text, markers))
    )
    return CitedAnswer(text=text, style=style, sentences=sentences)
