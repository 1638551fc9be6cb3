"""DCR's localizer: one finding per unit judged inconsistent, worded by DCE's reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halluscope.methods.dcr.verifier import DcrVerifier
from halluscope.methods.options import StageOptions
from halluscope.records import Finding, Verdict
from halluscope.stages import register_stage
from halluscope.stages.findings import claim_finding, verdict_confidence
from halluscope.stages.verdicts import RunStage

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.stages.protocols import PipelineRun


@register_stage("dcr", "localizer")
class DcrLocalizer(RunStage):
    """One finding per unit judged inconsistent; with DCR's own verifier its description is DCE's reason."""

    def __init__(self, model: Any = None, options: StageOptions | None = None, *, verifier: Any = None):
        super().__init__(model, options)
        self.own_reasons = isinstance(verifier, DcrVerifier)  # another verifier's reasons are not DCE's

    async def __call__(self, run: PipelineRun) -> list[Finding]:
        return [
            dcr_finding(v) if self.own_reasons else claim_finding(v)
            for v in run.verdicts
            if v.label in ("unsupported", "contradicted")
        ]


def dcr_finding(verdict: Verdict) -> Finding:
    claim = verdict.claim
    description = verdict.reason + (f" Suggested fix: {verdict.fix}" if verdict.fix else "")
    return Finding(
        description=description,
        kind="inconsistent",
        target_spans=list(claim.target_spans),
        evidence=list(verdict.evidence),
        claim_ids=[claim.id] if claim.id else [],
        confidence=verdict_confidence(verdict),
        fix=verdict.fix,
    )
