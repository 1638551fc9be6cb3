"""FActScore's decomposer (decomposer ``factscore``): the target, given as numbered sentences, split into atomic
facts in one call, each declared with the number of the sentence it came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from halluscope.llm.structured import generate_reply
from halluscope.methods.factscore.prompts import FACTSCORE_DECOMPOSE_PROMPT
from halluscope.methods.factscore.replies import FACT_ECHOES, FACT_EXAMPLES, FactsReply
from halluscope.options import StageOptions
from halluscope.records import Claim, StepResult
from halluscope.stages import PromptResolver, register_stage, same_prompt
from halluscope.text import ParseError, Sentence, locate, split_sentences
from halluscope.text.placeholders import is_placeholder, normalized, resembles

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM


@dataclass(frozen=True)
class AtomicFact:
    text: str
    sentence_index: int  # 0-based index of the target sentence it came from


def parse_facts(text: str, sentences: Sequence[Sentence], target: str = "") -> list[AtomicFact]:
    """The declared atomic facts (each once, in order). Placeholders are dropped, and so are copies of the
    prompt's example facts (also with a detail changed) unless the target really says them. Raises ParseError when the
    reply is not the declared list, names a sentence that does not exist, or has no real fact left."""
    entries = FactsReply.parse(text).facts
    n = len(sentences)
    facts: list[AtomicFact] = []
    seen: set[str] = set()
    for entry in entries:
        fact = " ".join(entry.fact.split())
        if is_placeholder(fact):
            continue
        copied = normalized(fact) in FACT_ECHOES or resembles(fact, FACT_EXAMPLES)
        if copied and not (target and locate(fact, target) is not None):
            continue
        if not 1 <= entry.sentence <= n:
            raise ParseError(f"fact {fact[:40]!r} names sentence {entry.sentence}; the TEXT has {n} sentence(s)")
        if fact.lower() in seen:
            continue
        seen.add(fact.lower())
        facts.append(AtomicFact(fact, entry.sentence - 1))
    if not facts:
        raise ParseError(
            "the reply lists no atomic facts"
            if not entries
            else "the reply lists no atomic facts, only placeholders or the prompt's example"
        )
    return facts


def _numbered_sentences(sentences: Sequence[Sentence]) -> str:
    return "\n".join(f"{i}. {s.text}" for i, s in enumerate(sentences, 1))


@register_stage("factscore", "decomposer")
class FactScoreDecomposer:
    """Target -> atomic facts, each with the span of the target sentence it came from (one LLM call)."""

    name: str

    def __init__(self, model: LLM, options: StageOptions | None = None, *, prompts: PromptResolver = same_prompt):
        self.llm = model
        self.prompt = prompts(FACTSCORE_DECOMPOSE_PROMPT)

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        sentences = split_sentences(target)
        if not sentences:
            return StepResult.failure("the target has no sentences")
        step = await generate_reply(
            self.llm,
            self.prompt.render(sentences=_numbered_sentences(sentences)),
            FactsReply,
            parse=lambda text: parse_facts(text, sentences, target),  # type: ignore[arg-type, return-value]
        )
        if step.value is None:
            return StepResult.failure(step.error or "no facts", step.calls)
        facts: list[AtomicFact] = step.value  # type: ignore[assignment]
        claims = [
            Claim(text=f.text, kind="atomic", id=f"f{i}", target_spans=[sentences[f.sentence_index].span])
            for i, f in enumerate(facts, 1)
        ]
        return StepResult.success(claims, step.calls)
