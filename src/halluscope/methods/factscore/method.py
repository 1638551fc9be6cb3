"""The ``factscore`` method: the claim pipeline with FActScore's decomposer and verifier, the fraction of judged
facts supported as its score, and the descriptions of unsupported facts de-duplicated into Findings (its localizer,
:mod:`.localize`, with a ``deduplicator`` stage from :mod:`.dedup`)."""

from __future__ import annotations

from typing import ClassVar, cast

from pydantic import Field

from halluscope.methods import register_method
from halluscope.methods.factscore.decompose import FactScoreDecomposer
from halluscope.methods.factscore.dedup import DedupMode
from halluscope.methods.factscore.prompts import (FACTSCORE_DECOMPOSE_PROMPT, FACTSCORE_DEDUP_PROMPT,
                                                  FACTSCORE_DESCRIBE_BATCH_PROMPT, FACTSCORE_DESCRIBE_PROMPT,
                                                  FACTSCORE_VERIFY_BATCH_PROMPT, FACTSCORE_VERIFY_PROMPT)
from halluscope.methods.details import MethodDetails
from halluscope.methods.factscore.details import FactScoreDetails
from halluscope.methods.options import MAX_BATCH_SIZE, ClaimOptions
from halluscope.methods.pipeline import ClaimPipeline
from halluscope.prompts import PromptTemplate


class FactScoreOptions(ClaimOptions):
    describe: bool = True
    """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

    dedup: DedupMode = "llm"
    """How descriptions repeated across facts are merged: llm (the paper's: the model keeps one of each group of
    duplicates, by number), fuzzy (no LLM call; near-identical wordings only), or none."""

    dedup_threshold: float = Field(default=85.0, ge=0, le=100)
    """Fuzzy de-duplication (dedup=fuzzy, and the fallback of dedup=llm): word-order-insensitive similarity (0-100) at
    which two descriptions merge."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one call
    per fact; with retrieval every fact has its own snippets and its own calls)."""


@register_method
class FactScore(ClaimPipeline):
    Details: ClassVar[type[MethodDetails]] = FactScoreDetails
    name = "factscore"
    description = ("Atomic facts + per-fact verification -> fraction supported; describe=True lists each "
                   "fact's inconsistencies, de-duplicated across facts (fuzzy or LLM).")
    Options = FactScoreOptions
    opts: FactScoreOptions
    prompts = (FACTSCORE_DECOMPOSE_PROMPT, FACTSCORE_VERIFY_PROMPT, FACTSCORE_DESCRIBE_PROMPT,
               FACTSCORE_VERIFY_BATCH_PROMPT, FACTSCORE_DESCRIBE_BATCH_PROMPT, FACTSCORE_DEDUP_PROMPT)
    default_threshold = 1.0
    default_verifier = "factscore"
    default_localizer = "factscore"

    def make_decomposer(self) -> FactScoreDecomposer:
        return cast(FactScoreDecomposer, self.build_stage("decomposer", "factscore"))

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(FACTSCORE_DECOMPOSE_PROMPT)]
        used += self.verifier_prompts()
        if self.opts.describe and self.opts.dedup == "llm":
            used.append(self.prompt(FACTSCORE_DEDUP_PROMPT))
        return used + self.verdict_first_prompts()
