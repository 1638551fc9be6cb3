"""DoveScore's aggregator (Eq. 5 from the verified facts and the verified events' order) and its localizer (the
unsupported facts, then the events out of order). The event order itself is the method's composition of its
sorters, given to the aggregator as its ``event_order`` collaborator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluscope.methods.dove.order import dove_score, partial_subscores
from halluscope.options import StageOptions
from halluscope.records import Claim, Finding
from halluscope.stages import Aggregate, register_stage
from halluscope.stages.verdicts import ClaimFindings, RunStage

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.stages.protocols import PipelineRun


@dataclass
class OrderOutcome:
    """The verified events' order as judged: ShuffleD (None when not judged), the findings about events out of
    order, or why the order could not be judged."""

    shuffle_degree: float | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None


EventOrderStep = Callable[[list[Claim], "PipelineRun"], Awaitable[OrderOutcome]]


@dataclass
class DoveOrderFindings:
    """One check's findings about events out of order (a record of the check's trace)."""

    findings: list[Finding] = field(default_factory=list)


@register_stage("dove", "aggregator")
class DoveAggregator(RunStage):
    """DoveScore (Eq. 5): alpha * S_E * S_EO + (1 - alpha) * S_D, the event order judged by dove's sorters.

    It needs the dove method's event-order step (``event_order``), so it is used within dove."""

    def __init__(
        self, model: Any = None, options: StageOptions | None = None, *, event_order: EventOrderStep | None = None
    ):
        if event_order is None:
            raise TypeError(
                "the dove aggregator needs the dove method's event-order step (event_order=...); it is used within dove"
            )
        super().__init__(model, options)
        self.event_order = event_order

    async def __call__(self, run: PipelineRun) -> Aggregate:
        """DoveScore from the verified facts and the verified events' order; the order's findings are recorded in
        the check's trace (:class:`DoveOrderFindings`) for the localizer."""
        details = run.details
        label = {v.claim.id: v.label for v in run.verdicts}
        events = [c for c in run.claims if c.kind != "descriptive"]
        descriptive = [c for c in run.claims if c.kind == "descriptive"]
        details["decomposition"] = {
            "event_facts": [c.text for c in events],
            "descriptive_facts": [c.text for c in descriptive],
        }
        unscored = [v for v in run.verdicts if v.label == "unscored"]
        details["unscored_facts"] = [{"id": v.claim.id, "reason": v.reason} for v in unscored]
        scored_events = [c for c in events if label[c.id] != "unscored"]
        scored_descriptive = [c for c in descriptive if label[c.id] != "unscored"]
        verified_events = [c for c in scored_events if label[c.id] == "supported"]
        n_desc_correct = sum(label[c.id] == "supported" for c in scored_descriptive)
        if not scored_events and not scored_descriptive:
            return Aggregate(None, {}, f"none of the {len(run.claims)} facts could be checked ({unscored[0].reason})")
        counts = (len(scored_events), len(verified_events), len(scored_descriptive), n_desc_correct)
        shuffle: float | None = None
        if scored_events:
            order = await self.event_order(verified_events, run)
            if order.error is not None:
                return Aggregate(None, partial_subscores(*counts), order.error)
            shuffle = order.shuffle_degree
            run.trace.record(DoveOrderFindings).findings.extend(order.findings)
        scores = dove_score(*counts, shuffle)
        return Aggregate(scores.score, scores.subscores())


@register_stage("dove", "localizer")
class DoveLocalizer(RunStage):
    """Unsupported facts, then the events out of order (when the dove aggregator scored the order)."""

    async def __call__(self, run: PipelineRun) -> list[Finding]:
        order = run.trace.get(DoveOrderFindings)
        return await ClaimFindings()(run) + (order.findings if order is not None else [])
