"""Citation check: every sentence of a cited RAG answer against the chunks it cites.

Each sentence is scored with the verdict-first scorer (:class:`~halluscope.methods.verdict_first.VerdictFirst`:
one short yes/no reply, P(supported) read from the token probabilities) against a chosen set of chunks, joined
as one source. The measures are those of the ALCE benchmark ("Enabling Large Language Models to Generate Text
with Citations", Gao et al., 2023), with the verdict-first scorer in place of its NLI model:

- **citation recall** of a sentence: 1 when the union of the chunks it cites supports it, else 0 (a sentence
  that cites nothing has recall 0);
- **citation precision** of a citation: the citation is *not needed* (irrelevant) when its chunk alone does not
  support the sentence and the other cited chunks without it still do; a citation is correct when its sentence
  has recall 1 and it is needed. With one citation there is nothing to remove: it is correct when it supports.

A sentence counts as supported when the scorer answers yes and its P(supported), where the backend gives one, is
at least ``threshold``. For a sentence its citations do not support, every chunk it does not cite is scored on
its own: those that support it are named in a *wrong citation* finding (the best first), and with none the
sentence is an *unsupported claim*. Sentences without a marker follow ``uncited``: ``flag`` (a finding, not
scored), ``check`` (scored against each chunk, naming the one to cite) or ``ignore`` (left out). A marker that
names a chunk the list does not have is a finding of its own. A sentence whose score could not be read is
``unscored`` with the reason, never counted as supported.

Report-level citation recall is the mean over the sentences counted (uncited ones under ``flag`` and ``check``
count as 0, as in ALCE; under ``ignore`` they are left out), citation precision the share of correct citations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from halluscope.contexts import CHUNK_SEPARATOR, join_contexts
from halluscope.records import Claim, Evidence, Finding, Report, Span, Usage, Verdict
from halluscope.stages import Context
from halluscope.text.citations import CitedAnswer, CitedSentence, parse_citations, render_marker

UncitedPolicy = Literal["flag", "check", "ignore"]
UNCITED_POLICIES: tuple[str, ...] = ("flag", "check", "ignore")

Status = Literal["supported", "wrong_citation", "unsupported", "uncited", "ignored", "unscored"]
"""What the check says of one sentence: supported by its citations (for an uncited sentence under ``check``: by
some chunk); supported only by a chunk it does not cite; supported by no chunk; cites nothing (``flag``); left
out (``ignore``); could not be scored."""

METHOD_NAME = "citations"


@dataclass
class SentenceCitations:
    """The check of one sentence (see :data:`Status`)."""

    sentence: CitedSentence
    status: Status
    cited: tuple[int, ...] = ()
    """The cited chunks that exist (0-based)."""
    unknown: tuple[int, ...] = ()
    """Cited chunk numbers (0-based) past the end of the chunk list."""
    verdict: Verdict | None = None
    """The verdict against the union of the cited chunks (against the chunk that supports it, for an uncited
    sentence under ``check``)."""
    needed: dict[int, bool] = field(default_factory=dict)
    """Per cited chunk: whether the citation is needed (ALCE precision); only for a sentence with recall 1."""
    supporting: list[int] = field(default_factory=list)
    """Chunks it does not cite that support it on their own, best first."""
    reason: str = ""

    @property
    def recall(self) -> float | None:
        """1 supported by its citations, 0 not, None when it is not counted (ignored or unscored)."""
        if self.status in ("ignored", "unscored"):
            return None
        return 1.0 if self.status == "supported" and self.cited else 0.0

    def describe(self) -> dict[str, Any]:
        s = self.sentence
        return {
            "sentence": s.index,
            "text": s.text,
            "span": [s.span.start, s.span.end],
            "claim": s.claim,
            "status": self.status,
            "cited": [c + 1 for c in self.cited],
            "unknown_cited": [c + 1 for c in self.unknown],
            "needed": {str(c + 1): v for c, v in self.needed.items()},
            "supporting": [c + 1 for c in self.supporting],
            "support_probability": None if self.verdict is None else self.verdict.support_probability,
            "reason": self.reason,
        }


def is_supported(verdict: Verdict, threshold: float) -> bool:
    """Answered yes, with P(supported) at or above ``threshold`` where the backend gave one."""
    if verdict.label != "supported":
        return False
    p = verdict.support_probability
    return p is None or p >= threshold


class CitationChecker:
    """Checks each sentence of a cited answer against its chunks with one verdict-first scorer.

    ``scorer`` is anything with ``async score(claim, context) -> Verdict`` (the verdict-first scorer); verdicts
    are memoised per (sentence, chunk set) within one checker, so a check never asks the same question twice."""

    def __init__(
        self,
        scorer: Any,
        chunks: Sequence[str],
        *,
        threshold: float = 0.5,
        uncited: UncitedPolicy = "flag",
        model: str | None = None,
    ):
        if uncited not in UNCITED_POLICIES:
            raise ValueError(f"uncited must be one of {', '.join(UNCITED_POLICIES)}, got {uncited!r}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be a number from 0 to 1, got {threshold!r}")
        self.source, self.chunk_spans = join_contexts(list(chunks))
        self.chunks = list(chunks)
        self.scorer = scorer
        self.threshold = threshold
        self.uncited = uncited
        self.model = model
        self._verdicts: dict[tuple[str, tuple[int, ...]], asyncio.Future[Verdict]] = {}

    async def score(self, sentence: CitedSentence, chunks: Sequence[int]) -> Verdict:
        """The sentence's verdict against the union of ``chunks`` (their order kept), memoised."""
        key = (sentence.claim, tuple(sorted(chunks)))
        known = self._verdicts.get(key)
        if known is None:
            known = self._verdicts[key] = asyncio.ensure_future(self._score(sentence, tuple(chunks)))
        return await asyncio.shield(known)

    async def _score(self, sentence: CitedSentence, chunks: tuple[int, ...]) -> Verdict:
        claim = Claim(text=sentence.claim, id=f"s{sentence.index}", target_spans=[sentence.span])
        text = CHUNK_SEPARATOR.join(self.chunks[c] for c in chunks)
        verdict: Verdict = await self.scorer.score(claim, Context(text=text))
        return verdict

    @property
    def questions(self) -> int:
        """How many distinct (sentence, chunk set) questions this checker has asked its scorer."""
        return len(self._verdicts)

    def supports(self, verdict: Verdict) -> bool:
        return is_supported(verdict, self.threshold)

    async def _supporting(self, sentence: CitedSentence, exclude: Sequence[int]) -> tuple[list[int], list[Verdict]]:
        """The chunks not in ``exclude`` that support the sentence on their own, best P(supported) first."""
        others = [c for c in range(len(self.chunks)) if c not in exclude]
        verdicts = list(await asyncio.gather(*(self.score(sentence, [c]) for c in others)))
        found = [(c, v) for c, v in zip(others, verdicts) if self.supports(v)]
        found.sort(key=lambda cv: -(cv[1].support_probability if cv[1].support_probability is not None else 1.0))
        return [c for c, _ in found], verdicts

    async def check_sentence(self, sentence: CitedSentence) -> SentenceCitations:
        """The check of one sentence (see the module docstring)."""
        cited = tuple(c for c in sentence.cited if c < len(self.chunks))
        unknown = tuple(c for c in sentence.cited if c >= len(self.chunks))
        if not cited:
            return await self._uncited(sentence, unknown)
        union = await self.score(sentence, cited)
        if union.label == "unscored":
            return SentenceCitations(sentence, "unscored", cited, unknown, union, reason=union.reason)
        if self.supports(union):
            needed = await self._needed(sentence, cited)
            return SentenceCitations(sentence, "supported", cited, unknown, union, needed, reason=union.reason)
        supporting, tried = await self._supporting(sentence, cited)
        if supporting:
            return SentenceCitations(sentence, "wrong_citation", cited, unknown, union, supporting=supporting)
        if any(v.label == "unscored" for v in tried):
            why = next(v.reason for v in tried if v.label == "unscored")
            return SentenceCitations(sentence, "unscored", cited, unknown, union, reason=f"another chunk: {why}")
        return SentenceCitations(sentence, "unsupported", cited, unknown, union, reason=union.reason)

    async def _needed(self, sentence: CitedSentence, cited: tuple[int, ...]) -> dict[int, bool]:
        """ALCE precision: a citation is not needed when its chunk alone does not support the sentence and the
        rest of the citations still do."""
        if len(cited) == 1:
            return {cited[0]: True}

        async def needed(c: int) -> bool:
            if self.supports(await self.score(sentence, [c])):
                return True
            rest = [d for d in cited if d != c]
            return not self.supports(await self.score(sentence, rest))

        return dict(zip(cited, await asyncio.gather(*(needed(c) for c in cited))))

    async def _uncited(self, sentence: CitedSentence, unknown: tuple[int, ...]) -> SentenceCitations:
        if self.uncited == "ignore":
            return SentenceCitations(sentence, "ignored", (), unknown, reason="cites no chunk (uncited=ignore)")
        if self.uncited == "flag":
            return SentenceCitations(sentence, "uncited", (), unknown, reason="cites no chunk")
        supporting, tried = await self._supporting(sentence, ())
        if supporting:
            best = await self.score(sentence, [supporting[0]])
            return SentenceCitations(sentence, "supported", (), unknown, best, supporting=supporting)
        if tried and all(v.label == "unscored" for v in tried):
            return SentenceCitations(sentence, "unscored", (), unknown, tried[0], reason=tried[0].reason)
        whole = await self.score(sentence, range(len(self.chunks)))
        if whole.label == "unscored":
            return SentenceCitations(sentence, "unscored", (), unknown, whole, reason=whole.reason)
        if self.supports(whole):
            return SentenceCitations(
                sentence, "supported", (), unknown, whole, reason="supported only by the chunks together"
            )
        return SentenceCitations(sentence, "unsupported", (), unknown, whole, reason=whole.reason)

    async def check(self, answer: str | CitedAnswer, style: str | None = None) -> CitationReport:
        """Every sentence of ``answer`` checked (concurrently), as a :class:`CitationReport`."""
        started = time.perf_counter()
        parsed = answer if isinstance(answer, CitedAnswer) else parse_citations(answer, style)
        results = list(await asyncio.gather(*(self.check_sentence(s) for s in parsed.sentences)))
        return CitationReport(parsed, results, self, time.perf_counter() - started)


