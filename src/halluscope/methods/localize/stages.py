"""The localizer's steps: one call listing the target's inconsistencies as descriptions, the 2-step filter's
yes/no call, and how descriptions become the score and findings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from halluscope.llm.label_probs import VERDICT_TOP_LOGPROBS, YES_NO, label_after
from halluscope.llm.structured import generate_parsed, generate_reply
from halluscope.methods.localize.prompts import BINARY_PROMPT, LOCALIZE_PROMPTS, Style, _cot_instructions
from halluscope.methods.localize.replies import (
    parse_binary_verdict,
    parse_final_output,
    parse_localization,
    reply_schema,
)
from halluscope.prompts import PromptTemplate
from halluscope.records import Finding, StepResult
from halluscope.text.descriptions import spans_for_description

FINAL_ANSWER_MARKER = r"final\s+answer\s*:"
"""Where the filter's answer is: the yes or no after the reply's last "Final answer:"."""


class DescriptionLocalizer:
    """One call that lists the target's inconsistencies as descriptions (``[]`` = none found). ``prompts``
    applies the user's prompt overrides to the built-in template of (style, hint, variant)."""

    def __init__(
        self, llm: Any, style: Style, hint: bool, variant: int, prompts: Callable[[PromptTemplate], PromptTemplate]
    ):
        self.llm = llm
        self.style = style
        self.hint = hint
        self.variant = variant
        self.prompt = prompts(LOCALIZE_PROMPTS[(self.style, self.hint, self.variant)])

    async def __call__(self, source: str, target: str) -> StepResult[list[str]]:
        messages = self.prompt.render(source=source, target=target)
        if self.style == "cot":
            hint = _cot_instructions(self.hint, self.variant).replace("$$", "$")
            return await generate_parsed(
                self.llm, messages, lambda text: parse_final_output(text, self.hint, target), format_hint=hint
            )
        # the schema goes to the backend (JSON mode); the parse adds the check against copied examples
        return await generate_reply(
            self.llm,
            messages,
            reply_schema(self.hint),  # type: ignore[return-value]
            parse=lambda text: parse_localization(text, self.hint, target),  # type: ignore[arg-type, return-value]
        )


class BinaryFilter:
    """Step 1 of the 2-step variant with the same model: is the target consistent (True) or not?"""

    def __init__(self, llm: Any, prompts: Callable[[PromptTemplate], PromptTemplate]):
        self.llm = llm
        self.prompt = prompts(BINARY_PROMPT)

    async def __call__(self, source: str, target: str) -> StepResult[bool]:
        return await generate_parsed(
            self.llm,
            self.prompt.render(source=source, target=target),
            parse_binary_verdict,
            params=self.llm.params(top_logprobs=VERDICT_TOP_LOGPROBS),
            format_hint='your reasoning, then a last line that is exactly "Final answer: yes" or "Final answer: no"',
        )


def consistent_probability(step: StepResult[bool]) -> float | None:
    """P(consistent) of a parsed filter reply: P(yes) over yes + no at its final answer (the yes or no after the
    reply's last "Final answer:"), or None when the backend gave no candidates there, its log-probabilities are
    refused, or they contradict the answer (:mod:`halluscope.llm.label_probs`)."""
    found = label_after(step.logprobs, *YES_NO, marker=FINAL_ANSWER_MARKER)
    if found is None or found.stated is not step.value:
        return None
    return found.probability


def description_score(n: int) -> float:
    """1 when nothing was found, then 1/2, 1/3, ...: see the module docstring for why."""
    return 1.0 / (1 + n)


def findings_from_descriptions(descriptions: list[str], target: str) -> list[Finding]:
    return [
        Finding(description=d, kind="inconsistent", target_spans=spans_for_description(d, target)) for d in descriptions
    ]
