"""The guard: check a RAG answer against its chunks before it ships, and act on what fails.

Every sentence is checked by the citation check (:mod:`halluscope.methods.citations`: the verdict-first scorer,
against the chunks the sentence cites; a sentence without a marker, with the default ``uncited="check"``, against
each chunk). A sentence *fails* when no chunk supports it (``unsupported``), when it could not be scored
(``unscored``: nothing unchecked ships), and, under ``uncited="flag"``, when it cites nothing. A sentence supported
only by a chunk it does not cite has a *wrong citation*. ``on_fail`` says what happens:

- ``filter``: failing sentences are removed; a wrong citation is pointed at the chunk that supports the sentence
  (that chunk's support was scored); footnote definitions (``[^n]: ...``) that no shipped sentence cites any more
  are removed, so every marker left points at a chunk that supports its sentence;
- ``fix``: as ``filter``, but a failing sentence is first asked for a fix (the verdict-first explanation's
  corrected claim), and the fix is re-scored by the same scorer against the same chunks: it replaces the sentence
  only when it is supported at or above the threshold; otherwise the sentence is removed;
- ``raise``: :class:`GuardError` with the findings when any sentence fails or has a wrong citation; else the
  answer unchanged;
- ``annotate``: the answer unchanged but each failing or wrongly cited sentence wrapped in
  ``<mark class="halluscope-unsupported">`` (``-wrong-citation``, ``-unscored``, ``-uncited``) ... ``</mark>``.

:func:`aguard_stream` does the same sentence by sentence while the answer streams: a sentence is checked as soon
as it is complete (the next sentence has started, or the stream ended), the sentences are released in order,
and none is released before its check is done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from halluscope.methods.citations import (
    CitationChecker,
    SentenceCitations,
    UncitedPolicy,
    build_checker,
    recited,
    sentence_findings,
)
from halluscope.records import Finding, Report, Span
from halluscope.stages import Context
from halluscope.text.citations import (
    CitationStyleError,
    CitedSentence,
    cite_sentence,
    detect_style,
    find_markers,
    parse_citations,
    sentence_pieces,
)

Policy = Literal["filter", "fix", "raise", "annotate"]
POLICIES: tuple[str, ...] = ("filter", "fix", "raise", "annotate")

Action = Literal["kept", "removed", "fixed", "recited", "annotated"]

_FAILING = ("unsupported", "unscored", "uncited")
_FOOTNOTE_DEFINITION = re.compile(r"^\[\^(\d+)\]:.*(?:\n|$)", re.M)


class GuardError(Exception):
    """Raised by ``on_fail="raise"``: the answer has sentences that fail; ``findings`` and ``report`` say which."""

    def __init__(self, message: str, findings: list[Finding], report: Report | None = None):
        super().__init__(message)
        self.findings = findings
        self.report = report


@dataclass
class GuardedSentence:
    """What the guard did with one sentence: ``shipped`` is its text as shipped (None: removed)."""

    index: int
    original: str
    shipped: str | None
    action: Action
    status: str
    reason: str = ""
    span: Span | None = None


@dataclass
class GuardResult:
    """The text to ship, the citation Report behind it, and what happened to each sentence."""

    text: str
    report: Report
    policy: str
    sentences: list[GuardedSentence] = field(default_factory=list)

    @property
    def removed(self) -> list[GuardedSentence]:
        return [s for s in self.sentences if s.action == "removed"]

    @property
    def changed(self) -> bool:
        return any(s.action != "kept" for s in self.sentences)


def _failing(result: SentenceCitations) -> bool:
    return result.status in _FAILING


def _why(result: SentenceCitations) -> str:
    if result.status == "wrong_citation":
        return f"cites {[c + 1 for c in result.cited]}; chunk [{result.supporting[0] + 1}] supports it"
    return result.reason or result.status


async def _fix(checker: CitationChecker, result: SentenceCitations, style: str | None) -> tuple[str | None, str]:
    """A fix of a failing sentence that the same scorer finds supported at or above the threshold, and why (or
    why there is none)."""
    scorer = checker.scorer
    if result.verdict is None or result.status != "unsupported" or not hasattr(scorer, "explain"):
        return None, "no fix asked (the sentence was not scored unsupported)"
    chunks = list(result.cited) or list(range(len(checker.chunks)))
    text = "\n\n".join(checker.chunks[c] for c in chunks)
    explained, error = await scorer.explain(result.verdict, Context(text=text), text)
    fix = (explained.fix or "").strip()
    if not fix:
        return None, f"no fix proposed{': ' + error if error else ''}"
    candidate = dataclasses.replace(result.sentence, claim=fix)
    verdict = await checker.score(candidate, chunks)
    if not checker.supports(verdict):
        p = verdict.support_probability
        shown = "" if p is None else f", P(supported) = {p:.3f}"
        return None, f"the fix {fix!r} did not pass re-verification ({verdict.label}{shown})"
    if result.cited:
        fixed = dataclasses.replace(result, sentence=dataclasses.replace(result.sentence, text=fix, markers=()))
        return recited(fixed, style, list(result.cited)), "fix re-verified"
    return fix, "fix re-verified"


async def decide(
    checker: CitationChecker, result: SentenceCitations, policy: str, style: str | None
) -> GuardedSentence:
    """What ``policy`` ships for one checked sentence."""
    s = result.sentence
    base: dict[str, Any] = {"index": s.index, "original": s.text, "status": result.status, "span": s.span}
    wrong = result.status == "wrong_citation"
    if policy in ("filter", "fix") and result.status == "supported":
        needed = [c for c in result.cited if result.needed.get(c, True)]
        if result.cited and len(needed) < len(result.cited):
            why = f"citation(s) {[c + 1 for c in result.cited if c not in needed]} not needed: removed"
            return GuardedSentence(shipped=recited(result, style, needed), action="recited", reason=why, **base)
        if not result.cited and result.supporting and style is not None:
            why = f"cited no chunk; chunk [{result.supporting[0] + 1}] supports it: cited"
            shipped = recited(result, style, [result.supporting[0]])
            return GuardedSentence(shipped=shipped, action="recited", reason=why, **base)
    if not (_failing(result) or wrong):
        return GuardedSentence(shipped=s.text, action="kept", reason=result.reason, **base)
    if policy == "annotate":
        kind = result.status.replace("_", "-")
        return GuardedSentence(
            shipped=f'<mark class="halluscope-{kind}">{s.text}</mark>', action="annotated", reason=_why(result), **base
        )
    if policy == "raise":
        return GuardedSentence(shipped=None, action="removed", reason=_why(result), **base)
    if wrong:
        return GuardedSentence(
            shipped=recited(result, style, [result.supporting[0]]), action="recited", reason=_why(result), **base
        )
    if policy == "fix":
        fixed, why = await _fix(checker, result, style)
        if fixed is not None:
            return GuardedSentence(shipped=fixed, action="fixed", reason=why, **base)
        return GuardedSentence(shipped=None, action="removed", reason=f"{_why(result)}; {why}", **base)
    return GuardedSentence(shipped=None, action="removed", reason=_why(result), **base)


def assemble(text: str, decisions: Sequence[GuardedSentence]) -> str:
    """``text`` with each sentence replaced by what ships (a removed one taken out with the space after it), and
    the footnote definitions no shipped sentence cites taken out."""
    out: list[str] = []
    position = 0
    for d in sorted(decisions, key=lambda d: d.index):
        assert d.span is not None
        out.append(text[position : d.span.start])
        position = d.span.end
        if d.shipped is None:
            rest = text[position:]
            position += len(rest) - len(rest.lstrip(" \t"))
            if position == len(text) or text[position] in "\r\n":
                out[-1] = out[-1].rstrip(" \t")  # the line ends here: no space left before its end
        else:
            out.append(d.shipped)
    out.append(text[position:])
    shipped = "".join(out)
    cited = {int(n) for n in re.findall(r"\[\^(\d+)\](?!:)", shipped)}
    if cited or re.search(r"\[\^\d+\]:", shipped):
        shipped = _FOOTNOTE_DEFINITION.sub(lambda m: m.group(0) if int(m.group(1)) in cited else "", shipped)
    return shipped.strip() if shipped.strip() else ""


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ValueError(f"on_fail must be one of {', '.join(POLICIES)}, got {policy!r}")


def _raise_if_failing(decisions: Sequence[GuardedSentence], findings: list[Finding], report: Report | None) -> None:
    bad = [d for d in decisions if d.action != "kept"]
    if bad:
        listed = "; ".join(f"sentence {d.index + 1} ({d.status}): {d.reason}" for d in bad)
        raise GuardError(f"{len(bad)} sentence(s) failed the guard: {listed}", findings, report)


async def aguard(
    contexts: Sequence[str],
    answer: str,
    on_fail: Policy = "filter",
    *,
    style: str | None = None,
    uncited: UncitedPolicy = "check",
    threshold: float = 0.5,
    llm: Any = None,
    config: Any = None,
    scorer: Any = None,
) -> GuardResult:
    """The async form of :func:`halluscope.guard`."""
    _check_policy(on_fail)
    parsed = parse_citations(answer, style)
    checker, owned = build_checker(
        contexts, llm=llm, config=config, threshold=threshold, uncited=uncited, scorer=scorer
    )
    try:
        checked = await checker.check(parsed)
        decisions = list(await asyncio.gather(*(decide(checker, r, on_fail, parsed.style) for r in checked.sentences)))
    finally:
        if owned is not None:
            owned.close()
    report = checked.report()
    report = report.model_copy(
        update={"details": {**report.details, "guard": {"policy": on_fail, "sentences": [_row(d) for d in decisions]}}}
    )
    if on_fail == "raise":
        _raise_if_failing(decisions, report.findings, report)
        return GuardResult(
            answer, report, on_fail, [dataclasses.replace(d, shipped=d.original, action="kept") for d in decisions]
        )
    return GuardResult(assemble(answer, decisions), report, on_fail, decisions)


def _row(d: GuardedSentence) -> dict[str, Any]:
    return {"sentence": d.index, "action": d.action, "status": d.status, "shipped": d.shipped, "reason": d.reason}


# --- streaming ------------------------------------------------------------------------------------------------


@dataclass
class Released:
    """One sentence released by :func:`aguard_stream`, in answer order.

    ``text`` is what ships (None: the sentence was removed); ``separator`` the answer's text between the previous
    sentence and this one (spaces, line breaks), so ``"".join(r.piece for r in released)`` is the shipped answer;
    ``latency_s`` the seconds from the arrival of the sentence's last token to its release (waiting for the next
    token to know the sentence is complete, plus its check); ``check_s`` the seconds its check took (the time to
    score this sentence), ``completed_at`` when the stream showed it complete (its check started then)."""

    sentence: GuardedSentence
    latency_s: float
    last_token_at: float
    released_at: float
    separator: str = ""
    check_s: float | None = None
    completed_at: float | None = None

    @property
    def text(self) -> str | None:
        return self.sentence.shipped

    @property
    def piece(self) -> str:
        """What to append to the shipped answer: the separator and the text, or nothing when removed."""
        return "" if self.sentence.shipped is None else self.separator + self.sentence.shipped


_UNCLOSED = re.compile(r"[\[(][^\])]{0,40}$")
"""An opening bracket at the end of the streamed text with no closing one yet: maybe a marker still arriving."""


class _Splitter:
    """Cuts the streamed text into complete sentences. A sentence is complete once the next one has started (a
    marker after its full stop still belongs to it; text from an unclosed bracket at the end, maybe a marker
    still arriving, is not read yet), or when the stream ends. Text already handed out is never split again."""

    def __init__(self, style: str | None):
        self.text = ""
        self.style = style
        self.forced = style is not None
        self.done = 0  # sentences handed out
        self.offset = 0  # where the text not handed out yet starts
        self.arrivals: list[tuple[int, float]] = []  # (text length after a token, its arrival time)

    def add(self, token: str, now: float) -> None:
        self.text += token
        self.arrivals.append((len(self.text), now))

    def _style(self) -> str | None:
        if self.style is None:
            self.style = detect_style(self.text)
        elif not self.forced and detect_style_or_none(self.text, self.style):
            raise CitationStyleError(
                f"the streamed answer mixes citation styles: it began with {self.style} markers; "
                "name the style (style=...)"
            )
        return self.style

    def complete(self, final: bool) -> list[tuple[CitedSentence, float, str]]:
        """Newly completed sentences, each with the arrival time of its last token and the text before it."""
        style = self._style()
        end = len(self.text)
        if not final and (unclosed := _UNCLOSED.search(self.text, self.offset)) is not None:
            end = unclosed.start()
        piece = self.text[self.offset : end]
        local = find_markers(piece, style) if style else []
        spans = sentence_pieces(piece, local)
        ready = spans if final else spans[:-1]
        markers = [
            dataclasses.replace(m, span=Span(start=m.span.start + self.offset, end=m.span.end + self.offset))
            for m in local
        ]
        out = []
        previous = self.offset
        for span in ready:
            where = Span(start=span.start + self.offset, end=span.end + self.offset)
            last = next((t for n, t in self.arrivals if n >= where.end), self.arrivals[-1][1])
            sentence = cite_sentence(where.of(self.text), where, self.done, markers)
            out.append((sentence, last, self.text[previous : where.start]))
            previous = where.end
            self.done += 1
        self.offset = previous
        return out


def detect_style_or_none(text: str, style: str) -> bool:
    """Whether ``text`` also holds markers of a style other than ``style``."""
    try:
        found = detect_style(text)
    except CitationStyleError:
        return True
    return found is not None and found != style


async def _tokens(source: AsyncIterable[str] | Iterable[str]) -> AsyncIterator[str]:
    """Tokens from an async iterable, or from a plain one read in a worker thread (a blocking stream does not
    stop the checks running meanwhile)."""
    if isinstance(source, AsyncIterable):
        async for token in source:
            yield token
        return
    iterator = iter(source)
    end = object()
    while (token := await asyncio.to_thread(next, iterator, end)) is not end:  # type: ignore[arg-type]
        yield token


async def aguard_stream(
    contexts: Sequence[str],
    tokens: AsyncIterable[str] | Iterable[str],
    on_fail: Policy = "filter",
    *,
    style: str | None = None,
    uncited: UncitedPolicy = "check",
    threshold: float = 0.5,
    llm: Any = None,
    config: Any = None,
    scorer: Any = None,
    clock: Any = time.perf_counter,
) -> AsyncIterator[Released]:
    """Check a streamed answer sentence by sentence: each sentence's check starts as soon as the sentence is
    complete (while the stream goes on), and the sentences are released in order, each only after its check.
    ``on_fail`` and the options as for :func:`aguard` (``raise`` raises :class:`GuardError` at the first failing
    sentence, before releasing it). A removed sentence is released with ``text`` None, so the caller sees every
    sentence."""
    _check_policy(on_fail)
    checker, owned = build_checker(
        contexts, llm=llm, config=config, threshold=threshold, uncited=uncited, scorer=scorer
    )
    splitter = _Splitter(style)
    queue: asyncio.Queue[
        tuple[asyncio.Future[tuple[GuardedSentence, list[Finding], float]], float, str, float] | BaseException | None
    ] = asyncio.Queue()

    async def check(sentence: CitedSentence) -> tuple[GuardedSentence, list[Finding], float]:
        started = clock()
        result = await checker.check_sentence(sentence)
        decision = await decide(checker, result, on_fail, splitter.style)
        return decision, sentence_findings(result, checker, splitter.style), max(0.0, clock() - started)

    async def produce() -> None:
        try:
            async for token in _tokens(tokens):
                arrived = clock()
                splitter.add(token, arrived)
                for sentence, last, separator in splitter.complete(final=False):
                    await queue.put((asyncio.ensure_future(check(sentence)), last, separator, arrived))
            ended = clock()
            for sentence, last, separator in splitter.complete(final=True):
                await queue.put((asyncio.ensure_future(check(sentence)), last, separator, ended))
            await queue.put(None)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it in order
            await queue.put(exc)

    producer = asyncio.ensure_future(produce())
    pending: list[asyncio.Future[tuple[GuardedSentence, list[Finding], float]]] = []
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            task, last, separator, completed = item
            pending.append(task)
            decision, findings, check_s = await task
            if on_fail == "raise" and decision.action != "kept":
                _raise_if_failing([decision], findings, None)
            now = clock()
            yield Released(decision, max(0.0, now - last), last, now, separator, check_s, completed)
    finally:
        producer.cancel()
        for task in pending:
            task.cancel()
        while not queue.empty():
            left = queue.get_nowait()
            if isinstance(left, tuple):
                left[0].cancel()
        if owned is not None:
            owned.close()


def guard_stream(
    contexts: Sequence[str],
    tokens: Iterable[str],
    on_fail: Policy = "filter",
    **options: Any,
) -> Iterator[Released]:
    """The synchronous form of :func:`aguard_stream`: a generator of released sentences, in order. Runs its own
    event loop, so it cannot be called from inside a running one (use :func:`aguard_stream` there)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("guard_stream runs its own event loop; inside a running loop use aguard_stream")
    loop = asyncio.new_event_loop()
    stream = aguard_stream(contexts, tokens, on_fail, **options)
    try:
        while True:
            try:
                yield loop.run_until_complete(stream.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(stream.aclose())  # type: ignore[attr-defined]  # an async generator
        loop.close()