class CitationReport:
    """The sentences checked, the report-level measures and the :class:`~halluscope.records.Report`."""

    def __init__(self, answer: CitedAnswer, sentences: list[SentenceCitations], checker: CitationChecker, s: float):
        self.answer = answer
        self.sentences = sentences
        self.checker = checker
        self.elapsed_s = s

    @property
    def recall(self) -> float | None:
        """Mean citation recall over the sentences counted; None with none counted."""
        counted = [r.recall for r in self.sentences if r.recall is not None]
        return sum(counted) / len(counted) if counted else None

    @property
    def precision(self) -> float | None:
        """Correct citations over all citations of the counted sentences; None with no citation."""
        total = correct = 0
        for r in self.sentences:
            if r.status in ("ignored", "unscored"):
                continue
            total += len(r.cited) + len(r.unknown)
            if r.status == "supported":
                correct += sum(1 for c in r.cited if r.needed.get(c, True))
        return correct / total if total else None

    def findings(self) -> list[Finding]:
        return [f for r in self.sentences for f in sentence_findings(r, self.checker, self.answer.style)]

    def report(self) -> Report:
        """The check as a Report: score = citation recall, subscores with recall and precision, one finding per
        problem, and ``details["citations"]`` with every sentence."""
        checker = self.checker
        verdicts = [r.verdict for r in self.sentences if r.verdict is not None]
        calls = [c for v in verdicts for c in v.calls]
        usage = sum((c.usage for c in _unique_calls(self)), Usage())
        recall, precision = self.recall, self.precision
        unscored = [r for r in self.sentences if r.status == "unscored"]
        details = {
            "citations": {
                "style": self.answer.style,
                "uncited": checker.uncited,
                "threshold": checker.threshold,
                "recall": recall,
                "precision": precision,
                "sentences": [r.describe() for r in self.sentences],
            }
        }
        reason = None
        if recall is None:
            reason = (
                f"no sentence could be scored: {unscored[0].reason}"
                if unscored
                else "no sentence to check (empty answer, or every sentence uncited under uncited=ignore)"
            )
        report = Report(
            method=METHOD_NAME,
            model=checker.model,
            score=recall,
            unscored_reason=reason,
            subscores={"citation_recall": recall, "citation_precision": precision},
            claims=[v.claim for v in verdicts],
            verdicts=verdicts,
            findings=self.findings(),
            usage=usage,
            elapsed_s=round(self.elapsed_s, 3),
            calls=calls,
            details=details,
            source_chunks=list(checker.chunk_spans),
        )
        return report.with_threshold(checker.threshold)


