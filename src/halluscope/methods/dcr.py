"""``dcr``: Divide-Conquer-Reasoning consistency evaluation (seed 001, §3.1-3.2, App. G and I) on the claim
pipeline.

    target --decomposer "sentences" (level=sentence) | "paragraph" (level=paragraph)--> units
           --RetrievalSelector--> whole source | K snippets per sentence
           --verifier "dcr" (DCE + AMC)--> one verdict per unit, marked +1/-1
           --DCR.aggregate--> Z = (sum z + alpha) / (k + beta), score (Z + 1) / 2

* **DCE** (divide-conquer evaluator, in the registered verifier ``dcr``): the target is split into
  sentences (by us, so every sentence keeps its exact character span) and one LLM call judges every sentence
  against the *whole* source, giving a reason per sentence and an overall ``is_consistent`` (recorded in
  ``details["dce_is_consistent"]``, never used in the score). ``level="paragraph"`` judges the whole target
  at once (the paper's paragraph-level variant). With retrieval, each sentence is judged against each of its
  snippets in a call of its own (the shared protocol of seed 003: best snippet first, max per sentence).
* **AMC** (auto-metric converter, also in the verifier): each reason is mapped to +1 (consistent) or -1
  (not), by an LLM call that only reads the reasons (``amc="llm"``, the paper's design) or by the verdict
  the reason states in words (``amc="rule"``, no extra call; see
  :func:`halluscope.text.verdict_words.verdict_mark`).
* **Score** (:meth:`DCR.aggregate`, DCR's own): ``Z = (sum z_i + alpha) / (k + beta)``, score ``(Z + 1) / 2``;
  a text is consistent when the score is 1 (``default_threshold = 1.0``). ``amc_weights`` sets alpha and beta:

  - ``paper`` (default; the paper's experiments, §4): alpha = beta = 0 and ``k`` is every mark AMC gave (one
    per sentence, plus any reason not about exactly one sentence). ``Z`` needs all of them: a sentence (or
    reason) without a mark is neither dropped nor guessed, so the Report is unscored, saying which; the
    judged sentences' verdicts and findings stay in it.
  - ``auto`` (App. I): alpha and beta remove the reasons that are not about exactly one sentence -- a reason
    not tied to a sentence (``"id": null``, e.g. "the two paragraphs are not consistent"), or a second reason
    about a sentence that already has one; for each, ``alpha -= z`` and ``beta -= 1``, so ``Z`` is the mean
    mark of the judged sentences (unmarked sentences are left out of ``k``).

  When a sentence has several reasons, its verdict is its negative one (a sentence is consistent only if
  nothing said about it is negative). The other reasons are listed in ``details["other_reasons"]``.
* **batch_size** (with retrieval only): sentences whose snippet is the same text share a DCE call and AMC
  marks several reasons per call (:meth:`DcrVerifier.judge_snippets`); with the whole source DCE and AMC are
  already one call each, as in the paper.
* With another verifier (``-o verifier=NAME``), its labels are the marks: supported -> +1, unsupported or
  contradicted -> -1; an unscored verdict stays unscored.

Strict replies: a DCE reply is ``{"sentences": [{"id": <n or null>, "reason": "..."}], "is_consistent":
<bool>}`` (an id naming no sentence makes the reply unusable; echoed placeholders are not reasons); an AMC
reply is exactly ``{"marks": [...]}`` holding exactly one JSON integer 1 or -1 per reason. Sentences the
model gave no usable reason for, or whose reason could not be marked (AMC reply unusable; under
``amc="rule"`` a reason that states no verdict), are ``unscored`` verdicts with the reason; under
``amc_weights=paper`` the Report is then unscored, under ``auto`` the score is over the judged ones
(``subscores["judged"]``) and only a text with no judged sentence gives an unscored Report.

Audit: ``Report.calls`` holds every exchange. Calls made for one sentence only (retrieval mode) are also on
that sentence's ``Verdict.calls``; the joint DCE call and its AMC call are on ``Report.calls`` only.

The reason-assisted improver (RAI) is the ``improve`` method (:mod:`halluscope.methods.improve`), which
builds on this one.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.methods import register_method
from halluscope.methods.batching import (BatchStep, ask_batch, batch_reply_budget, chunked, gather_or_cancel,
                                         judge_in_batches)
from halluscope.methods.options import MAX_BATCH_SIZE, ClaimOptions, StageOptions
from halluscope.methods.pipeline import (ClaimPipeline, LLMVerifier, PipelineRun, best_verdict, claim_finding,
                                         messages_tokens,
                                         reply_budget)
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Finding, LLMCall, Report, Span, StepResult, Verdict
from halluscope.stages import Aggregate, Context, Decomposer, PromptResolver, Selection, register_stage, same_prompt
from halluscope.text import ParseError
from halluscope.text.placeholders import is_placeholder, shown_strings
from halluscope.text.verdict_words import verdict_mark

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

Level = Literal["sentence", "paragraph"]
AmcMode = Literal["llm", "rule"]
AmcWeights = Literal["paper", "auto"]

# ------------------------------------------------------------------------------------------------ replies


class SentenceReason(BaseModel):
    """One DCE reason: about the numbered sentence ``id``, or (``id`` null) about the text as a whole."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    id: int | None = Field(description="the number of the sentence the reason is about; null only for a "
                                       "remark about the TEXT as a whole")
    reason: str = Field(description="'Consistent:' or 'Inconsistent:', then why")


