"""DoveScore's stages: the decomposer (decomposer ``dove``), the fact checker (verifier ``dove``, usable by any
claim method) and the two sorters (DoveScore's own, chosen with ``sorter=llm|position``)."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field
from rapidfuzz import fuzz, process

from halluscope.llm import LLM
from halluscope.llm.label_probs import TRUE_FALSE, VERDICT_TOP_LOGPROBS, step_label, with_label_probability
from halluscope.llm.structured import generate_reply
from halluscope.methods.batching import BatchCall, BatchingVerifier, numbered_as_written
from halluscope.methods.dove.prompts import (
    DOVE_CHECK_BATCH_PROMPT,
    DOVE_CHECK_PROMPT,
    DOVE_DECOMPOSE_PROMPT,
    DOVE_EXAMPLE_FACTS,
    DOVE_SORT_EXAMPLE_ORDER,
    DOVE_SORT_PROMPT,
)
from halluscope.methods.dove.replies import (
    DoveBatchJudgment,
    DoveCheckReply,
    DoveFacts,
    DoveFactsReply,
    DoveOrderReply,
    parse_decomposition,
    parse_event_order,
)
from halluscope.options import MAX_BATCH_SIZE, RetrievalOptions, StageOptions, options_view
from halluscope.records import Claim, Evidence, LLMCall, Span, StepResult, Verdict
from halluscope.stages import Context, PromptResolver, register_stage, same_prompt
from halluscope.stages.context import shared_source_index
from halluscope.stages.protocols import EventOrder
from halluscope.stages.verifiers import messages_tokens, reply_budget
from halluscope.text import locate, split_sentences
from halluscope.text.placeholders import is_placeholder, shown_strings

CHECK_REPLY_TOKENS = 256  # a reason, a short quote and a verdict
EVIDENCE_ECHOES = shown_strings(DoveCheckReply)


# ------------------------------------------------------------------------------------------------ decomposer


def target_spans_for(fact: str, target: str, sentences: Sequence[tuple[str, Span]]) -> list[Span]:
    """Where a (rewritten, pronoun-resolved) fact sits in the target: the exact/near-exact text when it is
    there, else the target sentence that shares the most words with it (an approximation), else nothing."""
    match = locate(fact, target, min_fuzzy=90)
    if match is not None:
        return [match.span]
    if not sentences:
        return []
    best = process.extractOne(
        fact, [s for s, _ in sentences], scorer=fuzz.token_set_ratio, processor=lambda s: s.lower(), score_cutoff=60
    )
    return [sentences[best[2]][1]] if best is not None else []


@register_stage("dove", "decomposer")
class DoveDecomposer:
    """Target -> event facts in the target's chronological order, and descriptive facts (one LLM call).

    Events get ids E1.. and ``order``, descriptive facts D1..; pronouns are resolved by the model, and each
    fact is mapped back to a target span (:func:`target_spans_for`)."""

    name: str

    def __init__(self, model: LLM, options: StageOptions | None = None, *, prompts: PromptResolver = same_prompt):
        self.llm = model
        self.prompt = prompts(DOVE_DECOMPOSE_PROMPT)

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        def parse(text: str) -> DoveFacts:
            return parse_decomposition(text, DOVE_EXAMPLE_FACTS, target)

        step = await generate_reply(
            self.llm,
            self.prompt.render(target=target),
            DoveFactsReply,
            parse=parse,  # type: ignore[arg-type]
            params=self.llm.params(max_tokens=reply_budget(self.llm, 128 + 2 * self.llm.count_tokens(target))),
        )
        if step.value is None:
            return StepResult.failure(f"decomposer: {step.error}", step.calls)
        facts: DoveFacts = step.value  # type: ignore[assignment]
        sentences = [(s.text, s.span) for s in split_sentences(target)]
        events = [
            Claim(text=t, kind="event", id=f"E{i + 1}", order=i, target_spans=target_spans_for(t, target, sentences))
            for i, t in enumerate(facts.events)
        ]
        descriptive = [
            Claim(text=t, kind="descriptive", id=f"D{i + 1}", target_spans=target_spans_for(t, target, sentences))
            for i, t in enumerate(facts.descriptive)
        ]
        return StepResult.success(events + descriptive, step.calls)


# ------------------------------------------------------------------------------------------------ fact checker


def _evidence(judgment: DoveCheckReply, source: str) -> list[Evidence]:
    quote = (judgment.evidence or "").strip()
    if not quote or is_placeholder(quote, EVIDENCE_ECHOES):
        return []
    relation = {"supported": "supports", "contradicted": "contradicts"}.get(judgment.label, "related")
    match = locate(quote, source)
    text = match.span.of(source) if match else quote
    return [Evidence(text=text, span=match.span if match else None, relation=relation)]  # type: ignore[arg-type]


def _verdict(claim: Claim, judgment: DoveCheckReply, source: str, calls: list[LLMCall]) -> Verdict:
    return Verdict(
        claim=claim,
        label=judgment.label,  # type: ignore[arg-type]
        reason=judgment.reason or "",
        score=1.0 if judgment.supported else 0.0,
        evidence=_evidence(judgment, source),
        calls=calls,
    )


@register_stage("dove", "verifier")
class DoveFactChecker(BatchingVerifier[DoveCheckReply]):
    """DoveScore's fact checker: supported / contradicted / unsupported, with a reason and a source quote.

    One call per fact; with the whole source and ``batch_size`` > 1 several facts per call. A fact the batch
    reply does not judge exactly once by its number is re-checked on its own (the per-fact path is the
    reference); unscored when that reply is unusable too."""

    reply_tokens = CHECK_REPLY_TOKENS
    placeholders_in_batch = True  # numbered in the batch prompt as written; unscored whatever the reply says

    class Options(StageOptions):
        batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
        """Facts per fact-checker call when the whole source is sent (1 = the paper's one call per fact)."""

    def __init__(
        self, model: LLM, options: DoveFactChecker.Options | None = None, *, prompts: PromptResolver = same_prompt
    ):
        super().__init__(model, options, prompts=prompts)
        self.batch_size = self.options.batch_size
        self.prompt = prompts(DOVE_CHECK_PROMPT)
        self.batch = BatchCall(
            prompts(DOVE_CHECK_BATCH_PROMPT),
            DoveBatchJudgment,
            listing="facts",
            unit="fact",
            reply_tokens=CHECK_REPLY_TOKENS,
            overhead=64,
            number=numbered_as_written,
        )

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        """The one-fact prompt for ``claims[0]``."""
        return self.prompt.render(source=context_text, fact=claims[0].text)

    async def check(self, claim: Claim, context: Context, source: str) -> Verdict:
        if is_placeholder(claim.text):
            return Verdict.unscored(claim, self.placeholder_reason(claim))
        step = await generate_reply(
            self.llm,
            self.messages([claim], context.text),
            DoveCheckReply,
            params=self.llm.params(
                max_tokens=reply_budget(self.llm, CHECK_REPLY_TOKENS), top_logprobs=VERDICT_TOP_LOGPROBS
            ),
        )
        if step.value is None:
            return Verdict.unscored(claim, f"fact checker: {step.error}", step.calls)
        verdict = _verdict(claim, step.value, source, step.calls)
        return with_label_probability(verdict, step_label(step, *TRUE_FALSE, key="supported"))

    def accept(self, claim: Claim, entry: DoveCheckReply, calls: list[LLMCall], source: str) -> Verdict:
        return _verdict(claim, entry, source, calls)

    def placeholder_reason(self, claim: Claim) -> str:
        return f"the fact {claim.text[:40]!r} is a template placeholder, not a fact"


# ------------------------------------------------------------------------------------------------ sorters


class SorterOptions(StageOptions):
    """The LLM sorter's settings."""

    sorter_input: Literal["decomposition", "shuffled"] = "decomposition"
    """The order the events are shown in: decomposition (the paper: as given) or shuffled (a fixed pseudo-random order
    seeded by the events, so a model that echoes its input cannot make every ordering agree with the target)."""

    seed: int = 0
    """Seeds the shuffled presentation (dove passes the run's seed)."""


@register_stage("llm", "sorter")
class DoveSorter:
    """Events x text -> their chronological order according to the text (the paper's sorter, one call).

    ``sorter_input=shuffled``: the events are shown in a fixed pseudo-random order (seeded by their texts), never
    in target order, so that a model echoing its input cannot make every ordering agree with the target. Without
    it (the paper's setting, ``dove -o sorter_input=decomposition``) they are shown in the order they are given."""

    name: str  # set by @register_stage
    label: ClassVar[str] = "dove.sort"  # its name in a report's details["stages"]
    Options: ClassVar[type[StageOptions]] = SorterOptions

    def __init__(self, model: LLM, options: StageOptions | None = None, *, prompts: PromptResolver = same_prompt):
        if model is None:
            raise TypeError("the llm sorter needs an LLM (model=...)")
        opts: SorterOptions = options or SorterOptions()  # type: ignore[assignment]
        self.llm, self.prompt = model, prompts(DOVE_SORT_PROMPT)
        self.seed, self.shuffle = opts.seed, opts.sorter_input == "shuffled"

    def presentation(self, events: Sequence[str]) -> list[int]:
        if not self.shuffle:
            return list(range(len(events)))
        digest = hashlib.sha256(("\x1f".join(events) + f"\x1e{self.seed}").encode("utf-8", "surrogatepass")).hexdigest()
        shown = list(range(len(events)))
        random.Random(digest).shuffle(shown)
        return shown

    def messages(self, events: Sequence[str], text: str, about: str | None = None) -> list[dict[str, str]]:
        """``about``: the source of the check, so sorting by the source and by the target share one fence key
        (and the prompt prefix up to the TEXT)."""
        listing = "\n".join(f"{n + 1}. {t}" for n, t in enumerate(events))
        return self.prompt.render(text=text, events=listing, about=about)

    @staticmethod
    def reply_tokens(n_events: int) -> int:
        return 32 + 8 * n_events

    def reserve_tokens(self, events: Sequence[str]) -> int:
        """Tokens a call needs besides the text it sorts by (prompt wording, the events, the reply)."""
        return messages_tokens(self.llm, self.messages(events, "")) + reply_budget(
            self.llm, self.reply_tokens(len(events))
        )

    async def __call__(self, events: Sequence[str], text: str, about: str | None = None) -> StepResult[EventOrder]:
        shown = self.presentation(events)
        shown_texts = [events[i] for i in shown]
        step = await generate_reply(
            self.llm,
            self.messages(shown_texts, text, about),
            DoveOrderReply,
            params=self.llm.params(max_tokens=reply_budget(self.llm, self.reply_tokens(len(events)))),
            parse=lambda reply: parse_event_order(reply, shown_texts, DOVE_SORT_EXAMPLE_ORDER),  # type: ignore[arg-type, return-value]
        )
        if step.value is None:
            return StepResult.failure(f"sorter: {step.error}", step.calls)
        local: EventOrder = step.value  # type: ignore[assignment]
        back = EventOrder(
            order=[shown[i] for i in local.order],
            missing=sorted(shown[i] for i in local.missing),
            duplicated=[shown[i] for i in local.duplicated],
            invented=local.invented,
        )
        return StepResult.success(back, step.calls)


@register_stage(
    "position",
    "sorter",
    "No LLM: orders events by the source sentence each retrieves best (only for "
    "sources narrated in chronological order).",
)
class PositionSorter:
    """No-LLM source-side sorter: orders events by where the source tells them, i.e. by the source sentence
    each event retrieves best. Only valid for sources narrated in chronological order (most stories and news
    reports, not texts built on flashbacks); an extension, not the paper's sorter. Events anchored to the same
    sentence keep their given order (the source gives no evidence against it); an event with no positive
    retrieval score anywhere is left unplaced (``missing``)."""

    name: str  # set by @register_stage
    label: ClassVar[str] = "dove.position_sort"  # its name in a report's details["stages"]
    uses_llm: ClassVar[bool] = False
    Options: ClassVar[type[StageOptions]] = options_view(
        "PositionSorterOptions",
        RetrievalOptions,
        ["top_k", "window", "retriever", "merge_windows", "embed_all_up_to"],
        "The retrieval index the events are placed with (the one the retrieval stage uses for the same settings).",
    )

    def __init__(self, model: Any = None, options: StageOptions | None = None):
        self.opts: RetrievalOptions = options or self.Options()  # type: ignore[assignment]

    async def __call__(self, events: Sequence[str], text: str, about: str | None = None) -> StepResult[EventOrder]:
        """``text``: the source (its index comes from the shared index cache)."""
        index = await shared_source_index(text, self.opts)

        def anchors() -> list[int | None]:
            found: list[int | None] = []
            for event in events:
                scores = index.sentence_scores(event)
                best = int(scores.argmax()) if scores.size else -1
                found.append(best if best >= 0 and float(scores[best]) > 0 else None)
            return found

        anchor = await asyncio.to_thread(anchors)
        placed = sorted((i for i, a in enumerate(anchor) if a is not None), key=lambda i: (anchor[i], i))
        if len(placed) < 2 <= len(events):
            return StepResult.failure(
                f"position sorter: only {len(placed)} of {len(events)} events match a source sentence"
            )
        return StepResult.success(
            EventOrder(
                order=placed,
                missing=[i for i, a in enumerate(anchor) if a is None],
                notes={"source_sentence_of_event": anchor},
            )
        )
