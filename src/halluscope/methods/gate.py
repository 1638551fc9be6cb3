"""The cheap gate: settles the obvious claims with no model, and says which ones it cannot settle.

Per claim, against its best source windows (BM25, always available) and the whole source:

* a number, date (month, weekday) or name in the claim that the source never mentions -> ``unsupported``,
  with those characters as the target spans;
* the claim negates what its closest source sentence asserts, or asserts what it negates -> ``contradicted``;
* the claim speaks of a whole (``the whole project``) where the source sentence about the same things gives a part
  (``two thirds``, ``the rest``, ``40%``) -> ``contradicted``;
* almost none of the claim's content words occur in the source -> ``unsupported``;
* the claim is verbatim-grade (nearly every word inside a 3-word run shared with one window, every content
  word in that window) -> ``supported``;
* anything else -> ``uncertain`` (left for the verifier in a cascade).

Every decision carries a support score in [0, 1] (the mean of the window's content-word precision and the
claim's 3-gram coverage, halved per missing number/date/name and for a negation flip), the reason in words
and the source window as evidence. Used two ways: the ``gate`` method (no LLM: target sentences are the
claims, uncertain claims labelled by their score) and ``-o gate=lexical`` on every claim method (cascade).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.methods.details import MethodDetails
from halluscope.options import MethodOptions, options_view, own_options
from halluscope.records import Claim, Evidence, Report, Span, Verdict
from halluscope.stages import GateDecision, build_stage, register_stage
from halluscope.stages.findings import claim_finding
from halluscope.text import split_sentences
from halluscope.text.lexical import (
    Token,
    content_tokens,
    dates,
    month_or_day_key,
    names,
    negation_count,
    numbers,
    part_cues,
    source_facts,
    tokens,
    totality_cues,
)


class GateOptions(MethodOptions):
    """Thresholds of the lexical gate (the same defaults serve the cascade ``-o gate=lexical``)."""

    top_k: int = Field(default=3, ge=1)
    """Source windows retrieved per claim (BM25)."""

    window: int = Field(default=1, ge=0)
    """Sentences added on each side of a retrieved sentence."""

    supported_coverage: float = Field(default=0.9, ge=0.0, le=1.0)
    """Settle `supported` when at least this fraction of the claim's words lie in 3-word runs shared with one window
    (and every content word is in it)."""

    flip_overlap: float = Field(default=0.8, ge=0.0, le=1.0)
    """A negation flip counts only against a source sentence holding at least this fraction of the claim's content
    words."""

    absent_precision: float = Field(default=0.1, ge=0.0, le=1.0)
    """Settle `unsupported` when fewer than this fraction of the claim's content words occur anywhere in the source
    (claims of 4+ content words)."""

    uncertain: Literal["threshold", "unscored"] = "threshold"
    """The `gate` method only: label an uncertain claim by its support score (threshold), or leave it unscored."""

    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """With uncertain=threshold: an uncertain claim scoring at least this is labelled supported."""


async def _bm25_index(source: str, opts: GateOptions) -> Any:
    """The source's BM25 index from the process-wide index cache (:mod:`halluscope.retrieval.cache`)."""
    from halluscope.retrieval import RetrievalConfig, shared_index

    return await shared_index(source, RetrievalConfig(top_k=opts.top_k, window=opts.window, retriever="bm25"))