class DceReply(Reply):
    """Sentence-level DCE: one reason per numbered sentence, and the model's overall verdict (recorded, never
    used in the score)."""

    sentences: list[SentenceReason] = Field(description="one entry per numbered sentence, in order")
    is_consistent: bool = Field(description="true if every sentence is consistent, otherwise false")
    example: ClassVar[dict[str, Any] | None] = {
        "sentences": [
            {"id": 1, "reason": "Consistent: the SOURCE says the museum opened in 1998."},
            {"id": 2, "reason": 'Inconsistent: "in Lyon" is wrong; the SOURCE says the museum is in Paris.'}],
        "is_consistent": False}


class DceSingleReply(Reply):
    """Paragraph-level DCE, and one sentence against one source excerpt: one reason and the verdict."""

    reason: str = Field(description="starts with 'Consistent:' or 'Inconsistent:', then explains")
    is_consistent: bool = Field(description="true if it is consistent, otherwise false")


class DceExcerptEntry(DceSingleReply):
    """Batched excerpt DCE: the reason and verdict for the sentence numbered ``id``."""

    id: int = Field(ge=1, description="the number of the sentence")


class DceExcerptBatchReply(Reply):
    """Batched excerpt DCE (``batch_size`` > 1 with retrieval): one entry per numbered sentence, each judged on its
    own against the same excerpt (a bare list is read as ``results``)."""

    results: list[DceExcerptEntry] = Field(description="exactly one entry per sentence, in any order")
    example: ClassVar[dict[str, Any] | None] = {"results": [
        {"id": 1, "reason": "Consistent: the EXCERPT says the museum opened in 1998.", "is_consistent": True},
        {"id": 2, "reason": 'Inconsistent: "in Lyon" is wrong; the EXCERPT says Paris.', "is_consistent": False}]}
    bare_list_field: ClassVar[str | None] = "results"


Mark = Annotated[int, WithJsonSchema({"type": "integer", "enum": [1, -1]})]


class AmcReply(Reply):
    """AMC: exactly ``{"marks": [...]}``, each mark the JSON integer 1 or -1 (booleans, floats, strings and
    words are not marks; any other key makes the reply unusable). The count is checked by :func:`parse_amc`."""

    model_config = ConfigDict(extra="forbid")

    marks: list[Mark] = Field(description="one mark per assessment, in order: 1 if it finds the sentence "
                                          "consistent, -1 if it reports any problem")

    @field_validator("marks")
    @classmethod
    def _plus_or_minus_one(cls, marks: list[int]) -> list[int]:
        bad = [m for m in marks if m not in (1, -1)]
        if bad:
            raise ValueError(f"a mark must be 1 or -1, got {bad[0]}")
        return marks


REASON_ECHOES = shown_strings(DceReply) | shown_strings(DceSingleReply) | shown_strings(DceExcerptBatchReply)

# ------------------------------------------------------------------------------------------------ prompts

_SYSTEM = ("You are a meticulous fact-checker. You compare a text with the source document it is supposed to "
           "be based on, and you explain every judgment.")
_CHECK = ("work out every piece of information it states: who did what, to whom, when, where, how much or how "
          "many, why, and with what result")

