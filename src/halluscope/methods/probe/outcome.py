"""PROBE's aggregator (the fraction of judged claims supported, with the counts of unscored and hallucinated
claims) and its localizer (step 4: every unsupported claim's target span is a finding)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.records import Finding, Verdict
from halluscope.stages import Aggregate, register_stage
from halluscope.stages.findings import claim_finding
from halluscope.stages.verdicts import RunStage, SupportedFraction

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.stages.protocols import PipelineRun


@register_stage("probe", "aggregator")
class ProbeAggregator(RunStage):
    """The fraction of judged claims supported, with the counts of unscored and of hallucinated claims."""

    async def __call__(self, run: PipelineRun) -> Aggregate:
        base = await SupportedFraction()(run)
        flagged = sum(v.label in ("unsupported", "contradicted") for v in run.verdicts)
        subscores = {
            **base.subscores,
            "unscored_claims": float(sum(v.label == "unscored" for v in run.verdicts)),
            "hallucinated_claims": float(flagged),
        }
        return Aggregate(base.score, subscores, base.unscored_reason)


@register_stage("probe", "localizer")
class ProbeLocalizer(RunStage):
    """Step 4: every unsupported claim's target span is a finding (a contradicted one gets the plain claim
    finding)."""

    async def __call__(self, run: PipelineRun) -> list[Finding]:
        return [
            probe_finding(v) if v.label == "unsupported" else claim_finding(v)
            for v in run.verdicts
            if v.label in ("unsupported", "contradicted")
        ]


def probe_finding(verdict: Verdict) -> Finding:
    claim = verdict.claim
    return Finding(
        description=f'The text claims that "{claim.text}", but the source does not support this ({verdict.reason}).',
        kind="unsupported",
        target_spans=list(claim.target_spans),
        evidence=list(verdict.evidence),
        claim_ids=[claim.id] if claim.id else [],
        confidence=_confidence(verdict),
        **verdict.finding_fields(),
    )


def _confidence(verdict: Verdict) -> float | None:
    """1 - P(supported) where the judges' token probabilities gave one, else 1 - the best passage's share of PASS
    votes (0 when none was found)."""
    if verdict.support_probability is not None:
        return round(1.0 - verdict.support_probability, 6)
    return None if verdict.score is None else min(1.0, max(0.0, 1.0 - verdict.score))
