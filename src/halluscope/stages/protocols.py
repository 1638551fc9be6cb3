"""What a stage is: the typed protocols every stage kind implements (:class:`Decomposer`, :class:`ContextSelector`,
:class:`EvidenceFinder`, :class:`Verifier`, :class:`Aggregator`, :class:`Localizer`, :class:`Deduplicator`,
:class:`Sorter`, :class:`Gate`) and the records that pass between stages (:class:`Context`, :class:`Selection`,
:class:`Aggregate`, :class:`GateDecision`, :class:`EventOrder`, and :class:`PipelineRun`, the one check's run that an
aggregator and a localizer read). The registry that finds and builds stages by name is
:mod:`halluscope.stages`, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from halluscope.records import Claim, Evidence, Finding, Span, StepResult, Verdict
from halluscope.stages.trace import RunTrace

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.prompts import PromptTemplate

PromptResolver = Callable[["PromptTemplate"], "PromptTemplate"]


def same_prompt(template: PromptTemplate) -> PromptTemplate:
    """The default :data:`PromptResolver`: the built-in template, no override."""
    return template


@dataclass(frozen=True)
class Context:
    """What a verifier reads for a claim: the whole source, or one retrieved snippet of it."""

    text: str
    kind: Literal["source", "snippet"] = "source"
    span: Span | None = None  # where ``text`` lies in the source
    rank: int = 0  # 0 = best retrieved snippet
    score: float | None = None  # retrieval score of a snippet
    sentences: tuple[int, ...] = ()  # source sentence indices of a snippet
    trace: RunTrace | None = field(default=None, compare=False, repr=False)
    """The check's trace, for a verifier that records into it (see :mod:`halluscope.stages.trace`); None
    outside a pipeline check."""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "rank": self.rank}
        if self.span is not None:
            out["span"] = self.span.model_dump()
        if self.score is not None:
            out["score"] = round(float(self.score), 6)
        if self.sentences:
            out["sentences"] = list(self.sentences)
        return out


@dataclass
class Selection:
    """The output of a context selector: which path ran and why, and each claim's contexts (best first)."""

    mode: Literal["full", "retrieval"]
    why: str
    contexts: dict[str, list[Context]]  # claim id -> contexts
    details: dict[str, Any] = field(default_factory=dict)

    def with_trace(self, trace: RunTrace) -> Selection:
        """The same selection with every context carrying ``trace`` (the pipeline's, for one check)."""
        contexts = {cid: [replace(c, trace=trace) for c in ctxs] for cid, ctxs in self.contexts.items()}
        return replace(self, contexts=contexts)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "why": self.why, **self.details}
        if self.mode == "retrieval":
            out["snippets"] = {cid: [c.describe() for c in ctxs] for cid, ctxs in self.contexts.items()}
        return out


@dataclass
class Aggregate:
    """An aggregator's output: the score in [0, 1] (None = unscored, with the reason) and sub-scores."""

    score: float | None
    subscores: dict[str, float | None] = field(default_factory=dict)
    unscored_reason: str | None = None


@dataclass
class PipelineRun:
    """One check of a claim method so far, passed to its aggregator and localizer: the claims, their selection
    and verdicts, the details gathered, and what the stages recorded (:class:`~halluscope.stages.trace.RunTrace`)."""

    source: str
    target: str
    claims: list[Claim]
    selection: Selection
    verdicts: list[Verdict]
    details: dict[str, Any] = field(default_factory=dict)
    trace: RunTrace = field(default_factory=RunTrace)
    """What the stages recorded during this check (see :mod:`halluscope.stages.trace`)."""


@dataclass
class EventOrder:
    """A sorter's ordering of events (0-based indices into the list it was given, earliest first), with the
    repairs its reply needed: ``duplicated`` (kept at the first position), ``invented`` (items matching no
    event, dropped) and ``missing`` (events it did not place, left out of the comparison). ``notes`` holds
    what a sorter wants recorded (e.g. the source sentence each event was anchored to)."""

    order: list[int]
    missing: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def repairs(self, events: Sequence[Claim]) -> dict[str, Any]:
        """What was repaired, with claim ids (for ``Report.details["order"]``)."""
        return {
            "missing": [events[i].id for i in self.missing],
            "duplicated": [events[i].id for i in self.duplicated],
            "invented": list(self.invented),
        }