def _unique_calls(report: CitationReport) -> list[Any]:
    """Every scorer call made, once each (a verdict memoised for two sentences' needs is one call)."""
    out = []
    for future in report.checker._verdicts.values():
        if future.done() and not future.cancelled() and future.exception() is None:
            out.extend(future.result().calls)
    return out


def chunk_evidence(checker: CitationChecker, chunk: int, relation: str = "supports") -> Evidence:
    """The whole chunk as evidence naming it."""
    span = checker.chunk_spans[chunk]
    return Evidence(
        text=checker.chunks[chunk],
        span=span,
        relation=relation,  # type: ignore[arg-type]
        chunk=chunk,
        chunk_span=Span(start=0, end=len(span)),
    )


def _numbers(chunks: Sequence[int]) -> str:
    return ", ".join(f"[{c + 1}]" for c in chunks)


def recited(result: SentenceCitations, style: str | None, chunks: Sequence[int]) -> str:
    """The sentence as written with its markers pointing at ``chunks`` instead (the first marker replaced,
    the others removed)."""
    s = result.sentence
    if not s.markers:
        text = s.text.rstrip()
        end = len(text) - len(text.rstrip(".!?"))
        body, stop = (text[:-end], text[-end:]) if end else (text, "")
        return f"{body} {render_marker(style, tuple(chunks))}{stop}"
    out, position = [], s.span.start
    answer_text = s.text
    for n, marker in enumerate(s.markers):
        out.append(answer_text[position - s.span.start : marker.span.start - s.span.start])
        if n == 0:
            out.append(render_marker(style, tuple(chunks)))
        elif out and out[-1].endswith(" "):
            out[-1] = out[-1].rstrip(" ")
        position = marker.span.end
    out.append(answer_text[position - s.span.start :])
    return "".join(out)


