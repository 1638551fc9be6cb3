"""The typed vocabulary shared by every stage, method, generator and report (SPEC §1).

All records are pydantic models, so ``Report.model_validate_json(r.model_dump_json())`` is lossless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

ClaimKind = Literal["event", "descriptive", "sentence", "atomic", "paragraph"]
Relation = Literal["supports", "contradicts", "related"]
EvidenceRelation = Literal["contradicts", "not_mentioned"]
Label = Literal["supported", "unsupported", "contradicted", "unscored"]
FindingKind = Literal["unsupported", "contradicted", "event_order", "inconsistent", "other"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Span(_Record):
    """Half-open character interval ``[start, end)``: ``text[start:end]`` is the span."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.end < self.start:
            raise ValueError(f"span end {self.end} < start {self.start}")
        return self

    def __len__(self) -> int:
        return self.end - self.start

    def of(self, text: str) -> str:
        return text[self.start : self.end]

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end


class Usage(_Record):
    """LLM cost accounting. ``calls`` counts requests that reached a model; ``cache_hits`` counts replies taken
    from halluscope's reply cache (no request made), apart from ``cached_prompt_tokens`` (the model's prompt cache).

    ``cost_usd`` is the price of the ``calls`` in US dollars where the backend knows its provider's prices
    (the LiteLLM backend, from LiteLLM's cost map), else ``None``: unknown, never guessed. Usage without
    calls costs nothing, so a sum is known exactly when every part with calls has a known cost."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    cached_prompt_tokens: int = 0
    """Of ``prompt_tokens``, those the backend did not evaluate again because it reused them from its prefix cache
    (OpenAI-compatible ``usage.prompt_tokens_details.cached_tokens``; the embedded backend's llama.cpp KV-cache
    prefix hits). 0 where the backend does not say."""
    cost_usd: float | None = None
    cost_note: str | None = None
    """Why ``cost_usd`` is ``None`` although calls were made (e.g. no price known for the model); ``None`` otherwise."""

    @property
    def cost_known(self) -> bool:
        return self.cost_usd is not None or self.calls == 0

    def __add__(self, other: Usage) -> Usage:
        cost = None
        if self.cost_known and other.cost_known and (self.cost_usd is not None or other.cost_usd is not None):
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        note = None if cost is not None else next((u.cost_note for u in (self, other) if u.cost_note), None)
        return Usage(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cache_hits=self.cache_hits + other.cache_hits,
            cost_usd=cost,
            cost_note=note,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
        )

    @property
    def evaluated_prompt_tokens(self) -> int:
        """Prompt tokens the model actually had to process: ``prompt_tokens`` less the cached ones."""
        return max(0, self.prompt_tokens - self.cached_prompt_tokens)

    def cached_note(self) -> str:
        """`` (N prompt tokens reused)`` for a summary line when the model reused some prompt tokens from its own
        prefix cache (not halluscope's reply cache: ``cache_hits``), else ``""``."""
        return f" ({self.cached_prompt_tokens} prompt tokens reused)" if self.cached_prompt_tokens else ""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMCall(_Record):
    """One exchange with a model, kept for audit: the exact messages sent and the raw reply."""

    model: str
    messages: list[dict[str, str]]
    reply: str
    cached: bool = False
    usage: Usage = Field(default_factory=Usage)
    reply_size: int | None = None
    """Set only for a reply refused for its size: how large it was (``reply_size_unit``); ``reply`` then holds
    just its first characters (or nothing when reading stopped early), so a huge reply is stored once, cut."""
    reply_size_unit: Literal["characters", "bytes"] | None = None


class Claim(_Record):
    """A checkable unit of the target."""

    text: str
    kind: ClaimKind = "sentence"
    id: str | None = None
    target_spans: list[Span] = Field(default_factory=list)
    order: int | None = None  # position among event claims, in target order


class Evidence(_Record):
    """A piece of the source related to a claim. ``span`` is ``None`` only if the text could not be
    located in the source (it is then a model's paraphrase, never a verified quote)."""

    text: str
    span: Span | None = None
    relation: Relation = "related"
    chunk: int | None = Field(default=None, ge=0)
    """When the source was a list of chunks (``halluscope.check(source=[...], ...)``): the index of the chunk
    this evidence lies in (where it starts); ``None`` for a single-text source or unlocated evidence."""
    chunk_span: Span | None = None
    """With ``chunk``: the evidence's offsets inside that chunk (``span`` stays the offsets in the joined source)."""


class FixCandidate(_Record):
    """A suggested correction of a flagged claim and how its re-verification went (``order=verdict_first``): the
    candidate was scored by the same short yes/no reply against the same source context as the claim itself."""

    text: str
    origin: Literal["model", "removed"] = "model"
    """``model``: the fix the explanation proposed; ``removed``: the flagged text with the part that holds its
    unsupported words removed, or the clause its failing fact lies in (no LLM call)."""
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    """Its P(supported) from the re-verification reply, where the backend gave token probabilities."""
    verified: bool = False
    """Whether the re-verification found it supported (answered yes, P(supported) at least ``explain_below``)."""
    note: str = ""
    """What the re-verification said (the answer and probability, or why it could not score it)."""


class Verdict(_Record):
    """The judgment on one claim. ``unscored`` always carries a ``reason`` saying why."""

    claim: Claim
    label: Label
    reason: str = ""
    score: float | None = None  # e.g. a per-claim probability or +1/-1, when a method has one
    evidence: list[Evidence] = Field(default_factory=list)
    calls: list[LLMCall] = Field(default_factory=list)
    decided_by: str | None = None  # the stage that gave the label, e.g. "gate:lexical" or "verifier:dove"
    target_spans: list[Span] = Field(default_factory=list)  # the offending characters, when narrower than the claim
    support_probability: float | None = Field(default=None, ge=0.0, le=1.0)
    """The verifier's probability that the source supports the claim, where it computes one: the encoder checkers,
    and the LLM verifiers from the token probabilities at their label (renormalised over the allowed labels; see
    :mod:`halluscope.llm.label_probs`), where the backend returns them. None where there is none (never guessed).
    A finding made from this verdict carries ``1 - support_probability`` as its confidence."""
    fix: str | None = None
    """A rewrite of the claim that the source supports, where the verifier proposed one (``order=verdict_first``
    explanations)."""
    fix_rejected: str | None = None
    """Why the verifier's suggested fix is not shown (``fix`` is then None): it held prompt markup, or it only
    repeated the claim (:mod:`halluscope.text.markup`)."""
    fix_probability: float | None = Field(default=None, ge=0.0, le=1.0)
    """The shown fix's P(supported) when it was re-verified against the source and the backend gave probabilities."""
    fix_verified: bool = False
    """Whether the shown ``fix`` was re-verified: scored supported against the same source context as the claim
    (``order=verdict_first`` with ``verify_fix``). False for a fix that was not checked."""
    fix_candidates: list[FixCandidate] = Field(default_factory=list)
    """Every fix that was re-verified, the shown one and the rejected ones (``verified`` false), best first."""
    evidence_relation: EvidenceRelation | None = None
    """How the source relates to the flagged claim, where it was decided from token probabilities
    (``order=verdict_first``): ``contradicts`` when a source passage contradicts it (that passage is the evidence),
    ``not_mentioned`` when none does (the closest passage is the evidence, as related context)."""

    @model_validator(mode="after")
    def _unscored_has_reason(self) -> Verdict:
        if self.label == "unscored" and not self.reason:
            raise ValueError("an unscored verdict needs a reason")
        return self

    @classmethod
    def unscored(cls, claim: Claim, reason: str, calls: list[LLMCall] | None = None) -> Verdict:
        return cls(claim=claim, label="unscored", reason=reason, calls=list(calls or []))

    def finding_fields(self) -> dict[str, Any]:
        """The fix and its re-verification, and the evidence's relation, as a finding made from this verdict
        carries them."""
        return {
            "evidence_relation": self.evidence_relation,
            "fix": self.fix,
            "fix_probability": self.fix_probability,
            "fix_verified": self.fix_verified,
            "fix_candidates": list(self.fix_candidates),
        }


class Finding(_Record):
    """A located problem: why (free-form description), where (target spans) and the source evidence."""

    description: str
    kind: FindingKind = "unsupported"
    target_spans: list[Span] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    claim_ids: list[str] = Field(default_factory=list)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    """How sure the method is that this is a real problem, in [0, 1], where the method has such a number (a claim
    verdict's ``1 - support_probability``; PROBE without token probabilities: the share of judge votes against the
    claim's best source passage); ``None`` where it has none."""
    fix: str | None = None
    """A suggested correction of the flagged text, where the method proposed one; re-verified against the source
    only where ``fix_verified`` says so."""
    fix_rejected: str | None = None
    """Why the method's suggested fix is not shown (``fix`` is then None): it held prompt markup, or it only
    repeated the flagged text (:mod:`halluscope.text.markup`)."""
    fix_probability: float | None = Field(default=None, ge=0.0, le=1.0)
    """The shown fix's P(supported) when it was re-verified against the source and the backend gave probabilities."""
    fix_verified: bool = False
    """Whether the shown ``fix`` was re-verified: scored supported against the same source context as the claim
    (``order=verdict_first`` with ``verify_fix``). False for a fix that was not checked."""
    fix_candidates: list[FixCandidate] = Field(default_factory=list)
    """Every fix that was re-verified, the shown one and the rejected ones (``verified`` false), best first."""
    evidence_relation: EvidenceRelation | None = None
    """How the source relates to the flagged claim, where it was decided from token probabilities
    (``order=verdict_first``): ``contradicts`` when a source passage contradicts it (that passage is the evidence),
    ``not_mentioned`` when none does (the closest passage is the evidence, as related context)."""


class Report(_Record):
    """What every method returns. ``score`` is in [0, 1], higher = better aligned with the source;
    ``None`` means the method could not score this pair, and ``unscored_reason`` says why."""

    method: str
    model: str | None = None
    score: float | None = None
    label: Literal["consistent", "inconsistent"] | None = None
    threshold: float | None = None
    unscored_reason: str | None = None
    subscores: dict[str, float | None] = Field(default_factory=dict)
    claims: list[Claim] = Field(default_factory=list)
    verdicts: list[Verdict] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    elapsed_s: float = 0.0
    calls: list[LLMCall] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)
    source_chunks: list[Span] = Field(default_factory=list)
    """When the source was a list of chunks: where each chunk lies in the joined source the spans index into
    (chunks joined with ``halluscope.contexts.CHUNK_SEPARATOR``); empty for a single-text source."""

    @model_validator(mode="after")
    def _check_score(self) -> Report:
        if self.score is not None and not (0.0 <= self.score <= 1.0):
            raise ValueError(f"score {self.score} outside [0, 1]")
        if self.score is None and not self.unscored_reason:
            raise ValueError("a report without a score needs an unscored_reason")
        return self

    @property
    def scored(self) -> bool:
        return self.score is not None

    def with_threshold(self, threshold: float) -> Report:
        """This report labelled at ``threshold``: ``consistent`` when the score is at or above it *and* there is no
        finding; ``inconsistent`` when the score is under it or any finding was made (a located problem is never
        called consistent); no label when unscored."""
        if self.score is None:
            label = None
        else:
            label = "consistent" if self.score >= threshold and not self.findings else "inconsistent"
        return self.model_copy(update={"threshold": threshold, "label": label})


