"""``DCR``: its options and the method (aggregation by AMC's marks, findings from DCE's reasons)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from halluscope.methods import register_method
from halluscope.methods.details import MethodDetails
from halluscope.methods.dcr.amc import AmcMode
from halluscope.methods.dcr.details import DcrDetails
from halluscope.methods.dcr.prompts import (AMC_PROMPT, DCE_EXCERPT_BATCH_PROMPT, DCE_EXCERPT_PROMPT,
                                           DCE_PARAGRAPH_PROMPT, DCE_SENTENCE_PROMPT, DCR_PROMPTS)
from halluscope.methods.dcr.scoring import LABEL_MARKS, _paper_aggregate, _why_none, amc_score
from halluscope.methods.dcr.verifier import DceNotes, DcrVerifier
from halluscope.methods.options import MAX_BATCH_SIZE, ClaimOptions
from halluscope.methods.pipeline import ClaimPipeline, PipelineRun, claim_finding
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Finding, Verdict
from halluscope.stages import Aggregate, Context, Decomposer, Selection


Level = Literal["sentence", "paragraph"]
AmcWeights = Literal["paper", "auto"]


class DcrOptions(ClaimOptions):
    """DCR's own settings on top of the shared retrieval protocol and swappable verifier."""

    level: Level = "sentence"
    """sentence: each target sentence judged with its own reason (the paper's DCE); paragraph: the whole target at once (needs the whole source)."""

    amc: AmcMode = "llm"
    """How reasons become +1/-1: llm (a call that reads only the reasons, the paper's AMC) or rule (the verdict words each reason states; no extra call)."""

    amc_weights: AmcWeights = "paper"
    """alpha and beta of Eq. 3. paper: alpha = beta = 0, Z over every marked reason (the paper's experiments); a sentence without a mark makes the Report unscored. auto: App. I, reasons not about exactly one sentence are taken out and unmarked sentences are left out (Z over the judged sentences)."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """With retrieval: sentences whose snippet is the same text share a DCE call, and AMC marks this many reasons per call (1 = one DCE and one AMC call per sentence and snippet). With the whole source DCE and AMC already take every sentence in one call each (the paper)."""



@register_method
class DCR(ClaimPipeline):
    name = "dcr"
    description = ("Divide-Conquer-Reasoning: judge each target sentence against the source with a reason (DCE), "
                   "map reasons to +1/-1 (AMC), score (Z+1)/2. RAI rewriting is the `improve` method.")
    Options: ClassVar[type[DcrOptions]] = DcrOptions
    Details: ClassVar[type[MethodDetails]] = DcrDetails
    opts: DcrOptions
    prompts = DCR_PROMPTS
    default_threshold = 1.0
    default_verifier = "dcr"

    def make_decomposer(self) -> Decomposer:
        decomposer: Decomposer = self.build_stage("decomposer",
                                                  "paragraph" if self.opts.level == "paragraph" else "sentences")
        return decomposer

    def used_prompts(self) -> list[PromptTemplate]:
        if not isinstance(self.verifier, DcrVerifier):
            extra = getattr(self.verifier, "used_prompts", None)
            return list(extra()) if callable(extra) else []
        if self.opts.level == "paragraph":
            dce = [DCE_PARAGRAPH_PROMPT]
        else:
            dce = {"always": [DCE_EXCERPT_PROMPT], "never": [DCE_SENTENCE_PROMPT]}.get(
                self.opts.retrieval, [DCE_SENTENCE_PROMPT, DCE_EXCERPT_PROMPT])
        if self.opts.batch_size > 1 and DCE_EXCERPT_PROMPT in dce:
            dce.append(DCE_EXCERPT_BATCH_PROMPT)
        amc = [AMC_PROMPT] if self.opts.amc == "llm" else []
        return [self.prompt(t) for t in dce + amc]

    async def verify(self, claims: list[Claim], selection: Selection, source: str) -> tuple[list[Verdict], dict[str, Any]]:
        if self.opts.level == "paragraph" and selection.mode == "retrieval":
            why = (f"paragraph-level DCR needs the whole source in one prompt, but {selection.why}; use "
                   "level=sentence, which works on long sources through retrieval")
            return [Verdict.unscored(c, why) for c in claims], {}
        return await super().verify(claims, selection, source)

    async def judge_round(self, pairs: Sequence[tuple[Claim, Context]], source: str) -> list[Verdict]:
        """With ``batch_size`` > 1 and DCR's own verifier, a retrieval round shares calls: sentences whose snippet
        is the *same text* are judged together in DCE calls of up to ``batch_size`` sentences, and AMC marks up to
        ``batch_size`` reasons per call. Per sentence and snippet the judgment is the one
        :meth:`DcrVerifier.judge_excerpt` would make; only the number of calls changes."""
        verifier = self.verifier
        if self.opts.batch_size > 1 and isinstance(verifier, DcrVerifier):
            return await verifier.judge_excerpts(pairs, self.opts.batch_size)
        return await super().judge_round(pairs, source)

    async def aggregate(self, run: PipelineRun) -> Aggregate:
        """Eq. 3 with ``amc_weights``: ``paper`` (alpha = beta = 0 over every marked reason; any sentence or reason
        without a mark leaves the Report unscored) or ``auto`` (App. I: only the judged sentences' kept reasons
        count, the other reasons are taken out by alpha and beta)."""
        notes = run.trace.get(DceNotes) or DceNotes()
        judged = [v for v in run.verdicts if v.label in LABEL_MARKS]
        others = notes.other_reasons
        run.details.update(DcrDetails.build(other_reasons=[o.record() for o in others],
                                            amc_weights=self.opts.amc_weights))
        if notes.is_consistent is not None:
            run.details.update(DcrDetails.build(dce_is_consistent=notes.is_consistent))
        subscores: dict[str, float | None] = {"units": float(len(run.verdicts)), "judged": float(len(judged))}
        if self.opts.amc_weights == "paper":
            return _paper_aggregate(run.verdicts, judged, others, notes.unmarked_reasons, subscores)
        marks = [LABEL_MARKS[v.label] for v in judged] + [o.mark for o in others]
        amc = amc_score(marks, [True] * len(judged) + [False] * len(others)) if marks else None
        if amc is not None:
            subscores.update({"Z": amc.z, "alpha": amc.alpha, "beta": amc.beta, "k": float(amc.k)})
        if amc is None or amc.score is None:
            return Aggregate(None, subscores, f"no sentence received a usable judgment ({_why_none(run.verdicts, others)})")
        return Aggregate(amc.score, subscores)

    async def localize(self, run: PipelineRun) -> list[Finding]:
        """One finding per unit judged inconsistent; with DCR's own verifier its description is DCE's reason."""
        own = isinstance(self.verifier, DcrVerifier)
        return [dcr_finding(v) if own else claim_finding(v)
                for v in run.verdicts if v.label in ("unsupported", "contradicted")]



def dcr_finding(verdict: Verdict) -> Finding:
    claim = verdict.claim
    return Finding(description=verdict.reason, kind="inconsistent", target_spans=list(claim.target_spans),
                   evidence=list(verdict.evidence), claim_ids=[claim.id] if claim.id else [])
