"""FActScore's de-duplication of inconsistency descriptions across facts, as ``deduplicator`` stages: ``llm`` (the
model keeps one description of each group of duplicates, by number), ``fuzzy`` (no call), or ``none``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field
from rapidfuzz import fuzz, process

from halluscope.llm.base import CallBudgetExceeded, LLMError
from halluscope.llm.structured import generate_reply
from halluscope.methods.factscore.prompts import FACTSCORE_DEDUP_PROMPT
from halluscope.methods.factscore.replies import KeepReply
from halluscope.options import StageOptions
from halluscope.records import Span, StepResult
from halluscope.stages import PromptResolver, register_stage, same_prompt
from halluscope.text import ParseError
from halluscope.text.descriptions import MAX_FUZZY_DESCRIPTIONS, fuzzy_duplicate_groups, fuzzy_is_capped, most_specific

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

DedupMode = Literal["fuzzy", "llm", "none"]


def parse_keep(text: str, count: int) -> list[int]:
    """0-based indices to keep from ``{"keep": [1, 3]}`` (1-based integers). Raises ParseError on numbers
    out of range or an empty list (dropping everything is not de-duplication)."""
    keep = KeepReply.parse(text).keep
    if not keep:
        raise ParseError("'keep' is empty: every description would be dropped")
    bad = [k for k in keep if not 1 <= k <= count]
    if bad:
        raise ParseError(f"'keep' has {bad[0]}, not a description number in 1..{count}")
    return sorted({k - 1 for k in keep})


class DescriptionDeduplicator:
    """Groups of duplicate descriptions (the first index of each group is the one kept): fuzzy, by the LLM
    (falling back to fuzzy, with the reason, when its reply is unusable), or none. The registered
    ``deduplicator`` stages below fix ``mode``."""

    name: str  # set by @register_stage
    mode: ClassVar[DedupMode]
    uses_llm: ClassVar[bool] = False

    class Options(StageOptions):
        dedup_threshold: float = Field(default=85.0, ge=0, le=100)
        """Word-order-insensitive similarity (0-100) at which two descriptions merge (fuzzy grouping)."""

    def __init__(
        self, model: LLM | None = None, options: StageOptions | None = None, *, prompts: PromptResolver = same_prompt
    ):
        self.llm = model
        self.prompt = prompts(FACTSCORE_DEDUP_PROMPT)
        self.threshold = getattr(options or self.Options(), "dedup_threshold", 85.0)
        self.note: str | None = None  # set when the fuzzy grouping was capped

    async def __call__(
        self, descriptions: Sequence[str], spans: Sequence[Sequence[Span]], target: str
    ) -> tuple[list[list[int]], str | None]:
        n = len(descriptions)
        if self.mode == "none" or n < 2:
            return [[i] for i in range(n)], None
        if self.mode == "llm":
            step = await self.with_llm(descriptions, target)
            if step.value is not None:
                return step.value, None
            return self.fuzzy(
                descriptions, spans
            ), f"LLM de-duplication failed ({step.error}); used fuzzy de-duplication"
        return self.fuzzy(descriptions, spans), None

    async def with_llm(self, descriptions: Sequence[str], target: str) -> StepResult[list[list[int]]]:
        listing = "\n".join(f"{i}. {d}" for i, d in enumerate(descriptions, 1))
        n = len(descriptions)
        if self.llm is None:  # built without a model: the caller falls back to fuzzy, saying why
            return StepResult.failure("no LLM to de-duplicate with")
        try:
            step = await generate_reply(
                self.llm,
                self.prompt.render(target=target, descriptions=listing),
                KeepReply,
                parse=lambda text: parse_keep(text, n),  # type: ignore[arg-type, return-value]
            )
        except CallBudgetExceeded:
            raise  # the check's budget is spent: the check stops, as for any other call
        except LLMError as exc:  # one failed call: the verdicts already in stay, fuzzy grouping is used instead
            return StepResult.failure(f"the call failed: {exc}")
        if step.value is None:
            return StepResult.failure(step.error or "no reply", step.calls)
        return StepResult.success(_groups_around(descriptions, step.value), step.calls)  # type: ignore[arg-type]

    def fuzzy(self, descriptions: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[list[int]]:
        if fuzzy_is_capped(len(descriptions)):
            self.note = (
                f"{len(descriptions)} descriptions: more than {MAX_FUZZY_DESCRIPTIONS} are not compared "
                "pairwise, so only identical wordings and identical spans were merged"
            )
        out = []
        for group in fuzzy_duplicate_groups(descriptions, self.threshold, spans):
            kept = most_specific(descriptions, group, spans)
            out.append([kept] + [i for i in group if i != kept])
        return out


@register_stage("llm", "deduplicator")
class LlmDeduplicator(DescriptionDeduplicator):
    """FActScore's: the model keeps one description of each group of duplicates, by number (fuzzy grouping, with
    the reason, when its reply is unusable)."""

    mode: ClassVar[DedupMode] = "llm"
    uses_llm: ClassVar[bool] = True


@register_stage("fuzzy", "deduplicator")
class FuzzyDeduplicator(DescriptionDeduplicator):
    """No LLM call: descriptions whose word-order-insensitive similarity reaches the threshold, or that quote the
    same target spans, merge; the most specific one is kept."""

    mode: ClassVar[DedupMode] = "fuzzy"


@register_stage("none", "deduplicator")
class NoDeduplication(DescriptionDeduplicator):
    """Every description is kept."""

    mode: ClassVar[DedupMode] = "none"

    class Options(StageOptions):
        pass


def _groups_around(descriptions: Sequence[str], keep: Sequence[int]) -> list[list[int]]:
    """Attach every dropped description to the kept one it is most similar to."""
    groups = {k: [k] for k in keep}
    kept_lower = [descriptions[k].lower() for k in keep]
    for i in range(len(descriptions)):
        if i in groups:
            continue
        # extractOne scores in C; ties go to the first kept one, as max() did
        _, _, position = process.extractOne(descriptions[i].lower(), kept_lower, scorer=fuzz.token_sort_ratio)
        groups[keep[position]].append(i)
    return [groups[k] for k in keep]