DCE_SENTENCE_PROMPT = PromptTemplate(
    name="dcr_dce_sentence",
    version="2",
    reply=DceReply,
    system=_SYSTEM,
    user=(
        "Check, one sentence at a time, whether the TEXT is consistent with the SOURCE.\n\n"
        f"For each numbered sentence of the TEXT:\n- {_CHECK};\n"
        "- look for each piece in the SOURCE;\n"
        "- the sentence is consistent only if the SOURCE states or directly implies all of it. Anything the "
        "SOURCE contradicts, or that cannot be found in or inferred from the SOURCE, makes it inconsistent.\n"
        "The TEXT does not have to mention everything in the SOURCE: leaving things out is not an error.\n\n"
        'Give exactly one entry per sentence, in order, with the sentence\'s number as "id". Start each '
        "\"reason\" with 'Consistent:' or 'Inconsistent:', then explain; when inconsistent, quote the exact "
        "words of the sentence that the SOURCE does not support and say what the SOURCE says instead.\n\n"
        "$format\n\n"
        "SOURCE:\n$source\n\n"
        "TEXT, one numbered sentence per line:\n$sentences"
    ),
)

DCE_PARAGRAPH_PROMPT = PromptTemplate(
    name="dcr_dce_paragraph",
    version="2",
    reply=DceSingleReply,
    system=_SYSTEM,
    user=(
        "Check whether the TEXT as a whole is consistent with the SOURCE.\n\n"
        f"Work out every piece of information the TEXT states ({_CHECK.split(': ', 1)[1]}) and look for each "
        "in the SOURCE. The TEXT is consistent only if the SOURCE states or directly implies all of it; "
        "anything contradicted by the SOURCE, or not found in it, makes the TEXT inconsistent. Leaving things "
        "out is not an error.\n\n"
        "Start the \"reason\" with 'Consistent:' or 'Inconsistent:', then explain; quote the exact words of "
        "the TEXT that the SOURCE does not support.\n\n$format\n\n"
        "SOURCE:\n$source\n\nTEXT:\n$target"
    ),
)

DCE_EXCERPT_PROMPT = PromptTemplate(
    name="dcr_dce_excerpt",
    version="2",
    reply=DceSingleReply,
    system=_SYSTEM,
    user=(
        "Below is an EXCERPT of a long source document and one SENTENCE from a text that is supposed to be "
        "based on that document. Decide whether the EXCERPT supports the SENTENCE: the sentence is consistent "
        "only if the EXCERPT states or directly implies every piece of information in it (who, what, when, "
        "where, how much, why, result). Anything contradicted by the EXCERPT, or not found in it, makes the "
        "sentence inconsistent.\n\n"
        "Start the \"reason\" with 'Consistent:' or 'Inconsistent:', then explain.\n\n$format\n\n"
        "EXCERPT:\n$source\n\nSENTENCE:\n$sentence"
    ),
)

DCE_EXCERPT_BATCH_PROMPT = PromptTemplate(
    name="dcr_dce_excerpt_batch",
    version="1",
    reply=DceExcerptBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=(
        "Below is an EXCERPT of a long source document and numbered SENTENCES from a text that is supposed "
        "to be based on that document. For each sentence on its own, decide whether the EXCERPT supports it: a "
        "sentence is consistent only if the EXCERPT states or directly implies every piece of information in it "
        "(who, what, when, where, how much, why, result). Anything contradicted by the EXCERPT, or not found in "
        "it, makes the sentence inconsistent. The other sentences are not evidence.\n\n"
        "Give exactly one entry per sentence, with its number as \"id\". Start each \"reason\" with "
        "'Consistent:' or 'Inconsistent:', then explain.\n\n$format\n\n"
        "EXCERPT:\n$source\n\nThere are $count SENTENCES.\n\nSENTENCES:\n$sentences"
    ),
)

AMC_PROMPT = PromptTemplate(
    name="dcr_amc",
    version="2",
    reply=AmcReply,
    literal=("count",),
    system="You read reviewers' assessments and classify what they conclude.",
    user=(
        "A reviewer compared a text with its source document and wrote the numbered assessments below, each "
        "about one sentence of the text (or about the text as a whole).\n"
        "For each assessment, decide what it concludes:\n"
        "- 1 if it finds the sentence consistent with the source (everything in it is supported);\n"
        "- -1 if it reports any problem: information that is wrong, contradicted, unsupported, not mentioned "
        "in the source, or unclear.\n\n"
        "$format\n\n"
        'There are $count assessments, so "marks" must hold exactly $count marks, in order, each the number 1 '
        "or -1.\n\n"
        "ASSESSMENTS:\n$reasons"
    ),
)

