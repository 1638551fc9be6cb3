"""``geval``: a coarse 1-5 consistency rating of the whole target by an LLM judge, normalized to [0, 1].

Two prompts (``-o prompt=``):

- ``reasoned`` (default): halluscope's own prompt, a JSON reply with a sentence of reason before an integer score.
- ``paper``: G-Eval's form as the seed papers use it as a baseline (000 Table 6, 001's G-Eval rows): evaluation
  criteria and steps, then a form asking for the consistency score alone (written in our own words). With
  ``weighting=probability`` (the default) the score is G-Eval's probability-weighted sum
  ``sum_s p(s) * s`` over the score tokens 1-5 at the reply's first score position, from the backend's token
  log-probabilities (OpenAI and OpenAI-compatible servers such as llama.cpp's return them; the embedded
  model does not: llama-cpp-python needs the logits of every position kept for that); the probabilities of 1-5 are
  renormalized to sum to 1. A backend that returns no log-probabilities gives the plain integer, and the
  report says so (``details["weighting"]``). G-Eval estimated the probabilities of GPT-4 by sampling 20
  replies; reading them off the logprobs is the same quantity where the backend exposes it.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar, Literal

from pydantic import Field

from halluscope.llm.base import TokenLogprobs
from halluscope.llm.label_probs import refusal
from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.methods.details import MethodDetails
from halluscope.options import MethodOptions
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

# G-Eval's form-filling consistency prompt, in halluscope's words: criteria, steps, and a score-only answer.
GEVAL_PAPER_PROMPT = PromptTemplate(
    name="geval_paper",
    version="1",
    system="",
    user=(
        "You are given a source text and a target text written from it. Rate the target text on one measure.\n\n"
        "Measure:\n"
        "Consistency (1-5): how well the target's information agrees with the source. A consistent target "
        "states only things the source entails; a target with invented or unsupported facts is penalized. "
        "1 is the worst, 5 the best.\n\n"
        "How to rate:\n"
        "1. Read the source and note its main facts and details.\n"
        "2. Read the target and check each of its statements against the source, looking for facts the source "
        "does not support.\n"
        "3. Give the consistency score by the measure above.\n\n"
        "Answer with the score only: a single number from 1 to 5, nothing else.\n\n"
        "Source text:\n$source\n\nTarget text:\n$target\n\n"
        "Rating (score only):\n- Consistency:"
    ),
)

SCORES = ("1", "2", "3", "4", "5")
TOP_LOGPROBS = 20  # the most OpenAI returns; enough for the five score tokens to show up
_PAPER_REPLY = re.compile(
    r"^\s*(?:[-*]\s*)?(?:consistency\s*(?:score)?\s*[:=-]?\s*)?\**([1-5])(?:\.0+)?\**"
    r"(?:\s*(?:/|out of)\s*5)?\s*\.?\s*$",
    re.I,
)


def parse_paper_score(text: str) -> int | None:
    """The score of a score-only reply ("4", "Consistency: 4", "4/5"); None for anything else (a reply with
    reasoning or several numbers is not read: never guess a score). The whole reply is read, not its first line:
    "5\nOn second thought: 1" states two scores."""
    match = _PAPER_REPLY.match(text.strip()) if len(text) <= 200 else None
    return int(match.group(1)) if match else None


def weighted_score(logprobs: list[TokenLogprobs] | None) -> tuple[float, dict[str, float]] | None:
    """G-Eval's ``sum_s p(s) * s`` at the first generated position whose token is a score 1-5 (after any
    whitespace or list marker), with p renormalized over the score tokens among that position's top candidates.
    None when there is no such position, no score token among its candidates, or log-probabilities there that
    are not probabilities (:func:`halluscope.llm.label_probs.refusal`)."""
    for entry in logprobs or []:
        token = entry.token.strip()
        if not token or token in ("-", "*", ":"):
            continue
        if token not in SCORES or refusal(entry) is not None:  # NaN, infinite or positive: not probabilities
            return None
        candidates = {**entry.top, entry.token: entry.logprob}
        probs: dict[str, float] = {}
        for tok, lp in candidates.items():
            key = tok.strip()
            if key in SCORES:
                probs[key] = probs.get(key, 0.0) + math.exp(lp)
        total = sum(probs.values())
        if total <= 0:
            return None
        probs = {k: v / total for k, v in sorted(probs.items())}
        return sum(int(k) * p for k, p in probs.items()), probs
    return None


class GevalOptions(MethodOptions):
    max_tokens: int = Field(default=256, ge=1, le=32_768)
    """Completion budget for the rating (raise it for reasoning models whose hidden thinking counts)."""

    prompt: Literal["reasoned", "paper"] = "reasoned"
    """reasoned: halluscope's prompt (a reason, then an integer, as JSON); paper: G-Eval's score-only form, as
    the seed papers' G-Eval baseline rows use it (the reproduce protocols' geval rows set it)."""

    weighting: Literal["probability", "none"] = "probability"
    """With prompt=paper: probability: G-Eval's probability-weighted score from the backend's token
    log-probabilities (the plain integer, said in details, when the backend returns none); none: the integer."""

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """With prompt=paper: the sampling temperature of the rating call; null: the configured temperature
    (``HALLUSCOPE_TEMPERATURE``, default 0). The MontageLie reproduce row sets 0 (greedy, as that paper ran it)."""


class GevalDetails(MethodDetails):
    """``Report.details`` of ``geval``: which prompt ran and, with the paper's, the reply and its weighting."""

    prompt: Literal["reasoned", "paper"] | None = None
    """The prompt sent (the ``prompt`` option)."""
    reason: str | None = None
    """``prompt=reasoned``: the model's reason for its rating."""
    reply: str | None = None
    """``prompt=paper``: the reply (its first 200 characters)."""
    weighting: str | None = None
    """``prompt=paper``: how the rating was weighted (probability, none, or why the probabilities were unavailable)."""
    score_probabilities: dict[str, float] | None = None
    """``weighting=probability``: each score token's renormalized probability."""
    temperature: float | None = None
    """``prompt=paper``: the temperature the rating was decoded at (0: greedy)."""