@runtime_checkable
class Decomposer(Protocol):
    """target -> claims, each with the target span(s) it came from."""

    name: str

    async def __call__(self, target: str) -> StepResult[list[Claim]]: ...


@runtime_checkable
class ContextSelector(Protocol):
    """(source, claims) -> the whole source for every claim, or retrieved snippets per claim."""

    name: str

    async def __call__(self, source: str, claims: Sequence[Claim]) -> Selection: ...


@runtime_checkable
class EvidenceFinder(Protocol):
    """(claim, context, source) -> source evidence with exact source spans."""

    name: str

    async def __call__(self, claim: Claim, context: Context, source: str) -> StepResult[list[Evidence]]: ...


@runtime_checkable
class Verifier(Protocol):
    """(claims, one context they share, source) -> one Verdict per claim, in order; a claim that could not be
    judged gets an ``unscored`` verdict with the reason (never a guessed label)."""

    name: str

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]: ...

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """Tokens one call needs besides the context text (prompt wording, claims, reply budget)."""
        ...


@runtime_checkable
class Aggregator(Protocol):
    """(the check's run: claims, verdicts, details, trace) -> the score and sub-scores. The run is passed
    explicitly: an aggregator reads what the stages recorded from ``run.trace`` and may add to ``run.details``."""

    name: str

    async def __call__(self, run: PipelineRun) -> Aggregate: ...


@runtime_checkable
class Localizer(Protocol):
    """(the check's run, after aggregation) -> findings: where in the target the problems are and why."""

    name: str

    async def __call__(self, run: PipelineRun) -> list[Finding]: ...


@runtime_checkable
class Deduplicator(Protocol):
    """(descriptions, the target spans each quotes, target) -> groups of duplicate descriptions (indices; the
    first of each group is the one kept) and the reason when the stage fell back to another way of grouping.
    ``note`` says when the grouping was limited (e.g. too many descriptions to compare pairwise)."""

    name: str
    note: str | None

    async def __call__(
        self, descriptions: Sequence[str], spans: Sequence[Sequence[Span]], target: str
    ) -> tuple[list[list[int]], str | None]: ...


@runtime_checkable
class Sorter(Protocol):
    """(events, the text to order them by, the check's source) -> the events' order according to the text (indices
    into ``events``, with the ones it could not place, repeated or invented): DoveScore's sorters."""

    name: str

    async def __call__(self, events: Sequence[str], text: str, about: str | None = None) -> StepResult[EventOrder]: ...


GateOutcome = Literal["supported", "unsupported", "contradicted", "uncertain"]


@dataclass
class GateDecision:
    """A gate's call on one claim: settled (``supported`` / ``unsupported`` / ``contradicted``) or
    ``uncertain`` (left for the verifier), with a support score in [0, 1], the reason in words, the source
    window it compared against and the offending characters in the target."""

    claim: Claim
    outcome: GateOutcome
    score: float
    reason: str
    evidence: list[Evidence] = field(default_factory=list)
    target_spans: list[Span] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.outcome != "uncertain"


@runtime_checkable
class Gate(Protocol):
    """(claims, source, target) -> one GateDecision per claim, in order, with no LLM call: the cheap first
    pass of a cascade (settled claims skip the verifier)."""

    name: str

    async def __call__(self, claims: Sequence[Claim], source: str, target: str | None = None) -> list[GateDecision]: ...


PROTOCOLS: dict[str, type] = {
    "decomposer": Decomposer,
    "context_selector": ContextSelector,
    "evidence_finder": EvidenceFinder,
    "verifier": Verifier,
    "aggregator": Aggregator,
    "localizer": Localizer,
    "deduplicator": Deduplicator,
    "sorter": Sorter,
    "gate": Gate,
}
ProtocolName = Literal[
    "decomposer",
    "context_selector",
    "evidence_finder",
    "verifier",
    "aggregator",
    "localizer",
    "deduplicator",
    "sorter",
    "gate",
]