@register_stage("lexical", "gate")
class LexicalGate:
    """Numbers, dates and names the source never mentions, negation flips, verbatim support (no LLM)."""

    name: ClassVar[str]
    uses_llm: ClassVar[bool] = False
    Options = options_view(
        "LexicalGateOptions",
        GateOptions,
        ["top_k", "window", "supported_coverage", "flip_overlap", "absent_precision"],
        "Thresholds of the lexical gate.",
    )

    def __init__(self, model: Any = None, options: Any = None):
        self.opts = options if options is not None else self.Options()

    async def __call__(self, claims: Sequence[Claim], source: str, target: str | None = None) -> list[GateDecision]:
        index = await _bm25_index(source, self.opts)
        return await asyncio.to_thread(lambda: [self.judge(c, source, target, index) for c in claims])

    def judge(self, claim: Claim, source: str, target: str | None, index: Any) -> GateDecision:
        facts = source_facts(source)
        words = tokens(claim.text)
        content = content_tokens(words)
        missing_numbers = [n for n in numbers(claim.text) if not facts.has_number(n)]
        date_tokens = dates(words)
        missing_dates = [t for t in date_tokens if month_or_day_key(t) not in facts.date_keys]
        date_spans = {t.span for t in date_tokens}
        missing_names = [t for t in names(claim.text, words) if t.span not in date_spans and not facts.has_word(t)]
        in_source = [t for t in content if facts.has_word(t)]
        best = _best_window(words, content, index.retrieve(claim.text))
        flip = _negation_flip(words, content, best, index, self.opts.flip_overlap)
        clash = None if flip is not None else _whole_for_part(claim.text, words, index)

        signals: dict[str, Any] = {
            "coverage": round(best.coverage, 4) if best else 0.0,
            "content_precision_window": round(best.precision, 4) if best else 0.0,
            "content_precision_source": round(len(in_source) / len(content), 4) if content else 1.0,
            "missing_numbers": [n.text for n in missing_numbers],
            "missing_dates": [t.text for t in missing_dates],
            "missing_names": [t.text for t in missing_names],
            "negation_flip": flip is not None,
            "whole_for_part": clash is not None,
        }
        score = ((best.precision + best.coverage) / 2) if best else 0.0
        penalties = len(missing_numbers) + len(missing_dates) + len(missing_names) + (flip is not None)
        score *= 0.5 ** (penalties + (clash is not None))
        evidence = [Evidence(text=best.snippet.text, span=best.snippet.span, relation="related")] if best else []
        if clash is not None:  # the sentence giving the part, not the retrieved window
            evidence = [Evidence(text=clash[1].text, span=clash[1].span)]
        elif missing_names and not missing_numbers and not missing_dates:
            evidence = []  # not mentioned: no passage of the source is about that name

        def decide(outcome: str, reason: str, local: Sequence[Span] = ()) -> GateDecision:
            relation = {"supported": "supports", "contradicted": "contradicts"}.get(outcome, "related")
            ev = [e.model_copy(update={"relation": relation}) for e in evidence]
            spans = target_spans(claim, target, local) if local else list(claim.target_spans)
            return GateDecision(
                claim=claim,
                outcome=outcome,  # type: ignore[arg-type]
                score=round(min(1.0, max(0.0, score)), 6),
                reason=reason,
                evidence=ev,
                target_spans=spans,
                signals=signals,
            )

        absent = [
            *(("number", n.text, n.span) for n in missing_numbers),
            *(("date", t.text, t.span) for t in missing_dates),
            *(("name", t.text, t.span) for t in missing_names),
        ]
        if absent:
            pieces = _merge_adjacent(claim.text, sorted(absent, key=lambda a: a[2].start))
            listed = ", ".join(f'{kind} "{text}"' for kind, text, _ in pieces)
            return decide("unsupported", f"The source never mentions the {listed}.", [s for _, _, s in pieces])
        if flip is not None:
            sentence, cue = flip
            said = f'The claim negates ("{cue.text}") what' if cue is not None else "The claim asserts what"
            verb = "asserts" if cue is not None else "negates"
            return decide(
                "contradicted",
                f'{said} the source sentence "{_clip(sentence)}" {verb}.',
                [cue.span] if cue is not None else [],
            )
        if clash is not None:
            cue, sentence, parts = clash
            shown = ", ".join(f'"{p}"' for p in parts)
            return decide(
                "contradicted",
                f'The claim says "{cue.text}" where the source sentence about the same things gives a part '
                f'({shown}): "{_clip(sentence.text)}"',
                [cue.span],
            )
        if len(content) >= 4 and len(in_source) / len(content) < self.opts.absent_precision:
            unseen = [t for t in content if not facts.has_word(t)]
            return decide(
                "unsupported",
                f"{len(unseen)} of the claim's {len(content)} content words never occur "
                f"in the source ({', '.join(t.text for t in unseen[:6])}).",
                [t.span for t in unseen],
            )
        if best is not None and best.coverage >= self.opts.supported_coverage and best.precision == 1.0:
            return decide(
                "supported",
                f"Verbatim-grade: {best.coverage:.0%} of the claim's words lie in 3-word runs "
                f"shared with the source window, every content word included.",
            )
        reason = "Uncertain: " + (
            f"{best.coverage:.0%} of the claim's words lie in 3-word runs shared with the best "
            f"source window, {best.precision:.0%} of its content words occur in it"
            if best
            else "no source window found"
        )
        return decide("uncertain", reason)


def _merge_adjacent(text: str, pieces: list[tuple[str, str, Span]]) -> list[tuple[str, str, Span]]:
    """Pieces of one kind separated only by spaces become one ("Peter" + "Grant" -> "Peter Grant")."""
    out: list[tuple[str, str, Span]] = []
    for kind, piece, span in pieces:
        if out and out[-1][0] == kind and not text[out[-1][2].end : span.start].strip():
            joined = Span(start=out[-1][2].start, end=span.end)
            out[-1] = (kind, joined.of(text), joined)
        else:
            out.append((kind, piece, span))
    return out


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Window:
    def __init__(self, snippet: Any, coverage: float, precision: float):
        self.snippet = snippet
        self.coverage = coverage
        self.precision = precision


