"""The claim pipeline's default aggregator and localizer: verdicts -> the fraction of judged claims supported,
and one finding per unsupported or contradicted claim. A method that scores or locates otherwise registers its
own (DCR's Eq. 3, DoveScore's Eq. 5, PROBE's step 4, FActScore's de-duplicated descriptions); any of them can be
chosen on any claim method with ``-o aggregator=NAME`` / ``-o localizer=NAME``."""

from __future__ import annotations

from typing import Any, ClassVar

from halluscope.options import StageOptions
from halluscope.records import Finding
from halluscope.stages import Aggregate, PipelineRun, register_stage
from halluscope.stages.findings import claim_finding

FLAGGED = ("unsupported", "contradicted")


class RunStage:
    """Base of the aggregators and localizers that call no LLM: built from ``(model=None, options)``, their
    ``Options`` (none by default) kept as ``self.options``."""

    name: str  # set by @register_stage
    uses_llm: ClassVar[bool] = False
    Options: ClassVar[type[StageOptions]] = StageOptions

    def __init__(self, model: Any = None, options: StageOptions | None = None):
        self.options = options or self.Options()


@register_stage("supported_fraction", "aggregator")
class SupportedFraction(RunStage):
    """The fraction of judged claims that are supported (unscored claims are left out and counted)."""

    async def __call__(self, run: PipelineRun) -> Aggregate:
        judged = [v for v in run.verdicts if v.label != "unscored"]
        supported = float(sum(v.label == "supported" for v in judged))
        sub: dict[str, float | None] = {
            "claims": float(len(run.verdicts)),
            "judged": float(len(judged)),
            "supported": supported,
        }
        if not judged:
            why = next((v.reason for v in run.verdicts), "no claims")
            return Aggregate(None, sub, f"none of the {len(run.verdicts)} claims could be judged ({why})")
        return Aggregate(supported / len(judged), sub)


@register_stage("claims", "localizer")
class ClaimFindings(RunStage):
    """One finding per unsupported or contradicted claim, at its target spans."""

    async def __call__(self, run: PipelineRun) -> list[Finding]:
        return [claim_finding(v) for v in run.verdicts if v.label in FLAGGED]