DCR_PROMPTS = (DCE_SENTENCE_PROMPT, DCE_PARAGRAPH_PROMPT, DCE_EXCERPT_PROMPT, DCE_EXCERPT_BATCH_PROMPT, AMC_PROMPT)
DCE_REPLY_TOKENS = 1024  # room kept for the DCE reply when checking that a prompt fits the context

# ------------------------------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class DceReason:
    """One reason of a DCE reply. ``unit`` (0-based) is None when it is not about one unit."""

    text: str
    unit: int | None


@dataclass(frozen=True)
class DceJudgment:
    """A parsed DCE reply: its usable reasons and the model's overall verdict."""

    reasons: list[DceReason]
    is_consistent: bool


def _stated_reason(text: str) -> str | None:
    """The reason as written, or None when it is empty, a placeholder or the prompt's own example."""
    reason = text.strip()
    return None if is_placeholder(reason, REASON_ECHOES) else reason


def parse_dce_sentences(text: str, count: int) -> DceJudgment:
    """The reasons of a sentence-level DCE reply about ``count`` numbered sentences. Entries whose reason is
    a placeholder are dropped. Raises ParseError when the reply is not the declared schema, names a sentence
    that does not exist, or has no usable reason."""
    reply = DceReply.parse(text)
    reasons: list[DceReason] = []
    for entry in reply.sentences:
        if entry.id is not None and not 1 <= entry.id <= count:
            raise ParseError(f"a reason names sentence {entry.id}; the TEXT has {count} sentence(s)")
        reason = _stated_reason(entry.reason)
        if reason is not None:
            reasons.append(DceReason(reason, None if entry.id is None else entry.id - 1))
    if not reasons:
        raise ParseError("the reply gives no reason" if not reply.sentences else
                         "the reply's reasons are only placeholders or the prompt's example")
    return DceJudgment(reasons, reply.is_consistent)


def parse_dce_single(text: str) -> DceJudgment:
    """The one reason of a paragraph-level (or one-sentence) DCE reply."""
    reply = DceSingleReply.parse(text)
    reason = _stated_reason(reply.reason)
    if reason is None:
        raise ParseError("the reason is empty, a placeholder or the prompt's example")
    return DceJudgment([DceReason(reason, 0)], reply.is_consistent)


def parse_amc(text: str, count: int) -> list[int]:
    """Exactly ``count`` marks from ``{"marks": [...]}`` (see :class:`AmcReply`)."""
    marks = AmcReply.parse(text).marks
    if len(marks) != count:
        raise ParseError(f"expected {count} marks, got {len(marks)}")
    return list(marks)


def number_claims(claims: Sequence[Claim]) -> str:
    return "\n".join(f"[{i}] {' '.join(c.text.split())}" for i, c in enumerate(claims, 1))


# ------------------------------------------------------------------------------------------------ arithmetic


@dataclass(frozen=True)
class AmcScore:
    """Eq. 3 of seed 001. ``marks`` are all k marked reasons; ``sentence_level[i]`` says whether reason i
    counts (is the one reason kept for exactly one sentence)."""

    marks: tuple[int, ...]
    sentence_level: tuple[bool, ...]
    alpha: float
    beta: float
    z: float | None  # Z in [-1, 1]; None when no reason is sentence-level (k + beta = 0)
    score: float | None  # (Z + 1) / 2

    @property
    def k(self) -> int:
        return len(self.marks)


def amc_score(marks: list[int] | tuple[int, ...], sentence_level: list[bool] | tuple[bool, ...]) -> AmcScore:
    """``Z = (sum z + alpha) / (k + beta)`` with ``alpha = -sum(z of excluded)``, ``beta = -#excluded``.

    Seed 001 App. I: marks [-1, +1, -1] where the first reason is paragraph-level -> alpha = 1, beta = -1,
    Z = (-1 + 1) / 2 = 0, score 0.5."""
    if len(marks) != len(sentence_level):
        raise ValueError(f"{len(marks)} marks but {len(sentence_level)} sentence-level flags")
    if any(m not in (1, -1) for m in marks):
        raise ValueError("marks must be +1 or -1")
    alpha = float(-sum(m for m, s in zip(marks, sentence_level) if not s))
    beta = float(-sum(1 for s in sentence_level if not s))
    denominator = len(marks) + beta
    if denominator == 0:
        return AmcScore(tuple(marks), tuple(sentence_level), alpha, beta, None, None)
    z = (sum(marks) + alpha) / denominator
    return AmcScore(tuple(marks), tuple(sentence_level), alpha, beta, z, (z + 1) / 2)


