"""DCR's verifier stage (DCE + AMC per claim) and how DCE's reasons become one verdict per unit."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from halluscope.llm.structured import generate_reply
from halluscope.methods.batching import BatchCall, BatchStep, chunked, gather_or_cancel, judge_in_batches
from halluscope.methods.dcr.amc import AmcMarks, AmcMode, AutoMetricConverter
from halluscope.methods.dcr.prompts import (
    AMC_PROMPT,
    DCE_EXCERPT_BATCH_PROMPT,
    DCE_EXCERPT_PROMPT,
    DCE_PARAGRAPH_PROMPT,
    DCE_REPLY_TOKENS,
    DCE_SENTENCE_PROMPT,
)
from halluscope.methods.dcr.replies import (
    DceExcerptEntry,
    DceJudgment,
    DceReason,
    DceReply,
    DceSingleReply,
    _stated_reason,
    bracket_numbered,
    number_claims,
    parse_dce_sentences,
    parse_dce_single,
)
from halluscope.options import StageOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, LLMCall, StepResult, Verdict
from halluscope.stages import Context, PromptResolver, register_stage, same_prompt
from halluscope.stages.verifiers import LLMVerifier, messages_tokens, reply_budget
from halluscope.text import ParseError
from halluscope.text.placeholders import is_placeholder

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM


@dataclass(frozen=True)
class OtherReason:
    """A marked DCE reason that is not the one kept for a unit: App. I takes it out of Z (alpha, beta)."""

    text: str
    mark: int
    unit: int | None  # 0-based unit it is about; None when it is about no single unit

    def record(self) -> dict[str, Any]:
        return {"reason": self.text, "mark": self.mark, "sentence": None if self.unit is None else self.unit + 1}


@dataclass
class DceNotes:
    """What DCE said beyond one verdict per unit during one check: recorded in the check's trace
    (:mod:`halluscope.stages.trace`), read by :meth:`DCR.aggregate`."""

    other_reasons: list[OtherReason] = field(default_factory=list)
    is_consistent: bool | None = None
    unmarked_reasons: list[str] = field(default_factory=list)  # DCE reasons AMC could not mark (any unit or none)


NO_REASON = "the evaluator gave no reason for this sentence"


def assign_reasons(
    claims: Sequence[Claim], reasons: Sequence[DceReason], amc: AmcMarks, calls: Sequence[LLMCall] = ()
) -> tuple[list[Verdict], list[OtherReason]]:
    """One verdict per claim from its marked reasons: its negative one when it has several (a unit is
    consistent only if nothing said about it is negative), else its only one. Every other marked reason --
    not about one unit, or a further reason about a unit -- is returned for alpha/beta (App. I)."""
    marked = [(r, m) for r, m in zip(reasons, amc.marks) if m is not None]
    marked_probability = [amc.probability(k) for k, m in enumerate(amc.marks) if m is not None]
    chosen: dict[int, int] = {}  # unit -> position in ``marked``
    for pos, (reason, mark) in enumerate(marked):
        i = reason.unit
        if i is None:
            continue
        if i not in chosen or (mark == -1 and marked[chosen[i]][1] == 1):
            chosen[i] = pos
    kept = set(chosen.values())
    others = [OtherReason(r.text, m, r.unit) for pos, (r, m) in enumerate(marked) if pos not in kept]
    unmarked = {r.unit: e for r, m, e in zip(reasons, amc.marks, amc.errors) if m is None and r.unit is not None}
    verdicts: list[Verdict] = []
    for i, claim in enumerate(claims):
        if i in chosen:
            reason, mark = marked[chosen[i]]
            verdicts.append(
                Verdict(
                    claim=claim,
                    label="supported" if mark == 1 else "unsupported",
                    reason=reason.text,
                    score=float(mark),
                    calls=list(calls),
                    support_probability=marked_probability[chosen[i]],
                )
            )
        elif i in unmarked:
            verdicts.append(Verdict.unscored(claim, f"reason could not be marked: {unmarked[i]}", list(calls)))
        else:
            verdicts.append(Verdict.unscored(claim, NO_REASON, list(calls)))
    return verdicts, others


def _is_paragraph(claims: Sequence[Claim]) -> bool:
    return len(claims) == 1 and claims[0].kind == "paragraph"


@register_stage("dcr", "verifier")
class DcrVerifier(LLMVerifier):
    """DCR's DCE + AMC: each claim judged against the context with a reason, the reason marked +1/-1.

    Against the whole source one DCE call judges all claims at once, numbered (as the paper does); a lone
    ``paragraph`` claim is judged with the paragraph prompt; against a retrieved snippet each claim gets a
    call of its own. AMC per :class:`AutoMetricConverter` (option ``amc``).
    Reasons that are not about one claim go to the check's :class:`DceNotes` (``context.trace``; other methods
    ignore them)."""

    reply_tokens = DCE_REPLY_TOKENS

    class Options(StageOptions):
        amc: AmcMode = "llm"
        """How reasons become +1/-1: llm (a call that reads only the reasons, the paper's AMC) or rule (the verdict
        words each reason states; no extra call)."""

    def __init__(
        self, model: LLM, options: DcrVerifier.Options | None = None, *, prompts: PromptResolver = same_prompt
    ):
        super().__init__(model, options, prompts=prompts)
        self.amc_mode: AmcMode = self.options.amc
        self.sentence_prompt = prompts(DCE_SENTENCE_PROMPT)
        self.paragraph_prompt = prompts(DCE_PARAGRAPH_PROMPT)
        self.excerpt_prompt = prompts(DCE_EXCERPT_PROMPT)
        self.excerpt_batch = BatchCall(
            prompts(DCE_EXCERPT_BATCH_PROMPT),
            DceExcerptEntry,
            listing="sentences",
            unit="sentence",
            reply_tokens=self.reply_tokens,
            number=bracket_numbered,
        )
        self.amc = AutoMetricConverter(model, self.amc_mode, prompts(AMC_PROMPT))

    def used_prompts(self) -> list[PromptTemplate]:
        return [self.sentence_prompt, self.excerpt_prompt] + ([self.amc.prompt] if self.amc_mode == "llm" else [])

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        if _is_paragraph(claims):
            return self.paragraph_prompt.render(source=context_text, target=claims[0].text)  # type: ignore[return-value]
        return self.sentence_prompt.render(source=context_text, sentences=number_claims(claims))  # type: ignore[return-value]

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """The joint DCE prompt holds every claim, so all of them count (not only the longest)."""
        return messages_tokens(self.llm, self.messages(list(claims), "")) + reply_budget(self.llm, self.reply_tokens)

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        if not claims:
            return []
        if context.kind == "snippet" and not _is_paragraph(claims):
            return list(await asyncio.gather(*(self.judge_excerpt(c, context) for c in claims)))
        return await self.judge_all(claims, context)

    async def judge_all(self, claims: Sequence[Claim], context: Context) -> list[Verdict]:
        """One DCE call for all claims, then AMC on its reasons. The calls are shared (Report.calls only)."""
        messages = self.messages(claims, context.text)
        if _is_paragraph(claims):
            step: StepResult[Any] = await generate_reply(self.llm, messages, DceSingleReply, parse=parse_dce_single)  # type: ignore[arg-type]
        else:
            n = len(claims)
            step = await generate_reply(self.llm, messages, DceReply, parse=lambda text: parse_dce_sentences(text, n))  # type: ignore[arg-type, return-value]
        if step.value is None:
            return [Verdict.unscored(c, f"DCE reply unusable: {step.error}") for c in claims]
        judgment: DceJudgment = step.value
        amc = await self.amc([r.text for r in judgment.reasons])
        verdicts, others = assign_reasons(claims, judgment.reasons, amc)
        notes = context.trace.record(DceNotes) if context.trace is not None else None
        if notes is not None:
            notes.other_reasons.extend(others)
            notes.is_consistent = judgment.is_consistent
            notes.unmarked_reasons.extend(r.text for r, m in zip(judgment.reasons, amc.marks) if m is None)
        return verdicts

    async def judge_excerpt(self, claim: Claim, context: Context) -> Verdict:
        """One sentence against one snippet: DCE on the excerpt, then AMC on that one reason."""
        (verdict,) = await self.judge_excerpts([(claim, context)], 1)
        return verdict

    # -- batch_size > 1 with retrieval ----------------------------------------------------------------------
    async def judge_excerpts(self, pairs: Sequence[tuple[Claim, Context]], size: int) -> list[Verdict]:
        """One verdict per (sentence, snippet) pair: DCE batched by identical snippet text, then AMC batched."""
        results: list[_ExcerptDce | None] = [None] * len(pairs)
        groups: dict[str, list[int]] = {}
        for i, (claim, ctx) in enumerate(pairs):
            if is_placeholder(claim.text):
                results[i] = _ExcerptDce(
                    error=f"the claim {claim.text[:40]!r} is a template placeholder, not a claim", placeholder=True
                )
            else:
                groups.setdefault(ctx.text, []).append(i)

        async def group(indices: list[int]) -> None:
            ctx = pairs[indices[0]][1]
            done = await judge_in_batches(
                [pairs[i][0] for i in indices],
                size,
                ask=lambda part: self.ask_excerpt_batch(part, ctx),
                accept=lambda claim, entry, calls: _ExcerptDce(reason=entry.reason, calls=list(calls)),
                alone=lambda claim: self.excerpt_dce(claim, ctx),
                redone=lambda result, why, calls: result.after_batch(why, calls),
            )
            for i, result in zip(indices, done):
                results[i] = result

        await gather_or_cancel(group(indices) for indices in groups.values())
        judged = [i for i, r in enumerate(results) if r is not None and r.reason is not None]
        marks = await self.mark_in_batches([results[i].reason for i in judged], size)  # type: ignore[union-attr]
        verdicts: list[Verdict] = []
        for i, (claim, _ctx) in enumerate(pairs):
            result = results[i]
            assert result is not None
            if result.reason is None:
                reason = result.error if result.placeholder else f"DCE reply unusable: {result.error}"
                verdicts.append(Verdict.unscored(claim, reason or "no reason", result.calls))
                continue
            amc = marks[judged.index(i)]
            (verdict,), _ = assign_reasons([claim], [DceReason(result.reason, 0)], amc, result.calls + amc.calls)
            verdicts.append(verdict)
        return verdicts

    async def excerpt_dce(self, claim: Claim, ctx: Context) -> _ExcerptDce:
        """DCE of one sentence against one snippet (the unbatched path, as in :meth:`judge_excerpt`)."""
        step = await generate_reply(
            self.llm,
            self.excerpt_prompt.render(source=ctx.text, sentence=claim.text),
            DceSingleReply,
            parse=parse_dce_single,
        )  # type: ignore[arg-type]
        if step.value is None:
            return _ExcerptDce(error=step.error, calls=list(step.calls))
        judgment: DceJudgment = step.value  # type: ignore[assignment]
        return _ExcerptDce(reason=judgment.reasons[0].text, calls=list(step.calls))

    async def ask_excerpt_batch(self, claims: list[Claim], ctx: Context) -> BatchStep:
        return await self.excerpt_batch.ask(
            self.llm, [c.text for c in claims], source=ctx.text, check=_check_stated_reason
        )

    async def mark_in_batches(self, reasons: Sequence[str], size: int) -> list[AmcMarks]:
        """One :class:`AmcMarks` per reason: AMC over up to ``size`` reasons per call (``amc=llm``); a chunk
        whose reply is unusable is marked again one reason per call (the unbatched path)."""
        if self.amc_mode == "rule":
            marked = await self.amc(list(reasons))
            return [AmcMarks([m], [e]) for m, e in zip(marked.marks, marked.errors)]

        async def chunk(part: list[str]) -> list[AmcMarks]:
            if len(part) == 1:
                return [await self.amc(part)]
            marked = await self.amc(part)
            if any(m is not None for m in marked.marks):
                return [
                    AmcMarks([m], [e], list(marked.calls), [marked.probability(k)])
                    for k, (m, e) in enumerate(zip(marked.marks, marked.errors))
                ]
            alone = await gather_or_cancel(self.amc([r]) for r in part)
            why = marked.errors[0] or "no marks"
            return [
                AmcMarks(
                    a.marks,
                    [None if e is None else f"batch: {why}; alone: {e}" for e in a.errors],
                    list(marked.calls) + list(a.calls),
                    list(a.probabilities),
                )
                for a in alone
            ]

        parts = await gather_or_cancel(chunk(p) for p in chunked(list(reasons), max(1, size)))
        return [m for part in parts for m in part]


@dataclass
class _ExcerptDce:
    """DCE's reason for one sentence against one snippet, or why there is none, and the calls made."""

    reason: str | None = None
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)
    placeholder: bool = False

    def after_batch(self, why: str, batch_calls: Sequence[LLMCall]) -> _ExcerptDce:
        error = None if self.reason is not None else f"batch: {why}; alone: {self.error}"
        return _ExcerptDce(self.reason, error, list(batch_calls) + self.calls)


def _check_stated_reason(entry: DceSingleReply) -> None:
    if _stated_reason(entry.reason) is None:
        raise ParseError("the reason is empty, a placeholder or the prompt's example")
