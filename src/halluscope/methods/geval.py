"""``geval``: a coarse 1-5 consistency rating of the whole target by an LLM judge, normalized to [0, 1]."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from halluscope.llm.structured import generate_parsed, json_parser
from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Report
from halluscope.text.parsing import ParseError

GEVAL_PROMPT = PromptTemplate(
    name="geval",
    version="1",
    system="You are a careful fact-checker who compares a text against the source document it should be based on.",
    user=(
        "Rate how factually consistent the TEXT is with the SOURCE on a scale of 1 to 5.\n"
        "5 = every statement in the text is supported by the source; 1 = the text is mostly unsupported "
        "or contradicts the source. Judge only consistency with the source, not style or completeness. "
        "Information that cannot be verified from the source counts against the text.\n\n"
        "SOURCE:\n$source\n\nTEXT:\n$target\n\n"
        'Reply with one JSON object: {"reason": "<one or two sentences>", "score": <integer 1-5>}'
    ),
)


class GevalReply(BaseModel):
    reason: str = ""
    score: int = Field(ge=1, le=5)


# "score: 4", "Rating - 4/5"; never the 4 of "4.5" (a fractional rating is not silently truncated).
_LOOSE_SCORE = re.compile(r"\b(?:score|rating)\b\W{0,5}([1-5])(?![.,]?\d)(?:\s*/\s*5)?\b", re.I)


def parse_geval(text: str) -> GevalReply:
    """JSON first; otherwise an explicit "score: N" / "rating: N" in prose. Anything else is unparseable."""
    try:
        return json_parser(GevalReply)(text)
    except (ParseError, ValueError) as exc:
        m = _LOOSE_SCORE.search(text or "")
        if m is None:
            raise ParseError(f"no 1-5 score found ({exc})") from exc
        return GevalReply(reason=text.strip()[:500], score=int(m.group(1)))


@register_method
class GEval(Method):
    name = "geval"
    description = "LLM judge: one 1-5 consistency rating for the whole target, normalized to [0, 1]."
    prompts = (GEVAL_PROMPT,)

    def __init__(self, llm=None, config=None, max_tokens: int = 256):
        super().__init__(llm, config)
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        self.max_tokens = max_tokens

    def options(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens}

    async def run(self, source: str, target: str) -> Report:
        prompt = apply_overrides(GEVAL_PROMPT, self.config.prompts_dir)
        # A rating and a sentence or two: cap the reply (a looping model otherwise burns the whole budget).
        # Raise it for reasoning models whose hidden thinking counts as completion tokens.
        max_tokens = min(self.max_tokens, self.llm.default_params.max_tokens)
        parsed = await generate_parsed(
            self.llm,
            prompt.render(source=source, target=target),
            parse_geval,
            params=self.llm.params(max_tokens=max_tokens, json_mode=True),
            format_hint='one JSON object like {"reason": "...", "score": 3}',
        )
        if parsed.value is None:
            return Report(method=self.name, unscored_reason=parsed.error, calls=parsed.calls)
        rating = parsed.value.score
        return Report(
            method=self.name,
            score=(rating - 1) / 4,
            subscores={"rating": float(rating)},
            details={"reason": parsed.value.reason},
            calls=parsed.calls,
        )