LABEL_MARKS: dict[str, int] = {"supported": 1, "unsupported": -1, "contradicted": -1}
"""A verdict's mark in Z (any verifier's labels); unscored verdicts have none."""

# ------------------------------------------------------------------------------------------------ AMC


@dataclass
class AmcMarks:
    """AMC's output: per reason a mark (+1/-1) or None with the error, and the calls made."""

    marks: list[int | None]
    errors: list[str | None]
    calls: list[LLMCall] = field(default_factory=list)


class AutoMetricConverter:
    """AMC (seed 001 §3.2): reasons -> +1/-1. ``llm``: one call that reads only the reasons (the paper's
    design); an unusable reply leaves every reason unmarked with the error. ``rule``: the verdict each reason
    states in words (:func:`verdict_mark`), no call; a reason that states none is unmarked."""

    def __init__(self, llm: "LLM", mode: AmcMode = "llm", prompt: PromptTemplate = AMC_PROMPT):
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
        step = await generate_reply(self.llm, self.prompt.render(reasons=numbered, count=n), AmcReply,
                                    parse=lambda text: parse_amc(text, n))  # type: ignore[arg-type, return-value]
        if step.value is None:
            error = f"AMC failed: {step.error}"
            return AmcMarks([None] * n, [error] * n, step.calls)
        return AmcMarks(list(step.value), [None] * n, step.calls)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ verifier


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
    """What DCE said beyond one verdict per unit during one DCR run: read by :meth:`DCR.aggregate`."""

    other_reasons: list[OtherReason] = field(default_factory=list)
    is_consistent: bool | None = None
    unmarked_reasons: list[str] = field(default_factory=list)  # DCE reasons AMC could not mark (any unit or none)


_NOTES: contextvars.ContextVar[DceNotes | None] = contextvars.ContextVar("dce_notes", default=None)


@contextmanager
def recording_notes() -> Iterator[DceNotes]:
    """Collect the DCE notes of the verifier calls made inside (one DCR run; nested runs keep their own)."""
    notes = DceNotes()
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


NO_REASON = "the evaluator gave no reason for this sentence"


