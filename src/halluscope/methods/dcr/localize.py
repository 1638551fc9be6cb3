"""DCR's localizer: one finding per unit judged inconsistent, worded by DCE's reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halluscope.methods.dcr.verifier import DcrVerifier
from halluscope.methods.verdict_first import VerdictFirst
from halluscope.options import StageOptions
from halluscope.records import Finding, Verdict
from halluscope.stages import register_stage
from halluscope.stages.findings import claim_finding, verdict_confidence
from halluscope.stages.verdicts import RunStage

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.stages.protocols import PipelineRun


@register_stage("dcr", "localizer")
class DcrLocalizer(RunStage):
    """One finding per unit judged inconsistent; with DCR's own verifier (DCE, or verdict first) its description
    is the verdict's reason."""

    def __init__(self, model: Any = None, options: StageOptions | None = None, *, verifier: Any = None):
        super().__init__(model, options)
        self.own_reasons = isinstance(verifier, (DcrVerifier, VerdictFirst))  # another's are not about one sentence

    async def __call__(self, run: PipelineRun) -> list[Finding]:
        return [
            dcr_finding(v) if self.own_reasons else claim_finding(v)
            for v in run.verdicts
            if v.label in ("unsupported", "contradicted")
        ]


def dcr_finding(verdict: Verdict) -> Finding:
    """The verdict's reason as the finding's description; a suggested fix is its ``fix``, not repeated there. Its
    span is the verdict's offending characters where it has them (verdict first: the failing fact), else the
    unit's."""
    claim = verdict.claim
    return Finding(
        description=verdict.reason,
        kind="inconsistent",
        target_spans=list(verdict.target_spans or claim.target_spans),
        evidence=list(verdict.evidence),
        claim_ids=[claim.id] if claim.id else [],
        confidence=verdict_confidence(verdict),
        **verdict.finding_fields(),
    )
