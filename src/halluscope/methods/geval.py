"""``geval``: a coarse 1-5 consistency rating of the whole target by an LLM judge, normalized to [0, 1]."""

from __future__ import annotations

from pydantic import Field

from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.methods.options import MethodOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Report


class GevalReply(Reply):
    """The judge's rating: an integer 1-5 stated as such (not a boolean, list, string or nested value)."""

    reason: str = Field(description="one or two sentences explaining the rating")
    score: int = Field(ge=1, le=5, description="5 = fully supported by the source, 1 = mostly unsupported")


GEVAL_PROMPT = PromptTemplate(
    name="geval",
    version="2",
    system="You are a careful fact-checker who compares a text against the source document it should be based on.",
    user=(
        "Rate how factually consistent the TEXT is with the SOURCE on a scale of 1 to 5.\n"
        "5 = every statement in the text is supported by the source; 1 = the text is mostly unsupported "
        "or contradicts the source. Judge only consistency with the source, not style or completeness. "
        "Information that cannot be verified from the source counts against the text.\n\n"
        "$format\n\nSOURCE:\n$source\n\nTEXT:\n$target"
    ),
    reply=GevalReply,
)


class GevalOptions(MethodOptions):
    max_tokens: int = Field(default=256, ge=1, le=32_768)
    """Completion budget for the rating (raise it for reasoning models whose hidden thinking counts)."""


@register_method
class GEval(Method):
    name = "geval"
    description = "LLM judge: one 1-5 consistency rating for the whole target, normalized to [0, 1]."
    prompts = (GEVAL_PROMPT,)
    Options = GevalOptions

    async def run(self, source: str, target: str) -> Report:
        # A rating and a sentence or two: cap the reply (a looping model otherwise burns the whole budget).
        max_tokens = min(self.opts.max_tokens, self.llm.default_params.max_tokens)  # type: ignore[attr-defined]
        parsed = await generate_reply(self.llm, self.prompt(GEVAL_PROMPT).render(source=source, target=target),
                                      GevalReply, params=self.llm.params(max_tokens=max_tokens))
        if parsed.value is None:
            return Report(method=self.name, unscored_reason=parsed.error)
        rating = parsed.value.score
        return Report(method=self.name, score=(rating - 1) / 4, subscores={"rating": float(rating)},
                      details={"reason": parsed.value.reason})