def assign_reasons(claims: Sequence[Claim], reasons: Sequence[DceReason], amc: AmcMarks,
                   calls: Sequence[LLMCall] = ()) -> tuple[list[Verdict], list[OtherReason]]:
    """One verdict per claim from its marked reasons: its negative one when it has several (a unit is
    consistent only if nothing said about it is negative), else its only one. Every other marked reason --
    not about one unit, or a further reason about a unit -- is returned for alpha/beta (App. I)."""
    marked = [(r, m) for r, m in zip(reasons, amc.marks) if m is not None]
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
            verdicts.append(Verdict(claim=claim, label="supported" if mark == 1 else "unsupported",
                                    reason=reason.text, score=float(mark), calls=list(calls)))
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
    call of its own. AMC per :class:`AutoMetricConverter` (option ``amc``). Reasons that are not about one
    claim go to the running DCR's notes (other methods ignore them)."""

    reply_tokens = DCE_REPLY_TOKENS

    class Options(StageOptions):
        amc: AmcMode = "llm"
        """How reasons become +1/-1: llm (a call that reads only the reasons, the paper's AMC) or rule (the verdict words each reason states; no extra call)."""

    def __init__(self, model: "LLM", options: "DcrVerifier.Options | None" = None, *,
                 prompts: PromptResolver = same_prompt):
        super().__init__(model, options, prompts=prompts)
        self.amc_mode: AmcMode = self.options.amc
        self.sentence_prompt = prompts(DCE_SENTENCE_PROMPT)
        self.paragraph_prompt = prompts(DCE_PARAGRAPH_PROMPT)
        self.excerpt_prompt = prompts(DCE_EXCERPT_PROMPT)
        self.excerpt_batch_prompt = prompts(DCE_EXCERPT_BATCH_PROMPT)
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
            step: StepResult[Any] = await generate_reply(self.llm, messages, DceSingleReply,
                                                         parse=parse_dce_single)  # type: ignore[arg-type]
        else:
            n = len(claims)
            step = await generate_reply(self.llm, messages, DceReply,
                                        parse=lambda text: parse_dce_sentences(text, n))  # type: ignore[arg-type, return-value]
        if step.value is None:
            return [Verdict.unscored(c, f"DCE reply unusable: {step.error}") for c in claims]
        judgment: DceJudgment = step.value
        amc = await self.amc([r.text for r in judgment.reasons])
        verdicts, others = assign_reasons(claims, judgment.reasons, amc)
        notes = _NOTES.get()
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
    async def judge_snippets(self, claims: Sequence[Claim], selection: Selection, size: int
                             ) -> tuple[list[Verdict], dict[str, Any]]:
        """The shared retrieval protocol (best snippet first, stop at the first supporting one, best verdict per
        sentence), run in rounds so that calls can be shared: in each round every sentence still open is judged
        against its next snippet; sentences whose snippet is the *same text* are judged together in DCE calls of
        up to ``size`` sentences, and AMC marks up to ``size`` reasons per call. Per sentence and snippet the
        judgment is the one :meth:`judge_excerpt` would make; only the number of calls changes."""
        snippets = {c.id: list(selection.contexts.get(c.id or "", [])) for c in claims}
        tried: dict[str | None, list[tuple[Context, Verdict]]] = {c.id: [] for c in claims}
        open_claims = [c for c in claims if snippets[c.id]]
        while open_claims:
            pairs = [(c, snippets[c.id][len(tried[c.id])]) for c in open_claims]
            verdicts = await self.judge_excerpts(pairs, size)
            still_open = []
            for (claim, ctx), verdict in zip(pairs, verdicts):
                tried[claim.id].append((ctx, verdict))
                if verdict.label != "supported" and len(tried[claim.id]) < len(snippets[claim.id]):
                    still_open.append(claim)
            open_claims = still_open
        trace = {c.id: [{"rank": ctx.rank, "label": v.label} for ctx, v in tried[c.id]] for c in claims}
        return [best_verdict(c, tried[c.id]) for c in claims], {"per_snippet": trace}

    async def judge_excerpts(self, pairs: Sequence[tuple[Claim, Context]], size: int) -> list[Verdict]:
        """One verdict per (sentence, snippet) pair: DCE batched by identical snippet text, then AMC batched."""
        results: list[_ExcerptDce | None] = [None] * len(pairs)
        groups: dict[str, list[int]] = {}
        for i, (claim, ctx) in enumerate(pairs):
            if is_placeholder(claim.text):
                results[i] = _ExcerptDce(error=f"the claim {claim.text[:40]!r} is a template placeholder, not a "
                                               "claim", placeholder=True)
            else:
                groups.setdefault(ctx.text, []).append(i)

        async def group(indices: list[int]) -> None:
            ctx = pairs[indices[0]][1]
            done = await judge_in_batches(
                [pairs[i][0] for i in indices], size,
                ask=lambda part: self.ask_excerpt_batch(part, ctx),
                accept=lambda claim, entry, calls: _ExcerptDce(reason=entry.reason, calls=list(calls)),
                alone=lambda claim: self.excerpt_dce(claim, ctx),
                redone=lambda result, why, calls: result.after_batch(why, calls))
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

    async def excerpt_dce(self, claim: Claim, ctx: Context) -> "_ExcerptDce":
        """DCE of one sentence against one snippet (the unbatched path, as in :meth:`judge_excerpt`)."""
        step = await generate_reply(self.llm, self.excerpt_prompt.render(source=ctx.text, sentence=claim.text),
                                    DceSingleReply, parse=parse_dce_single)  # type: ignore[arg-type]
        if step.value is None:
            return _ExcerptDce(error=step.error, calls=list(step.calls))
        judgment: DceJudgment = step.value  # type: ignore[assignment]
        return _ExcerptDce(reason=judgment.reasons[0].text, calls=list(step.calls))

    async def ask_excerpt_batch(self, claims: list[Claim], ctx: Context) -> BatchStep:
        n = len(claims)
        messages = self.excerpt_batch_prompt.render(source=ctx.text, sentences=number_claims(claims), count=n)
        params = self.llm.params(max_tokens=batch_reply_budget(self.llm, self.reply_tokens, n))
        return await ask_batch(self.llm, messages, DceExcerptBatchReply, DceExcerptEntry, n,  # type: ignore[arg-type]
                               params=params, unit="sentence", check=_check_stated_reason)

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
                return [AmcMarks([m], [e], list(marked.calls)) for m, e in zip(marked.marks, marked.errors)]
            alone = await gather_or_cancel(self.amc([r]) for r in part)
            why = marked.errors[0] or "no marks"
            return [AmcMarks(a.marks, [None if e is None else f"batch: {why}; alone: {e}" for e in a.errors],
                             list(marked.calls) + list(a.calls)) for a in alone]

        parts = await gather_or_cancel(chunk(p) for p in chunked(list(reasons), max(1, size)))
        return [m for part in parts for m in part]