def sentence_findings(r: SentenceCitations, checker: CitationChecker, style: str | None) -> list[Finding]:
    """The findings of one checked sentence (none for a supported sentence whose citations are all needed)."""
    s = r.sentence
    where = [s.span]
    sid = [f"s{s.index}"]
    p = None if r.verdict is None else r.verdict.support_probability
    confidence = None if p is None else round(1.0 - p, 6)
    out: list[Finding] = []
    if r.unknown:
        out.append(
            Finding(
                description=f"unknown chunk cited: sentence {s.index + 1} cites {_numbers(r.unknown)}, but there "
                f"are only {len(checker.chunks)} chunks",
                kind="other",
                target_spans=where,
                claim_ids=sid,
            )
        )
    if r.status == "wrong_citation":
        best = r.supporting[0]
        out.append(
            Finding(
                description=f"wrong citation: sentence {s.index + 1} cites {_numbers(r.cited)}, which does not "
                f"support it; chunk [{best + 1}] does",
                kind="other",
                target_spans=where,
                evidence=[chunk_evidence(checker, c) for c in r.supporting],
                claim_ids=sid,
                confidence=confidence,
                fix=recited(r, style, [best]),
            )
        )
    elif r.status == "unsupported":
        label = r.verdict.label if r.verdict is not None else "unsupported"
        cites = f" (it cites {_numbers(r.cited)})" if r.cited else ""
        out.append(
            Finding(
                description=f"unsupported claim: no chunk supports sentence {s.index + 1}{cites}",
                kind="contradicted" if label == "contradicted" else "unsupported",
                target_spans=where,
                claim_ids=sid,
                confidence=confidence,
            )
        )
    elif r.status == "uncited":
        out.append(
            Finding(
                description=f"uncited sentence: sentence {s.index + 1} cites no chunk",
                kind="other",
                target_spans=where,
                claim_ids=sid,
            )
        )
    elif r.status == "supported" and not r.cited and r.supporting:
        out.append(
            Finding(
                description=f"missing citation: sentence {s.index + 1} cites no chunk; chunk [{r.supporting[0] + 1}] "
                "supports it",
                kind="other",
                target_spans=where,
                evidence=[chunk_evidence(checker, c) for c in r.supporting],
                claim_ids=sid,
                fix=recited(r, style, [r.supporting[0]]),
            )
        )
    for c, needed in r.needed.items():
        if not needed:
            out.append(
                Finding(
                    description=f"citation not needed: sentence {s.index + 1} cites chunk [{c + 1}], which does not "
                    "support it; the other citations do",
                    kind="other",
                    target_spans=where,
                    evidence=[chunk_evidence(checker, c, "related")],
                    claim_ids=sid,
                )
            )
    return out


