"""The ``factscore`` method: the claim pipeline with FActScore's decomposer and verifier, the fraction of judged
facts supported as its score, and the descriptions of unsupported facts de-duplicated into Findings."""

from __future__ import annotations

from typing import ClassVar, cast

from pydantic import Field

from halluscope.methods import register_method
from halluscope.methods.details import MethodDetails
from halluscope.methods.factscore.decompose import FactScoreDecomposer
from halluscope.methods.factscore.dedup import DedupMode, DescriptionDeduplicator
from halluscope.methods.factscore.details import FactScoreDetails
from halluscope.methods.factscore.prompts import (FACTSCORE_DECOMPOSE_PROMPT, FACTSCORE_DEDUP_PROMPT,
                                                  FACTSCORE_DESCRIBE_BATCH_PROMPT, FACTSCORE_DESCRIBE_PROMPT,
                                                  FACTSCORE_VERIFY_BATCH_PROMPT, FACTSCORE_VERIFY_PROMPT)
from halluscope.methods.factscore.verifier import FactScoreVerifier
from halluscope.methods.options import MAX_BATCH_SIZE, ClaimOptions
from halluscope.methods.pipeline import ClaimPipeline, PipelineRun, claim_finding
from halluscope.prompts import PromptTemplate
from halluscope.records import Finding, Verdict
from halluscope.text.descriptions import merge_spans, spans_for_description


class FactScoreOptions(ClaimOptions):
    describe: bool = True
    """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

    dedup: DedupMode = "llm"
    """How descriptions repeated across facts are merged: llm (the paper's: the model keeps one of each group of duplicates, by number), fuzzy (no LLM call; near-identical wordings only), or none."""

    dedup_threshold: float = Field(default=85.0, ge=0, le=100)
    """Fuzzy de-duplication (dedup=fuzzy, and the fallback of dedup=llm): word-order-insensitive similarity (0-100) at which two descriptions merge."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one call per fact; with retrieval every fact has its own snippets and its own calls)."""


@register_method
class FactScore(ClaimPipeline):
    name = "factscore"
    description = ("Atomic facts + per-fact verification -> fraction supported; describe=True lists each "
                   "fact's inconsistencies, de-duplicated across facts (fuzzy or LLM).")
    Options = FactScoreOptions
    Details: ClassVar[type[MethodDetails]] = FactScoreDetails
    opts: FactScoreOptions
    prompts = (FACTSCORE_DECOMPOSE_PROMPT, FACTSCORE_VERIFY_PROMPT, FACTSCORE_DESCRIBE_PROMPT,
               FACTSCORE_VERIFY_BATCH_PROMPT, FACTSCORE_DESCRIBE_BATCH_PROMPT, FACTSCORE_DEDUP_PROMPT)
    default_threshold = 1.0
    default_verifier = "factscore"

    def make_decomposer(self) -> FactScoreDecomposer:
        return cast(FactScoreDecomposer, self.build_stage("decomposer", "factscore"))

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(FACTSCORE_DECOMPOSE_PROMPT)]
        verifier_prompts = getattr(self.verifier, "used_prompts", None)
        if callable(verifier_prompts):
            used += list(verifier_prompts())
        if self.opts.describe and self.opts.dedup == "llm":
            used.append(self.prompt(FACTSCORE_DEDUP_PROMPT))
        return used

    async def localize(self, run: PipelineRun) -> list[Finding]:
        """One finding per distinct inconsistency: the descriptions of every unsupported fact, de-duplicated
        (``describe=True``); else one finding per unsupported fact."""
        flagged = [v for v in run.verdicts if v.label in ("unsupported", "contradicted")]
        own = isinstance(self.verifier, FactScoreVerifier)
        if not self.opts.describe:
            return [_fact_finding(v, f"Not supported by the source: {v.claim.text}") if own else claim_finding(v)
                    for v in flagged]
        descriptions: list[str] = []
        origins: list[Verdict] = []
        for v in flagged:
            for d in (v.reason.split("\n") if own else [claim_finding(v).description]):
                descriptions.append(d)
                origins.append(v)
        quoted = [spans_for_description(d, run.target) for d in descriptions]
        dedup = DescriptionDeduplicator(self, self.opts.dedup, self.opts.dedup_threshold)
        groups, error = await dedup(descriptions, quoted, run.target)
        run.details.update(FactScoreDetails.build(descriptions_before_dedup=len(descriptions)))
        if error:
            run.details.update(FactScoreDetails.build(dedup_error=error))
        if dedup.note:
            run.details.update(FactScoreDetails.build(dedup_note=dedup.note))
        findings: list[Finding] = []
        for group in groups:
            kept = group[0]
            members = [origins[i] for i in group]
            spans = quoted[kept] or merge_spans([s for m in members for s in m.claim.target_spans])
            claim_ids = list(dict.fromkeys(m.claim.id for m in members if m.claim.id))
            findings.append(Finding(description=descriptions[kept], kind=origins[kept].label,  # type: ignore[arg-type]
                                    target_spans=spans, evidence=[e for m in members for e in m.evidence],
                                    claim_ids=claim_ids))
        return findings


def _fact_finding(verdict: Verdict, description: str) -> Finding:
    return Finding(description=description, kind=verdict.label,  # type: ignore[arg-type]
                   target_spans=list(verdict.claim.target_spans), evidence=list(verdict.evidence),
                   claim_ids=[verdict.claim.id] if verdict.claim.id else [])