@dataclass
class _ExcerptDce:
    """DCE's reason for one sentence against one snippet, or why there is none, and the calls made."""

    reason: str | None = None
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)
    placeholder: bool = False

    def after_batch(self, why: str, batch_calls: Sequence[LLMCall]) -> "_ExcerptDce":
        error = None if self.reason is not None else f"batch: {why}; alone: {self.error}"
        return _ExcerptDce(self.reason, error, list(batch_calls) + self.calls)


def _check_stated_reason(entry: DceExcerptEntry) -> None:
    if _stated_reason(entry.reason) is None:
        raise ParseError("the reason is empty, a placeholder or the prompt's example")


# ------------------------------------------------------------------------------------------------ method


class DcrOptions(ClaimOptions):
    """DCR's own settings on top of the shared retrieval protocol and swappable verifier."""

    level: Level = "sentence"
    """sentence: each target sentence judged with its own reason (the paper's DCE); paragraph: the whole target at once (needs the whole source)."""

    amc: AmcMode = "llm"
    """How reasons become +1/-1: llm (a call that reads only the reasons, the paper's AMC) or rule (the verdict words each reason states; no extra call)."""

    amc_weights: AmcWeights = "paper"
    """alpha and beta of Eq. 3. paper: alpha = beta = 0, Z over every marked reason (the paper's experiments); a sentence without a mark makes the Report unscored. auto: App. I, reasons not about exactly one sentence are taken out and unmarked sentences are left out (Z over the judged sentences)."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """With retrieval: sentences whose snippet is the same text share a DCE call, and AMC marks this many reasons per call (1 = one DCE and one AMC call per sentence and snippet). With the whole source DCE and AMC already take every sentence in one call each (the paper)."""


@register_stage("paragraph", "decomposer")
class ParagraphDecomposer:
    """The whole target as one claim of kind paragraph (no LLM call): DCR's paragraph level."""

    name: str
    uses_llm: ClassVar[bool] = False

    def __init__(self, model: Any = None, options: StageOptions | None = None):
        pass

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        text = target.strip()
        if not text:
            return StepResult.success([])
        start = len(target) - len(target.lstrip())
        return StepResult.success([Claim(text=text, kind="paragraph", id="s1",
                                         target_spans=[Span(start=start, end=start + len(text))])])