@register_method
class GEval(Method):
    name = "geval"
    description = "LLM judge: one 1-5 consistency rating for the whole target, normalized to [0, 1]."
    prompts = (GEVAL_PROMPT, GEVAL_PAPER_PROMPT)
    Options = GevalOptions
    Details: ClassVar[type[MethodDetails]] = GevalDetails
    opts: GevalOptions

    def used_prompts(self) -> list[PromptTemplate]:  # only the prompt this instance sends
        return [self.prompt(GEVAL_PAPER_PROMPT if self.opts.prompt == "paper" else GEVAL_PROMPT)]

    async def run(self, source: str, target: str) -> Report:
        if self.opts.prompt == "paper":
            return await self._run_paper(source, target)
        # A rating and a sentence or two: cap the reply (a looping model otherwise burns the whole budget).
        max_tokens = min(self.opts.max_tokens, self.llm.default_params.max_tokens)
        parsed = await generate_reply(
            self.llm,
            self.prompt(GEVAL_PROMPT).render(source=source, target=target),
            GevalReply,
            params=self.llm.params(max_tokens=max_tokens),
        )
        if parsed.value is None:
            return Report(method=self.name, unscored_reason=parsed.error)
        rating = parsed.value.score
        return Report(
            method=self.name,
            score=(rating - 1) / 4,
            subscores={"rating": float(rating)},
            details=GevalDetails.build(reason=parsed.value.reason, prompt="reasoned"),
        )

    async def _run_paper(self, source: str, target: str) -> Report:
        max_tokens = min(self.opts.max_tokens, 16, self.llm.default_params.max_tokens)
        weighted = self.opts.weighting == "probability"
        params = self.llm.params(
            max_tokens=max_tokens, top_logprobs=TOP_LOGPROBS if weighted else None, temperature=self.opts.temperature
        )
        messages = [m for m in self.prompt(GEVAL_PAPER_PROMPT).render(source=source, target=target) if m["content"]]
        completion = await self.llm.generate(messages, params)
        rating = parse_paper_score(completion.text)
        details: dict[str, Any] = GevalDetails.build(
            prompt="paper", reply=completion.text[:200], temperature=params.temperature
        )
        if rating is None:
            return Report(
                method=self.name,
                unscored_reason=f"geval: the reply is not a score from 1 to 5: {completion.text[:80]!r}",
                details=details,
            )
        value = float(rating)
        details.update(GevalDetails.build(weighting="none (weighting=none)"))
        if weighted:
            found = weighted_score(completion.logprobs)
            if found is not None:
                value, probs = found
                details.update(GevalDetails.build(weighting="probability (G-Eval)", score_probabilities=probs))
            else:
                details.update(
                    GevalDetails.build(
                        weighting=(
                            "unavailable: the backend returned no usable log-probabilities for the score token (none, "
                            "or NaN, infinite or above 0); the integer score is used"
                        )
                    )
                )
        return Report(
            method=self.name,
            score=(value - 1) / 4,
            subscores={"rating": float(rating), "weighted": value},
            details=details,
        )
