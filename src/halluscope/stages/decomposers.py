"""The ``sentences`` decomposer: every target sentence is a claim, with its exact span (no LLM call)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from halluscope.options import StageOptions
from halluscope.records import Claim, ClaimKind, StepResult
from halluscope.stages import register_stage
from halluscope.text import split_sentences


@register_stage("sentences", "decomposer")
class SentenceDecomposer:
    """Every target sentence is a claim (no LLM call); spans are exact."""

    name: str  # set by @register_stage
    uses_llm: ClassVar[bool] = False

    class Options(StageOptions):
        claim_kind: ClaimKind = "sentence"
        """The kind given to each claim (dove uses event: every sentence is an event fact)."""

    def __init__(self, model: Any = None, options: SentenceDecomposer.Options | None = None):
        self.kind = (options or self.Options()).claim_kind

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        sentences = await asyncio.to_thread(split_sentences, target)  # CPU work: off the event loop
        claims = [Claim(text=s.text, kind=self.kind, id=f"s{s.index + 1}", target_spans=[s.span]) for s in sentences]
        return StepResult.success(claims)