def build_checker(
    chunks: Sequence[str],
    *,
    llm: Any = None,
    config: Any = None,
    threshold: float = 0.5,
    uncited: UncitedPolicy = "flag",
    scorer: Any = None,
) -> tuple[CitationChecker, Any]:
    """A checker over ``chunks`` with the verdict-first scorer on ``llm`` (an :class:`~halluscope.llm.LLM`), or on
    a client built from ``config`` (default :class:`~halluscope.config.Config`); and the client the caller must
    close (``None`` when ``llm`` was given: it is the caller's). ``scorer``: use this scorer instead (anything with
    ``async score(claim, context) -> Verdict``, e.g. a no-model one); no client is built then."""
    from halluscope.config import Config
    from halluscope.llm import get_llm
    from halluscope.methods.verdict_first import VerdictFirst

    if scorer is not None:
        name = getattr(scorer, "name", None) or type(scorer).__name__
        return CitationChecker(scorer, chunks, threshold=threshold, uncited=uncited, model=name), None
    owned = None
    if llm is None:
        llm = owned = get_llm(config or Config())
    scorer = VerdictFirst(llm, VerdictFirst.Options(explain=False))
    return CitationChecker(scorer, chunks, threshold=threshold, uncited=uncited, model=llm.name), owned


async def acheck_citations(
    chunks: Sequence[str],
    answer: str,
    *,
    style: str | None = None,
    uncited: UncitedPolicy = "flag",
    threshold: float = 0.5,
    llm: Any = None,
    config: Any = None,
) -> Report:
    """The citation check of ``answer`` over ``chunks`` as a Report (see the module docstring)."""
    parsed = parse_citations(answer, style)
    checker, owned = build_checker(chunks, llm=llm, config=config, threshold=threshold, uncited=uncited)
    try:
        return (await checker.check(parsed)).report()
    finally:
        if owned is not None:
            owned.close()


async def awith_citations(
    report: Report,
    chunks: Sequence[str],
    answer: str,
    *,
    llm: Any,
    style: str | None = None,
    uncited: UncitedPolicy = "flag",
    threshold: float = 0.5,
) -> Report:
    """``report`` (a check of ``answer`` against ``chunks``) with the citation check added: its findings, the
    ``citation_recall``/``citation_precision`` subscores, ``details["citations"]``, its usage and calls, and the
    label recomputed at the report's threshold. Unchanged when the answer carries no marker (and no ``style``);
    :class:`~halluscope.text.citations.CitationStyleError` for an ambiguous one."""
    parsed = parse_citations(answer, style)
    if parsed.style is None:
        return report
    checker, _ = build_checker(chunks, llm=llm, threshold=threshold, uncited=uncited)
    cited = (await checker.check(parsed)).report()
    merged = report.model_copy(
        update={
            "findings": list(report.findings) + list(cited.findings),
            "subscores": {**report.subscores, **cited.subscores},
            "details": {**report.details, "citations": cited.details["citations"]},
            "usage": report.usage + cited.usage,
            "calls": list(report.calls) + list(cited.calls),
            "source_chunks": report.source_chunks or cited.source_chunks,
        }
    )
    return merged.with_threshold(report.threshold) if report.threshold is not None else merged


def with_citations(
    report: Report,
    chunks: Sequence[str],
    answer: str,
    *,
    llm: Any,
    style: str | None = None,
    uncited: UncitedPolicy = "flag",
    threshold: float = 0.5,
) -> Report:
    """:func:`awith_citations` from synchronous code."""
    from halluscope.sync import run_sync

    return run_sync(awith_citations(report, chunks, answer, llm=llm, style=style, uncited=uncited, threshold=threshold))
