"""``DCR``: its options and the method (its aggregator, Eq. 3 over AMC's marks, is in :mod:`.scoring`; its
localizer, findings from DCE's reasons, in :mod:`.localize`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from halluscope.methods import register_method
from halluscope.methods.dcr.amc import AmcMode
from halluscope.methods.dcr.details import DcrDetails
from halluscope.methods.dcr.prompts import (
    AMC_PROMPT,
    DCE_EXCERPT_BATCH_PROMPT,
    DCE_EXCERPT_PROMPT,
    DCE_PARAGRAPH_PROMPT,
    DCE_SENTENCE_PROMPT,
    DCR_PROMPTS,
)
from halluscope.methods.dcr.scoring import LABEL_MARKS, AmcWeights
from halluscope.methods.dcr.verifier import DceNotes, DcrVerifier
from halluscope.methods.details import MethodDetails
from halluscope.methods.pipeline import ClaimPipeline, support_p
from halluscope.options import MAX_BATCH_SIZE, ClaimOptions, StageAlias
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Verdict
from halluscope.stages import Aggregate, Context, Selection
from halluscope.stages.protocols import PipelineRun

Level = Literal["sentence", "paragraph"]


class DcrOptions(ClaimOptions):
    """DCR's own settings on top of the shared retrieval protocol and swappable verifier. The paper's
    ``level=sentence`` (each target sentence judged with its own reason, DCE) and ``level=paragraph`` (the whole
    target at once; needs the whole source) are the decomposer stages ``sentences`` and ``paragraph``: ``level`` is
    translated into ``decomposer`` when the options are parsed."""

    stage_aliases = {"level": StageAlias("decomposer", {"sentence": "sentences", "paragraph": "paragraph"})}

    amc: AmcMode = "llm"
    """How reasons become +1/-1: llm (a call that reads only the reasons, the paper's AMC) or rule (the verdict words
    each reason states; no extra call)."""

    amc_weights: AmcWeights = "paper"
    """alpha and beta of Eq. 3. paper: alpha = beta = 0, Z over every marked reason (the paper's experiments); a
    sentence without a mark makes the Report unscored. auto: App. I, reasons not about exactly one sentence are taken
    out and unmarked sentences are left out (Z over the judged sentences)."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """With retrieval: sentences whose snippet is the same text share a DCE call, and AMC marks this many reasons per
    call (1 = one DCE and one AMC call per sentence and snippet). With the whole source DCE and AMC already take every
    sentence in one call each (the paper)."""


@register_method
class DCR(ClaimPipeline):
    Details: ClassVar[type[MethodDetails]] = DcrDetails
    name = "dcr"
    description = (
        "Divide-Conquer-Reasoning: judge each target sentence against the source with a reason (DCE), "
        "map reasons to +1/-1 (AMC), score (Z+1)/2. RAI rewriting is the `improve` method."
    )
    Options: ClassVar[type[DcrOptions]] = DcrOptions
    opts: DcrOptions
    prompts = DCR_PROMPTS
    default_threshold = 1.0
    default_verifier = "dcr"
    default_aggregator = "dcr"
    default_localizer = "dcr"
    default_decomposer = "sentences"

    @property
    def paragraph_level(self) -> bool:
        """Whether the whole target is judged at once (``decomposer=paragraph``, the paper's ``level=paragraph``)."""
        return self.chosen["decomposer"][0] == "paragraph"

    def used_prompts(self) -> list[PromptTemplate]:
        if not isinstance(self.verifier, DcrVerifier):
            return self.verifier_prompts()
        if self.paragraph_level:
            dce = [DCE_PARAGRAPH_PROMPT]
        else:
            dce = {"always": [DCE_EXCERPT_PROMPT], "never": [DCE_SENTENCE_PROMPT]}.get(
                self.opts.retrieval, [DCE_SENTENCE_PROMPT, DCE_EXCERPT_PROMPT]
            )
        if self.opts.batch_size > 1 and DCE_EXCERPT_PROMPT in dce:
            dce.append(DCE_EXCERPT_BATCH_PROMPT)
        amc = [AMC_PROMPT] if self.opts.amc == "llm" else []
        return [self.prompt(t) for t in dce + amc]

    def probability_aggregate(self, run: PipelineRun, aggregate: Aggregate) -> Aggregate | str:
        """Eq. 3 with ``z_i = 2 P(supported) - 1`` for each judged sentence in place of its +1/-1 mark (DCE's
        other reasons keep their marks under ``amc_weights=paper``; ``auto`` takes them out as App. I does)."""
        if self.aggregator.name != "dcr":
            return super().probability_aggregate(run, aggregate)
        judged = [v for v in run.verdicts if v.label in LABEL_MARKS]
        notes = run.trace.get(DceNotes) or DceNotes()
        zs = [2.0 * support_p(v) - 1.0 for v in judged]
        if self.opts.amc_weights == "paper":
            zs += [float(o.mark) for o in notes.other_reasons]
        if not zs:
            return "no judged sentence"
        z = sum(zs) / len(zs)
        return Aggregate((z + 1.0) / 2.0, {**aggregate.subscores, "Z_probability": z, "label_score": aggregate.score})

    async def verify(
        self, claims: list[Claim], selection: Selection, source: str
    ) -> tuple[list[Verdict], dict[str, Any]]:
        if self.paragraph_level and selection.mode == "retrieval":
            why = (
                f"paragraph-level DCR needs the whole source in one prompt, but {selection.why}; use "
                "decomposer=sentences (level=sentence), which works on long sources through retrieval"
            )
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
