"""DCR's paragraph level: the whole target as one unit."""

from __future__ import annotations

from typing import Any, ClassVar

from halluscope.options import StageOptions
from halluscope.records import Claim, Span, StepResult
from halluscope.stages import register_stage


@register_stage("paragraph", "decomposer")
class ParagraphDecomposer:
    """The whole target as one claim of kind paragraph (no LLM call): DCR's paragraph level."""

    name: str
    uses_llm: ClassVar[bool] = False

    def __init__(self, model: Any = None, options: StageOptions | None = None):
        pass

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        text = target.strip()
        if not text:
            return StepResult.success([])
        start = len(target) - len(target.lstrip())
        return StepResult.success(
            [Claim(text=text, kind="paragraph", id="s1", target_spans=[Span(start=start, end=start + len(text))])]
        )
