"""FActScore's localizer: the descriptions of every unsupported fact, de-duplicated across facts by the chosen
``deduplicator`` stage, one finding per distinct inconsistency (FINAL's Pipeline); or one finding per unsupported
fact (``describe=False``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from halluscope.llm.base import CallBudgetExceeded, LLMError
from halluscope.methods.factscore.options import DEFAULT_DEDUPLICATOR, RETIRED_DEDUP, FactScoreOptions
from halluscope.methods.factscore.verifier import FactScoreVerifier
from halluscope.methods.verdict_first import VerdictFirst
from halluscope.options import StageOptions, options_view
from halluscope.records import Finding, Verdict
from halluscope.stages import Deduplicator, PromptResolver, build_stage, register_stage, same_prompt, stage_spec
from halluscope.stages.findings import claim_finding, group_confidence, verdict_confidence
from halluscope.text.descriptions import merge_spans, spans_for_description

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM
    from halluscope.stages.protocols import PipelineRun


def _deduplicator(options: Any) -> str:
    """The deduplicator the localizer's options name, else FActScore's own."""
    return str(options.deduplicator or DEFAULT_DEDUPLICATOR)


@register_stage("factscore", "localizer")
class FactScoreLocalizer:
    """One finding per distinct inconsistency: the descriptions of every unsupported fact, de-duplicated
    (``describe=True``); else one finding per unsupported fact."""

    name: str  # set by @register_stage
    uses_llm: ClassVar[bool] = True  # the llm deduplicator calls the model
    Options: ClassVar[type[StageOptions]] = options_view(
        "FactScoreLocalizerOptions",
        FactScoreOptions,
        ["describe", "deduplicator", "dedup_threshold"],
        "FActScore's findings: described inconsistencies de-duplicated across facts (by the deduplicator named).",
        retired=RETIRED_DEDUP,
    )

    def __init__(
        self,
        model: LLM | None = None,
        options: StageOptions | None = None,
        *,
        verifier: Any = None,
        prompts: PromptResolver = same_prompt,
        deduplicator: Callable[[], Deduplicator] | None = None,
    ):
        """``deduplicator``: builds the de-duplication stage (the factscore method's chosen one, with its options);
        without it the stage its ``deduplicator`` option names is built here."""
        self.llm = model
        self.options: Any = options or self.Options()
        self.prompts = prompts
        self.own_reasons = isinstance(verifier, (FactScoreVerifier, VerdictFirst))  # one description a line
        self.make_deduplicator = deduplicator

    @classmethod
    def needs_llm(cls, options: Any) -> bool:
        """The model is called only to de-duplicate descriptions, with a deduplicator that calls one."""
        return bool(options.describe) and bool(
            getattr(stage_spec("deduplicator", _deduplicator(options)).factory, "uses_llm", True)
        )

    def deduplicator(self) -> Deduplicator:
        """A fresh ``deduplicator`` stage (its ``note`` is about one call), with this localizer's threshold."""
        if self.make_deduplicator is not None:
            return self.make_deduplicator()
        name = _deduplicator(self.options)
        spec = stage_spec("deduplicator", name)
        fields = spec.options_model.model_fields
        options = {"dedup_threshold": self.options.dedup_threshold} if "dedup_threshold" in fields else {}
        model = self.llm if getattr(spec.factory, "uses_llm", True) else None
        return build_stage("deduplicator", name, model, options, prompts=self.prompts)  # type: ignore[no-any-return]

    async def __call__(self, run: PipelineRun) -> list[Finding]:
        flagged = [v for v in run.verdicts if v.label in ("unsupported", "contradicted")]
        own = self.own_reasons
        if not self.options.describe:
            return [
                _fact_finding(v, f"Not supported by the source: {v.claim.text}") if own else claim_finding(v)
                for v in flagged
            ]
        descriptions: list[str] = []
        origins: list[Verdict] = []
        for v in flagged:
            for d in v.reason.split("\n") if own else [claim_finding(v).description]:
                descriptions.append(d)
                origins.append(v)
        quoted = [spans_for_description(d, run.target) for d in descriptions]
        dedup = self.deduplicator()
        try:
            groups, error = await dedup(descriptions, quoted, run.target)
        except CallBudgetExceeded:
            raise
        except LLMError as exc:  # a deduplicator that lets its call's failure out: every description is kept
            groups = [[i] for i in range(len(descriptions))]
            error = f"de-duplication failed ({exc}); kept every description"
        run.details["descriptions_before_dedup"] = len(descriptions)
        if error:
            run.details["dedup_error"] = error
        note = dedup.note
        if error and not note:
            note = (
                "de-duplication failed, so duplicates may remain among the findings (the verdicts and the score "
                "are unaffected)"
            )
        if note:
            run.details["dedup_note"] = note
        findings: list[Finding] = []
        for group in groups:
            kept = group[0]
            members = [origins[i] for i in group]
            spans = quoted[kept] or merge_spans([s for m in members for s in m.claim.target_spans])
            claim_ids = list(dict.fromkeys(m.claim.id for m in members if m.claim.id))
            findings.append(
                Finding(
                    description=descriptions[kept],
                    kind=origins[kept].label,  # type: ignore[arg-type]
                    target_spans=spans,
                    evidence=[e for m in members for e in m.evidence],
                    claim_ids=claim_ids,
                    confidence=group_confidence(members),
                    **(origins[kept].finding_fields() if len(set(id(m) for m in members)) == 1 else {}),
                )
            )
        return findings


def _fact_finding(verdict: Verdict, description: str) -> Finding:
    return Finding(
        description=description,
        kind=verdict.label,  # type: ignore[arg-type]
        target_spans=list(verdict.target_spans or verdict.claim.target_spans),
        evidence=list(verdict.evidence),
        claim_ids=[verdict.claim.id] if verdict.claim.id else [],
        confidence=verdict_confidence(verdict),
        **verdict.finding_fields(),
    )
