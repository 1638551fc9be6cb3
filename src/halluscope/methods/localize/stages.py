"""The localizer's steps: one call listing the target's inconsistencies as descriptions, the 2-step filter's
yes/no call, and how descriptions become the score and findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluscope.llm.structured import generate_parsed, generate_reply
from halluscope.methods.localize.prompts import BINARY_PROMPT, LOCALIZE_PROMPTS, _cot_instructions
from halluscope.methods.localize.replies import parse_binary_verdict, parse_final_output, parse_localization, reply_schema
from halluscope.records import Finding, StepResult
from halluscope.text.descriptions import spans_for_description

if TYPE_CHECKING:
    from halluscope.methods.localize.method import Localize

class DescriptionLocalizer:
    """One call that lists the target's inconsistencies as descriptions (``[]`` = none found)."""

    def __init__(self, method: Localize):
        self.llm = method.llm
        self.style = method.opts.style
        self.hint = method.opts.hint
        self.variant = method.variant
        self.prompt = method.prompt(LOCALIZE_PROMPTS[(self.style, self.hint, self.variant)])

    async def __call__(self, source: str, target: str) -> StepResult[list[str]]:
        messages = self.prompt.render(source=source, target=target)
        if self.style == "cot":
            hint = _cot_instructions(self.hint, self.variant).replace("$$", "$")
            return await generate_parsed(self.llm, messages, lambda text: parse_final_output(text, self.hint, target),
                                         format_hint=hint)
        # the schema goes to the backend (JSON mode); the parse adds the check against copied examples
        return await generate_reply(self.llm, messages, reply_schema(self.hint),  # type: ignore[return-value]
                                    parse=lambda text: parse_localization(text, self.hint, target))  # type: ignore[arg-type, return-value]


class BinaryFilter:
    """Step 1 of the 2-step variant with the same model: is the target consistent (True) or not?"""

    def __init__(self, method: Localize):
        self.llm = method.llm
        self.prompt = method.prompt(BINARY_PROMPT)

    async def __call__(self, source: str, target: str) -> StepResult[bool]:
        return await generate_parsed(self.llm, self.prompt.render(source=source, target=target), parse_binary_verdict,
                                     format_hint='your reasoning, then a last line that is exactly "Final answer: '
                                                 'yes" or "Final answer: no"')


def description_score(n: int) -> float:
    """1 when nothing was found, then 1/2, 1/3, ...: see the module docstring for why."""
    return 1.0 / (1 + n)


def findings_from_descriptions(descriptions: list[str], target: str) -> list[Finding]:
    return [Finding(description=d, kind="inconsistent", target_spans=spans_for_description(d, target))
            for d in descriptions]
