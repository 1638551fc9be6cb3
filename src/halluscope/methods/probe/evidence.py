"""Step 2, evidence finding: claim + context -> source passages with exact source spans.

:class:`ProbeEvidenceFinder` (registered evidence finder ``probe``, the paper's step) asks the model to quote
the passages of the context that bear on the claim, then locates every quote with
:func:`halluscope.text.locate`: in the snippet first when the context is one, else (or then) in the FULL
source, so a verified passage always carries its span in the source. A quote found nowhere is rejected and
recorded, never used. :class:`TopSentencesFinder` (``top_sentences``) is the no-LLM alternative: the source
sentences the retriever ranks highest for the claim.

What a search can end in (:attr:`QuoteSearch.outcome`):

* ``unusable_reply``: the reply stated no evidence list (prose, cut-off JSON, wrong keys): the step fails;
* ``all_quotes_rejected``: every quote was invented (found nowhere in the source): the step fails;
* ``no_evidence``: a valid reply with an explicit empty list: nothing bears on the claim;
* ``evidence``: at least one passage located in the source.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from halluscope.llm.structured import generate_reply
from halluscope.methods.probe.options import ProbeFinderOptions, TopSentencesOptions
from halluscope.methods.probe.replies import (
    FIND_EVIDENCE_PROMPT,
    FIND_REPLY_TOKENS,
    FULL_SOURCE_HEADING,
    SNIPPET_HEADING,
    EvidenceReply,
)
from halluscope.records import Claim, Evidence, LLMCall, Span, StepResult
from halluscope.retrieval import RetrievalConfig, resolve_retriever, shared_index
from halluscope.stages import Context, PromptResolver, register_stage, same_prompt
from halluscope.stages.verifiers import reply_budget
from halluscope.text import Match, Sentence, locate, split_sentences

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

SearchOutcome = Literal["unusable_reply", "all_quotes_rejected", "no_evidence", "evidence"]
LOCATE_OFF_LOOP_CHARS = 20_000
"""Quotes are located in a worker thread when the source is longer than this (fuzzy matching is CPU work)."""


@dataclass
class QuoteSearch:
    """One evidence search for one claim in one context: every quote with how it was located (or why it was
    rejected), the verified passages, the calls, and the error when the reply was unusable."""

    claim: Claim
    context: Context
    quotes: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    error: str | None = None

    @property
    def rejected(self) -> list[str]:
        return [q["quote"] for q in self.quotes if q["status"] == "rejected"]

    @property
    def outcome(self) -> SearchOutcome:
        if self.error is not None:
            return "unusable_reply"
        if self.evidence:
            return "evidence"
        return "all_quotes_rejected" if self.rejected else "no_evidence"

    @property
    def failure_reason(self) -> str | None:
        """Why this search gives no basis for a verdict (None when it does)."""
        if self.outcome == "unusable_reply":
            return f"evidence finding failed: {self.error}"
        if self.outcome == "all_quotes_rejected":
            return f"all {len(self.rejected)} quoted passages were not found in the source"
        return None

    def step(self) -> StepResult[list[Evidence]]:
        reason = self.failure_reason
        if reason is not None:
            return StepResult.failure(reason, self.calls)
        return StepResult.success(list(self.evidence), self.calls)

    def record(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim.id,
            "context": self.context.describe(),
            "quotes": self.quotes,
            "outcome": self.outcome,
            "error": self.error,
        }


def locate_quote(quote: str, context: Context, source: str, min_fuzzy: float) -> tuple[Match | None, str]:
    """``quote``'s span in the source: searched in the snippet first (so a repeated sentence is pinned where
    the model read it), then in the whole source."""
    if context.kind == "snippet" and context.span is not None:
        match = locate(quote, context.text, min_fuzzy=min_fuzzy)
        if match is not None:
            span = Span(start=context.span.start + match.span.start, end=context.span.start + match.span.end)
            if span.of(source) == match.span.of(context.text):
                return Match(span, match.how, match.score), "snippet"
    return locate(quote, source, min_fuzzy=min_fuzzy), "source"


@register_stage("probe", "evidence_finder")
class ProbeEvidenceFinder:
    """Claim + context -> the passages the model quotes, located in the source (invented quotes rejected).

    PROBE step 2. Every quote gets exact source offsets or is rejected and recorded."""

    name: str
    uses_llm = True
    Options = ProbeFinderOptions

    def __init__(
        self, model: LLM, options: Any = None, *, prompts: PromptResolver = same_prompt, min_fuzzy: float = 90.0
    ):
        self.llm = model
        self.prompt = prompts(FIND_EVIDENCE_PROMPT)
        self.max_evidence: int = (options or self.Options()).max_evidence
        self.min_fuzzy = min_fuzzy

    def messages(self, claim: str, context_text: str, kind: str = "source") -> list[dict[str, str]]:
        heading = SNIPPET_HEADING if kind == "snippet" else FULL_SOURCE_HEADING
        return self.prompt.render(
            claim=claim, source=context_text, max_evidence=self.max_evidence, source_heading=heading
        )

    async def search(self, claim: Claim, context: Context, source: str) -> QuoteSearch:
        step = await generate_reply(
            self.llm,
            self.messages(claim.text, context.text, context.kind),
            EvidenceReply,
            params=self.llm.params(max_tokens=reply_budget(self.llm, FIND_REPLY_TOKENS)),
        )
        found = QuoteSearch(claim, context, calls=step.calls)
        if step.value is None:
            found.error = step.error
            return found
        await self.record_quotes(found, step.value.evidence, source)
        return found

    async def record_quotes(self, found: QuoteSearch, quotes: Sequence[str], source: str) -> None:
        """Locate the model's quotes (at most ``max_evidence``) in the source and record each on ``found``:
        verified with its span (and as evidence), a duplicate of an earlier one, or rejected."""
        quotes = list(quotes)[: self.max_evidence]
        if len(source) > LOCATE_OFF_LOOP_CHARS:
            located = await asyncio.to_thread(self._locate_all, quotes, found.context, source)
        else:
            located = self._locate_all(quotes, found.context, source)
        seen: set[tuple[int, int]] = set()
        for quote, (match, where) in zip(quotes, located):
            if match is None:
                found.quotes.append({"quote": quote, "status": "rejected", "why": "not found in the source"})
                continue
            key = (match.span.start, match.span.end)
            if key in seen:
                found.quotes.append({"quote": quote, "status": "duplicate", "span": match.span.model_dump()})
                continue
            seen.add(key)
            found.quotes.append(
                {
                    "quote": quote,
                    "status": "verified",
                    "how": match.how,
                    "located_in": where,
                    "span": match.span.model_dump(),
                }
            )
            found.evidence.append(Evidence(text=match.span.of(source), span=match.span, relation="related"))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "max_evidence": self.max_evidence, "min_fuzzy": self.min_fuzzy}

    def _locate_all(self, quotes: list[str], context: Context, source: str) -> list[tuple[Match | None, str]]:
        return [locate_quote(q, context, source, self.min_fuzzy) for q in quotes]

    async def __call__(self, claim: Claim, context: Context, source: str) -> StepResult[list[Evidence]]:
        return (await self.search(claim, context, source)).step()


@register_stage("top_sentences", "evidence_finder")
class TopSentencesFinder:
    """Claim + context -> the context's source sentences the retriever ranks highest (no LLM call).

    The ``max_evidence`` best sentences, spans exact by construction. A cheap finder for weak or costly
    models; the evaluation step still decides support."""

    name: str
    uses_llm = False
    Options = TopSentencesOptions

    def __init__(self, model: Any = None, options: Any = None):
        opts = options or self.Options()
        self.max_evidence: int = opts.max_evidence
        self.config = RetrievalConfig(top_k=self.max_evidence, window=0, retriever=opts.retriever)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "max_evidence": self.max_evidence,
            "retriever": resolve_retriever(self.config.retriever),
        }

    async def search(self, claim: Claim, context: Context, source: str) -> QuoteSearch:
        index = await shared_index(source, self.config)
        scores = await asyncio.to_thread(index.sentence_scores, claim.text)
        inside = [
            s
            for s in index.sentences
            if context.kind != "snippet"
            or context.span is None
            or (context.span.start <= s.span.start and s.span.end <= context.span.end)
        ]
        ranked = sorted(inside, key=lambda s: -float(scores[s.index]))[: self.max_evidence]
        found = QuoteSearch(claim, context)
        for s in ranked:
            found.quotes.append(
                {
                    "quote": s.text,
                    "status": "retrieved",
                    "how": index.retriever,
                    "score": round(float(scores[s.index]), 6),
                    "span": s.span.model_dump(),
                }
            )
            found.evidence.append(Evidence(text=s.text, span=s.span, relation="related"))
        return found

    async def __call__(self, claim: Claim, context: Context, source: str) -> StepResult[list[Evidence]]:
        return (await self.search(claim, context, source)).step()


class SourceSentences:
    """The sentences of the last few sources (split once, in a worker thread), for surrounding context."""

    def __init__(self, size: int = 4):
        self.size = size
        self._items: OrderedDict[str, list[Sentence]] = OrderedDict()

    async def get(self, source: str) -> list[Sentence]:
        key = hashlib.sha1(source.encode("utf-8", "surrogatepass")).hexdigest()
        if key not in self._items:
            self._items[key] = await asyncio.to_thread(split_sentences, source)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        self._items.move_to_end(key)
        return self._items[key]


def context_around(source: str, sentences: list[Sentence], span: Span, n: int) -> str:
    """``span`` widened to whole sentences plus ``n`` more on each side (clipped at the document's edges)."""
    starts = [s.span.start for s in sentences]
    i = max(0, bisect.bisect_right(starts, span.start) - 1)
    hit = []
    while i < len(sentences) and sentences[i].span.start < max(span.end, span.start + 1):
        if sentences[i].span.overlaps(span):
            hit.append(i)
        i += 1
    if not hit:
        return span.of(source)
    first, last = max(0, hit[0] - n), min(len(sentences) - 1, hit[-1] + n)
    return source[sentences[first].span.start : sentences[last].span.end]
