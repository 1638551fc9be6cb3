"""AMC (DCR paper §3.2): DCE's reasons -> +1/-1 marks, by one LLM call or by the verdict words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

from halluscope.llm.label_probs import MARKS, VERDICT_TOP_LOGPROBS, label_probabilities
from halluscope.llm.structured import generate_reply
from halluscope.methods.dcr.prompts import AMC_PROMPT
from halluscope.methods.dcr.replies import AmcReply, parse_amc
from halluscope.prompts import PromptTemplate
from halluscope.records import LLMCall
from halluscope.text import ParseError
from halluscope.text.verdict_words import verdict_mark

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM


AmcMode = Literal["llm", "rule"]


@dataclass
class AmcMarks:
    """AMC's output: per reason a mark (+1/-1) or None with the error, and the calls made."""

    marks: list[int | None]
    errors: list[str | None]
    calls: list[LLMCall] = field(default_factory=list)
    probabilities: list[float | None] = field(default_factory=list)
    """Per reason, the probability of the mark +1 from the AMC reply's token log-probabilities (renormalised
    over +1 and -1 at the mark's position); empty or None where the backend gave none (``amc=rule``: none)."""

    def probability(self, index: int) -> float | None:
        return self.probabilities[index] if index < len(self.probabilities) else None


class AutoMetricConverter:
    """AMC (DCR paper §3.2): reasons -> +1/-1. ``llm``: one call that reads only the reasons (the paper's
    design); an unusable reply leaves every reason unmarked with the error. ``rule``: the verdict each reason
    states in words (:func:`verdict_mark`), no call; a reason that states none is unmarked."""

    def __init__(self, llm: LLM, mode: AmcMode = "llm", prompt: PromptTemplate = AMC_PROMPT):
        self.llm = llm
        self.mode: AmcMode = mode
        self.prompt = prompt

    async def __call__(self, reasons: Sequence[str]) -> AmcMarks:
        n = len(reasons)
        if not n:
            return AmcMarks([], [])
        if self.mode == "rule":
            marks: list[int | None] = []
            errors: list[str | None] = []
            for reason in reasons:
                try:
                    marks.append(verdict_mark(reason))
                    errors.append(None)
                except ParseError as exc:
                    marks.append(None)
                    errors.append(str(exc))
            return AmcMarks(marks, errors)
        numbered = "\n".join(f"{i}. {' '.join(r.split())}" for i, r in enumerate(reasons, 1))
        step = await generate_reply(
            self.llm,
            self.prompt.render(reasons=numbered, count=n),
            AmcReply,
            parse=lambda text: parse_amc(text, n),  # type: ignore[arg-type, return-value]
            params=self.llm.params(top_logprobs=VERDICT_TOP_LOGPROBS),
        )
        if step.value is None:
            error = f"AMC failed: {step.error}"
            return AmcMarks([None] * n, [error] * n, step.calls)
        parsed = cast("list[int | None]", list(step.value))  # parse_amc gives the marks themselves
        found = label_probabilities(step.logprobs, *MARKS)
        stated: list[int | None] = [1 if f.stated else -1 for f in found]
        # the probabilities count only when they are read off exactly the marks parsed, in order
        probabilities = [f.probability for f in found] if stated == parsed else []
        return AmcMarks(parsed, [None] * n, step.calls, probabilities)