def ngram_coverage(claim: Sequence[str], window: Sequence[str], n: int = 3) -> float:
    """The fraction of the claim's words that lie inside an n-gram (n = 3, fewer for shorter claims) that also
    occurs in the window."""
    if not claim:
        return 0.0
    n = min(n, len(claim))
    grams = {tuple(window[i : i + n]) for i in range(len(window) - n + 1)}
    covered = [False] * len(claim)
    for i in range(len(claim) - n + 1):
        if tuple(claim[i : i + n]) in grams:
            for j in range(i, i + n):
                covered[j] = True
    return sum(covered) / len(claim)


def _best_window(words: list[Token], content: list[Token], snippets: Sequence[Any]) -> _Window | None:
    claim_norms = [t.norm for t in words]
    best: _Window | None = None
    for snippet in snippets:
        window_tokens = tokens(snippet.text)
        norms = {t.norm for t in window_tokens}
        precision = sum(t.norm in norms for t in content) / len(content) if content else 1.0
        window = _Window(snippet, ngram_coverage(claim_norms, [t.norm for t in window_tokens]), precision)
        if best is None or (window.coverage, window.precision) > (best.coverage, best.precision):
            best = window
    return best


def _negation_flip(
    words: list[Token], content: list[Token], best: _Window | None, index: Any, min_overlap: float
) -> tuple[str, Token | None] | None:
    """(the source sentence, the claim's negation cue or None) when the claim and the source sentence closest
    to it disagree on negation; None otherwise."""
    if best is None or len(content) < 2:
        return None
    wanted = {t.norm for t in content}
    closest: tuple[float, str] | None = None
    for i in best.snippet.sentence_indices:
        sentence = index.sentences[i].text
        norms = {t.norm for t in tokens(sentence)}
        overlap = len(wanted & norms) / len(wanted)
        if closest is None or overlap > closest[0]:
            closest = (overlap, sentence)
    if closest is None or closest[0] < min_overlap:
        return None
    claim_neg = negation_count(words) % 2
    if claim_neg == negation_count(tokens(closest[1])) % 2:
        return None
    cue = next(
        (
            t
            for t in words
            if t.norm
            and (
                t.lower
                in ("not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "nowhere", "cannot", "without")
                or t.lower.replace("’", "'").endswith("n't")
            )
        ),
        None,
    )
    return closest[1], cue if claim_neg else None


def _clause(text: str, at: Span) -> str:
    """The part of ``text`` around ``at`` between the nearest clause marks (``,;:`` or a sentence end)."""
    start = max(text.rfind(mark, 0, at.start) for mark in ",;:.!?") + 1
    ends = [i for i in (text.find(mark, at.end) for mark in ",;:.!?") if i >= 0]
    return text[start : min(ends) if ends else len(text)]


def _whole_for_part(claim: str, words: list[Token], index: Any) -> tuple[Token, Any, list[str]] | None:
    """(the claim's whole-quantity word, the source sentence, its part words) when the claim speaks of a whole
    (``the whole project``) and the source sentence sharing most of that clause's content words (at least two,
    and at least half) gives a part (``two thirds ... and the rest``) and no whole; None otherwise."""
    for cue in totality_cues(words):
        wanted = {t.norm for t in content_tokens(tokens(_clause(claim, cue.span)))} - {cue.norm}
        if len(wanted) < 2:
            continue
        best: tuple[int, Any, list[str]] | None = None
        for sentence in index.sentences:
            toks = tokens(sentence.text)
            parts = part_cues(sentence.text, toks)
            if not parts or totality_cues(toks):
                continue
            shared = len(wanted & {t.norm for t in toks})
            if shared >= 2 and shared * 2 >= len(wanted) and (best is None or shared > best[0]):
                best = (shared, sentence, parts)
        if best is not None:
            return cue, best[1], best[2]
    return None


def target_spans(claim: Claim, target: str | None, local: Sequence[Span]) -> list[Span]:
    """Claim-relative spans as target spans: offset by the claim's span when the claim is that slice of the
    target verbatim (without the target: when the claim has one span of its exact length); else each piece is searched
    for inside the claim's spans (then the whole target); the claim's own spans when a piece cannot be found."""
    if target is None:  # no target to compare with: trust a single span of the claim's exact length
        only = claim.target_spans[0] if len(claim.target_spans) == 1 else None
        if only is None or len(only) != len(claim.text):
            return list(claim.target_spans)
        return [Span(start=only.start + s.start, end=only.start + s.end) for s in local]
    exact = next((s for s in claim.target_spans if s.of(target) == claim.text), None)
    out: list[Span] = []
    for span in local:
        if exact is not None:
            out.append(Span(start=exact.start + span.start, end=exact.start + span.end))
            continue
        piece = span.of(claim.text)
        areas = [*claim.target_spans, Span(start=0, end=len(target))]
        hit = next((a.start + pos for a in areas if (pos := a.of(target).find(piece)) >= 0), None)
        if hit is None:
            return list(claim.target_spans)
        out.append(Span(start=hit, end=hit + len(piece)))
    return sorted(set(out), key=lambda s: (s.start, s.end))


def gate_verdict(
    decision: GateDecision,
    gate_name: str,
    uncertain: Literal["threshold", "unscored"] = "unscored",
    threshold: float = 0.5,
) -> Verdict:
    """A gate decision as a Verdict: settled decisions keep their label (``decided_by="gate:<name>"``); an
    uncertain one is unscored, or with ``uncertain="threshold"`` labelled by its score
    (``decided_by="gate:<name>:threshold"``)."""
    common: dict[str, Any] = {
        "claim": decision.claim,
        "score": decision.score,
        "evidence": decision.evidence,
        "target_spans": decision.target_spans,
    }
    if decision.settled:
        return Verdict(label=decision.outcome, reason=decision.reason, decided_by=f"gate:{gate_name}", **common)  # type: ignore[arg-type]
    if uncertain == "unscored":
        return Verdict(label="unscored", reason=decision.reason, decided_by=f"gate:{gate_name}", **common)
    label: Literal["supported", "unsupported"] = "supported" if decision.score >= threshold else "unsupported"
    sign = ">=" if label == "supported" else "<"
    return Verdict(
        label=label,
        reason=f"{decision.reason}; labelled by its lexical support {decision.score:.2f} {sign} {threshold}",
        decided_by=f"gate:{gate_name}:threshold",
        **common,
    )


class GateDetails(MethodDetails):
    """``Report.details`` of the ``gate`` method."""

    gate: dict[str, dict[str, Any]] | None = None
    """Per sentence id (``s1``, ``s2``, ...): the gate's ``outcome`` (``uncertain`` where its rules settled nothing),
    the ``label`` the sentence got (an uncertain one labelled by its support score, with ``uncertain=threshold``) and
    the lexical signals behind it."""


@register_method
class GateMethod(Method):
    """Each target sentence through the lexical gate: no LLM, no download, milliseconds per claim."""

    name = "gate"
    description = (
        "Lexical gate, no LLM: flags numbers, dates and names the source never mentions and negation "
        "flips, with their spans; score = mean lexical support of the target sentences."
    )
    uses_llm = False
    Options = GateOptions
    Details: ClassVar[type[MethodDetails]] = GateDetails
    opts: GateOptions

    def __init__(self, llm: Any = None, config: Any = None, **options: Any):
        super().__init__(llm, config, **options)
        self.gate: LexicalGate = build_stage("gate", "lexical", None, own_options(LexicalGate.Options, self.opts))

    async def run(self, source: str, target: str) -> Report:
        sentences = await asyncio.to_thread(split_sentences, target)  # CPU work: off the event loop
        claims = [Claim(text=s.text, kind="sentence", id=f"s{s.index + 1}", target_spans=[s.span]) for s in sentences]
        if not claims:
            return Report(method=self.name, unscored_reason="the target has no sentences")
        decisions = await self.gate(claims, source, target)
        verdicts = [gate_verdict(d, self.gate.name, self.opts.uncertain, self.opts.threshold) for d in decisions]
        labels = ("supported", "unsupported", "contradicted", "unscored")
        counts = {k: float(sum(v.label == k for v in verdicts)) for k in labels}  # what --claims lists
        subscores: dict[str, float | None] = {"claims": float(len(claims)), **counts}
        score = sum(d.score for d in decisions) / len(decisions)
        findings = [claim_finding(v) for v in verdicts if v.label in ("unsupported", "contradicted")]
        details = GateDetails.build(
            gate={
                d.claim.id: {"outcome": d.outcome, "label": v.label, **d.signals} for d, v in zip(decisions, verdicts)
            }
        )
        return Report(
            method=self.name,
            score=score,
            subscores=subscores,
            claims=claims,
            verdicts=verdicts,
            findings=findings,
            details=details,
        )