@register_method
class DCR(ClaimPipeline):
    name = "dcr"
    description = ("Divide-Conquer-Reasoning: judge each target sentence against the source with a reason (DCE), "
                   "map reasons to +1/-1 (AMC), score (Z+1)/2. RAI rewriting is the `improve` method.")
    Options: ClassVar[type[DcrOptions]] = DcrOptions
    opts: DcrOptions
    prompts = DCR_PROMPTS
    default_threshold = 1.0
    default_verifier = "dcr"

    def make_decomposer(self) -> Decomposer:
        return self.build_stage("decomposer", "paragraph" if self.opts.level == "paragraph" else "sentences")  # type: ignore[no-any-return]

    def used_prompts(self) -> list[PromptTemplate]:
        if not isinstance(self.verifier, DcrVerifier):
            extra = getattr(self.verifier, "used_prompts", None)
            return list(extra()) if callable(extra) else []
        if self.opts.level == "paragraph":
            dce = [DCE_PARAGRAPH_PROMPT]
        else:
            dce = {"always": [DCE_EXCERPT_PROMPT], "never": [DCE_SENTENCE_PROMPT]}.get(
                self.opts.retrieval, [DCE_SENTENCE_PROMPT, DCE_EXCERPT_PROMPT])
        if self.opts.batch_size > 1 and DCE_EXCERPT_PROMPT in dce:
            dce.append(DCE_EXCERPT_BATCH_PROMPT)
        amc = [AMC_PROMPT] if self.opts.amc == "llm" else []
        return [self.prompt(t) for t in dce + amc]

    async def run(self, source: str, target: str) -> Report:
        with recording_notes():
            return await super().run(source, target)

    async def verify(self, claims: list[Claim], selection: Selection, source: str) -> tuple[list[Verdict], dict]:
        if self.opts.level == "paragraph" and selection.mode == "retrieval":
            why = (f"paragraph-level DCR needs the whole source in one prompt, but {selection.why}; use "
                   "level=sentence, which works on long sources through retrieval")
            return [Verdict.unscored(c, why) for c in claims], {}
        verifier = self.verifier
        if selection.mode == "retrieval" and self.opts.batch_size > 1 and isinstance(verifier, DcrVerifier):
            return await verifier.judge_snippets(claims, selection, self.opts.batch_size)
        return await super().verify(claims, selection, source)

    async def aggregate(self, run: PipelineRun) -> Aggregate:
        """Eq. 3 with ``amc_weights``: ``paper`` (alpha = beta = 0 over every marked reason; any sentence or reason
        without a mark leaves the Report unscored) or ``auto`` (App. I: only the judged sentences' kept reasons
        count, the other reasons are taken out by alpha and beta)."""
        notes = _NOTES.get() or DceNotes()
        judged = [v for v in run.verdicts if v.label in LABEL_MARKS]
        others = notes.other_reasons
        run.details["other_reasons"] = [o.record() for o in others]
        run.details["amc_weights"] = self.opts.amc_weights
        if notes.is_consistent is not None:
            run.details["dce_is_consistent"] = notes.is_consistent
        subscores: dict[str, float | None] = {"units": float(len(run.verdicts)), "judged": float(len(judged))}
        if self.opts.amc_weights == "paper":
            return _paper_aggregate(run.verdicts, judged, others, notes.unmarked_reasons, subscores)
        marks = [LABEL_MARKS[v.label] for v in judged] + [o.mark for o in others]
        amc = amc_score(marks, [True] * len(judged) + [False] * len(others)) if marks else None
        if amc is not None:
            subscores.update({"Z": amc.z, "alpha": amc.alpha, "beta": amc.beta, "k": float(amc.k)})
        if amc is None or amc.score is None:
            return Aggregate(None, subscores, f"no sentence received a usable judgment ({_why_none(run.verdicts, others)})")
        return Aggregate(amc.score, subscores)

    async def localize(self, run: PipelineRun) -> list[Finding]:
        """One finding per unit judged inconsistent; with DCR's own verifier its description is DCE's reason."""
        own = isinstance(self.verifier, DcrVerifier)
        return [dcr_finding(v) if own else claim_finding(v)
                for v in run.verdicts if v.label in ("unsupported", "contradicted")]


def _paper_aggregate(verdicts: Sequence[Verdict], judged: Sequence[Verdict], others: Sequence[OtherReason],
                     unmarked: Sequence[str], subscores: dict[str, float | None]) -> Aggregate:
    """Eq. 3 as the paper's experiments ran it: alpha = beta = 0, so Z is the mean of every mark AMC gave --
    one per sentence, plus any reason not about exactly one sentence. Z needs every one of them: a sentence
    (or reason) without a mark is neither dropped (which would shrink k) nor guessed, so the Report is
    unscored, saying which."""
    missing = [(i, v) for i, v in enumerate(verdicts) if v.label not in LABEL_MARKS]
    subscores["unscored_units"] = float(len(missing))
    if missing or unmarked:
        if missing:
            i, first = missing[0]
            what = f"{len(missing)} of {len(verdicts)} sentences have no mark (sentence {i + 1}: {first.reason})"
        else:
            what = f"{len(unmarked)} DCE reason(s) could not be marked ({unmarked[0][:80]!r})"
        return Aggregate(None, subscores, f"{what}; with alpha = beta = 0 (amc_weights=paper) Z averages over all "
                                          "sentences, so none can be left out or guessed; amc_weights=auto scores "
                                          "the judged sentences only"[:1000])
    marks = [LABEL_MARKS[v.label] for v in judged] + [o.mark for o in others]
    amc = amc_score(marks, [True] * len(marks))
    subscores.update({"Z": amc.z, "alpha": amc.alpha, "beta": amc.beta, "k": float(amc.k)})
    if amc.score is None:
        return Aggregate(None, subscores, "no sentence received a usable judgment (no units)")
    return Aggregate(amc.score, subscores)


def _why_none(verdicts: Sequence[Verdict], others: Sequence[OtherReason]) -> str:
    specific = [v.reason for v in verdicts if v.label == "unscored" and v.reason != NO_REASON]
    if specific:
        return specific[0]
    if others:
        return "only reasons not about a single sentence"
    return verdicts[0].reason if verdicts else "no units"


def dcr_finding(verdict: Verdict) -> Finding:
    claim = verdict.claim
    return Finding(description=verdict.reason, kind="inconsistent", target_spans=list(claim.target_spans),
                   evidence=list(verdict.evidence), claim_ids=[claim.id] if claim.id else [])