class Example(_Record):
    """One labelled item in halluscope's generic JSONL dataset format (one JSON object per line).

    Only ``source`` and ``target`` are required; benchmarks use whichever labels are present.
    """

    id: str
    source: str
    target: str
    label: int | None = Field(default=None, ge=0, le=1)  # 1 = consistent, 0 = inconsistent
    human_score: float | None = None  # graded human judgment (higher = more consistent)
    descriptions: list[str] | None = None  # gold free-form inconsistency descriptions; [] = consistent
    gold_spans: list[Span] | None = None  # gold hallucinated character spans in the target
    group: str | None = None  # items that share a source/truth, e.g. a montage-lie group
    difficulty: str | None = None  # e.g. truth / easy / medium / hard / extreme, or a perturbation name
    split: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


T = TypeVar("T")


@dataclass
class StepResult(Generic[T]):
    """What every pipeline step returns: a value, or the reason there is none (the step is *unscored*),
    plus every LLM exchange the step made. One generic shape for decomposers, verifiers, sorters, parsers."""

    value: T | None
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)
    logprobs: list[Any] | None = None
    """The per-token log-probabilities of the reply the value was parsed from
    (:class:`~halluscope.llm.base.TokenLogprobs`), when the request asked for them and the backend gave them."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def raw(self) -> str:
        """The last raw reply (empty when no call was made)."""
        return self.calls[-1].reply if self.calls else ""

    @classmethod
    def success(cls, value: T, calls: list[LLMCall] | None = None) -> StepResult[T]:
        return cls(value, None, list(calls or []))

    @classmethod
    def failure(cls, reason: str, calls: list[LLMCall] | None = None) -> StepResult[T]:
        if not reason:
            raise ValueError("a failed step needs a reason")
        return cls(None, reason, list(calls or []))
