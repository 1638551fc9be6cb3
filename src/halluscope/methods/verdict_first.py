"""Verdict-first scoring, the ``verdict_first`` verifier stage (``-o order=verdict_first`` on any claim method makes it
the method's own verifier; ``-o verifier=verdict_first`` chooses it like any other): score every claim by one short
reply, explain only what is flagged.

The papers' verifiers write their reasoning before the label (reason first), so every verdict costs a reply of
tens of tokens generated one at a time. Here each claim is scored by one constrained reply: the prompt (source
first, the claim last, so calls about one source share their prefix) asks for one word, ``yes`` or ``no``, with
``max_tokens`` of 2 -- one forward pass over the prompt and one or two generated tokens. The claim's
P(supported) is read from the token probabilities at that word (:mod:`halluscope.llm.label_probs`): yes over
yes + no. A claim whose P(supported) is below ``explain_below`` (or, where the backend gives no probabilities,
whose answer is no) is flagged, and only those get a second call that asks for the reason, the shortest source
quote that decides it, whether the source contradicts it, and a corrected version of the claim (the fix).

A fix is shown only after it is re-verified (``verify_fix``, on by default): the explanation's fix and the flagged
text without the clause or conjunct holding the most words the source never uses
(:func:`~halluscope.text.clauses.without_unsupported_part`, no LLM call) are each scored by the same short reply
against the same context as the claim. The best one answered yes with P(supported) (where known) at least
``explain_below``, differing from the claim and free of prompt markup, is the verdict's ``fix``
(``fix_verified``, ``fix_probability``); every scored candidate stays in ``fix_candidates``, the rejected ones
unverified, and with none passing ``fix`` is None and ``fix_rejected`` says "no verified fix".

The relation is read from probabilities too (``relation_candidates``): the claim's closest source sentences
(:func:`~halluscope.text.passages.closest_sentences`) and the explanation's quote where the source holds it verbatim
are each asked "does this passage contradict the claim?" by one short reply; the claim is contradicted only when the
highest P(contradicts) reaches 0.5, that passage its evidence (``contradicts``), else it is unsupported and not
mentioned (``evidence_relation``), the closest passage shown as related context. A quote the source does not hold
is then never evidence.

The failing fact is the span (``fact_max``, :mod:`halluscope.methods.verdict_facts`): a flagged sentence of two or
more clauses is split into atomic facts (the ``fact_decomposer`` stage, else its clauses), each scored by the same
short reply against the same context; the one with the lowest P(supported) below ``explain_below`` is the verdict's
``target_spans`` where it is located in the target, and what the relation's passages, the removal fix and the reason
are chosen for. The reason is written from the chosen evidence (``reason_from_evidence``,
:mod:`halluscope.methods.verdict_reason`): one short reply from the failing fact and the chosen passage only, shown
when it agrees with the relation, else a plain reason quoting the passage.

The label is the short reply's (``yes`` supported, ``no`` unsupported, contradicted when a source passage is likely
to contradict it, see above), read from its first word only; P(supported) is read at that word's token only. An
answer that is neither word is read from the probabilities when the backend gave them and the yes/no tokens hold at
least ``min_label_mass`` of the probability there, and is otherwise unscored with the reply quoted;
log-probabilities that are not probabilities (NaN, infinite, above 0) leave the claim unscored; an answer the
probability contradicts keeps its label and records no probability (the reason gives both). With retrieval each
claim is scored against its snippets, best first, keeping the best (the same max over snippets as reason first) and
explained against its top snippet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from halluscope.llm.label_probs import MIN_LABEL_MASS, VERDICT_TOP_LOGPROBS, YES_NO, read_answer, stated_first
from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.methods.verdict_facts import CLAUSES, SplitFacts, split_facts, splittable
from halluscope.methods.verdict_reason import VERDICT_REASON_PROMPT, evidence_reason
from halluscope.options import StageOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Evidence, FixCandidate, LLMCall, Span, Verdict
from halluscope.stages import Context, PromptResolver, Selection, build_stage, register_stage, same_prompt, stage_spec
from halluscope.stages.context import claim_id
from halluscope.stages.snippets import max_over_snippets
from halluscope.stages.verifiers import messages_tokens, reply_budget
from halluscope.text.clauses import without_part_at, without_unsupported_part
from halluscope.text.markup import fix_problem
from halluscope.text.passages import closest_sentences
from halluscope.text.placeholders import is_placeholder
from halluscope.text.spans import locate

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

SCORE_REPLY_TOKENS = 2
"""The short reply's budget: the answer word (and whatever one token follows it)."""

EXPLAIN_REPLY_TOKENS = 256


class ExplainReply(Reply):
    """Why a flagged claim is not supported, the source passage that decides it, and the claim corrected."""

    reason: str = Field(
        description="one or two sentences: what the CLAIM says that the SOURCE does not support, "
        "and what the SOURCE says instead"
    )
    evidence: str = Field(
        description="the shortest exact quote from the SOURCE that shows it, or an empty string "
        "when the SOURCE says nothing about it"
    )
    contradicted: bool = Field(
        description="true if the SOURCE says something incompatible with the CLAIM; false "
        "if it only does not mention it"
    )
    fix: str = Field(
        description="the CLAIM rewritten so that the SOURCE supports it (keep what is right, correct "
        "or drop what is wrong), or an empty string when it cannot be fixed"
    )


VERDICT_SCORE_PROMPT = PromptTemplate(
    name="verdict_first_score",
    version="1",
    system="You are a careful fact-checker. You judge statements only against the source text you are given.",
    user=(
        "Read the SOURCE, then decide whether the CLAIM after it is supported by the SOURCE: the SOURCE states it "
        "or clearly implies it. A claim the SOURCE contradicts or does not mention is not supported.\n\n"
        "SOURCE:\n$source\n\nCLAIM:\n$claim\n\n"
        "Is the CLAIM supported by the SOURCE? Answer with one word: yes or no."
    ),
)

VERDICT_EXPLAIN_PROMPT = PromptTemplate(
    name="verdict_first_explain",
    version="1",
    reply=ExplainReply,
    system=VERDICT_SCORE_PROMPT.system,
    user=(
        "The CLAIM below was judged not supported by the SOURCE. Explain why, quote the SOURCE passage that "
        "shows it, and correct the claim.\n\n$format\n\nSOURCE:\n$source\n\nCLAIM:\n$claim"
    ),
)

VERDICT_CONTRADICTS_PROMPT = PromptTemplate(
    name="verdict_first_contradicts",
    version="1",
    system=VERDICT_SCORE_PROMPT.system,
    user=(
        "Read the PASSAGE taken from a source text, then decide whether it contradicts the CLAIM after it: the "
        "PASSAGE says something that cannot be true together with the CLAIM. A passage that agrees with the CLAIM, "
        "or says nothing about what the CLAIM states, does not contradict it.\n\n"
        "PASSAGE:\n$passage\n\nCLAIM:\n$claim\n\n"
        "Does the PASSAGE contradict the CLAIM? Answer with one word: yes or no."
    ),
)

CONTRADICTS_AT = 0.5
"""A passage whose P(contradicts) reaches this is the contradicting evidence."""

VERDICT_FIRST_PROMPTS = (
    VERDICT_SCORE_PROMPT,
    VERDICT_EXPLAIN_PROMPT,
    VERDICT_CONTRADICTS_PROMPT,
    VERDICT_REASON_PROMPT,
)


def stated_answer(text: str) -> bool | None:
    """True for a reply that answers yes, False for no (any case), None otherwise: the first word, standing alone
    or followed by punctuation ("Yes.", "No, ..."), not the start of a phrase ("No problem!", "Yes it might")."""
    return stated_first(text, *YES_NO)


def answer_verdict(
    claim: Claim, text: str, logprobs: Sequence[Any] | None, call: LLMCall, min_label_mass: float = MIN_LABEL_MASS
) -> Verdict:
    """The verdict of a short yes/no reply (:func:`~halluscope.llm.label_probs.read_answer`): the answer word
    decides the label; P(supported) is read at that word's token only; refused log-probabilities, and a reply
    that answers neither where the labels hold too little of the probability, leave the claim unscored."""
    answer = read_answer(text, logprobs, *YES_NO, min_mass=min_label_mass)
    if answer.label is None:
        return Verdict.unscored(claim, answer.unscored or "no answer", [call])
    if answer.stated is None:
        reason = answer.note
    else:
        reason = "answered yes" if answer.stated else "answered no"
        if answer.probability is not None:
            reason += f" (P(supported) = {answer.probability:.3f})"
        elif answer.note:
            reason += f" ({answer.note})"
    return Verdict(
        claim=claim,
        label="supported" if answer.label else "unsupported",
        reason=reason,
        score=1.0 if answer.label else 0.0,
        support_probability=answer.probability,
        calls=[call],
        decided_by="verdict_first",
    )


@register_stage(
    "verdict_first",
    "verifier",
    "each claim scored by one short yes/no reply (P(supported) from its token probabilities); a reason, a "
    "source quote and a fix asked only for the claims it flags (order=verdict_first chooses it)",
)
class VerdictFirst:
    """The verdict-first verifier: scores claims by one short reply each and explains the flagged ones (see the
    module docstring). A stage like any other verifier (``-o verifier=verdict_first``, or ``order=verdict_first``,
    which makes it the method's own verifier); it takes the whole selection (:meth:`verify_selection`) so the
    flagged claims are explained against their best snippet once the max over snippets is known."""

    name = "verdict_first"
    uses_llm: ClassVar[bool] = True

    class Options(StageOptions):
        explain_below: float = Field(default=0.5, ge=0.0, le=1.0)
        """A claim whose P(supported) is below this (or, without a probability, whose answer is no) is flagged and
        explained."""

        explain: bool = True
        """Ask for the reason, the source quote and a fix of each flagged claim (false: score only)."""

        explain_max: int | None = Field(default=None, ge=0)
        """Explain at most this many flagged claims, the lowest P(supported) first; null: every flagged claim."""

        min_label_mass: float = Field(default=MIN_LABEL_MASS, ge=0.0, le=1.0)
        """A reply whose first word is neither yes nor no is scored only when yes and no hold at least this share
        of the probability at its first token; else the claim is unscored."""

        relation_candidates: int = Field(default=2, ge=0, le=8)
        """The relation of a flagged claim is read from probabilities: its ``relation_candidates`` closest source
        sentences (and the explanation's quote where the source holds it verbatim) are each asked "does this
        passage contradict the claim?" by one short reply; contradicted when the best reaches P(contradicts) 0.5
        (that passage is the evidence), else unsupported and not mentioned (the closest passage as related
        context). 0: the explanation's own ``contradicted`` and quote, unchecked."""

        verify_fix: bool = True
        """Show a fix only after it is re-verified: each candidate (the explanation's fix, and the flagged text
        without the part holding words the source never uses) is scored like a claim against the same context, one
        short reply each; the best that reaches ``explain_below`` is shown (false: the explanation's fix as it
        comes, unchecked)."""

        fact_max: int = Field(default=3, ge=0, le=8)
        """Find the failing fact of a flagged sentence: a sentence with at least two clauses or conjuncts is split
        into atomic facts (``fact_decomposer``) and at most ``fact_max`` of them are scored by one short reply each;
        the one with the lowest P(supported) below ``explain_below`` is the finding's span (where it is located in
        the target) and what the evidence and the reason are chosen for. Extra calls per such flagged sentence: the
        decomposition (one, and one repair request when its reply is unusable) and ``fact_max`` short replies at
        most; a sentence of one clause costs none. 0: the whole sentence is the span, no extra call."""

        fact_decomposer: str = "factscore"
        """The decomposer stage that splits a flagged sentence into atomic facts (``factscore``: one call with its own
        prompt); ``clauses``, a stage that calls no LLM, or a decomposition that fails or finds fewer than two facts:
        the sentence's clauses and conjuncts are its facts (no call)."""

        reason_from_evidence: bool = True
        """Write the reason from the chosen evidence: once the passage and its relation are read from probabilities,
        one short reply from the failing fact and that passage only names what the source says instead; a reply that
        disagrees with the relation, is empty or holds markup gives way to a plain reason quoting the passage. false:
        the explanation's own reason."""

    def __init__(
        self,
        model: LLM,
        options: StageOptions | None = None,
        *,
        prompts: PromptResolver = same_prompt,
    ):
        if model is None:
            raise TypeError("verdict-first scoring needs an LLM")
        opts = options if isinstance(options, VerdictFirst.Options) else VerdictFirst.Options()
        self.llm = model
        self.options = opts
        self.score_prompt = prompts(VERDICT_SCORE_PROMPT)
        self.explain_prompt = prompts(VERDICT_EXPLAIN_PROMPT)
        self.explain_below = opts.explain_below
        self.explain_flagged = opts.explain
        self.explain_max = opts.explain_max
        self.min_label_mass = opts.min_label_mass
        self.verify_fix = opts.verify_fix
        self.relation_candidates = opts.relation_candidates
        self.contradicts_prompt = prompts(VERDICT_CONTRADICTS_PROMPT)
        self.reason_prompt = prompts(VERDICT_REASON_PROMPT)
        self.reason_from_evidence = opts.reason_from_evidence
        self.fact_max = opts.fact_max
        self.fact_decomposer = opts.fact_decomposer
        if self.fact_decomposer != CLAUSES:
            stage_spec("decomposer", self.fact_decomposer)  # a bad name fails here, not at the first flagged claim
        self._prompts = prompts
        self._decomposer: Any = None

    def used_prompts(self) -> list[PromptTemplate]:
        relation = [self.contradicts_prompt] if self.explain_flagged and self.relation_candidates else []
        if relation and self.reason_from_evidence:
            relation.append(self.reason_prompt)
        split = getattr(self.decomposer(), "prompt", None) if self.explain_flagged and self.fact_max else None
        facts = [split] if isinstance(split, PromptTemplate) else []
        return [self.score_prompt] + ([self.explain_prompt] if self.explain_flagged else []) + relation + facts

    def decomposer(self) -> Any:
        """The stage that splits a flagged sentence into facts (built once), or None for the clause cut: with
        ``fact_decomposer=clauses`` or a decomposer that calls no LLM."""
        if self.fact_decomposer == CLAUSES or not getattr(
            stage_spec("decomposer", self.fact_decomposer).factory, "uses_llm", True
        ):
            return None
        if self._decomposer is None:
            self._decomposer = build_stage("decomposer", self.fact_decomposer, self.llm, None, prompts=self._prompts)
        return self._decomposer

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """Tokens a call needs besides the source: the larger of the short score call and (when flagged claims
        are explained) the explanation call, each with its reply budget, for the longest claim."""
        text = max((c.text for c in claims), key=len, default="")
        score = messages_tokens(self.llm, self.score_prompt.render(source="", claim=text)) + reply_budget(
            self.llm, SCORE_REPLY_TOKENS
        )
        if not self.explain_flagged:
            return score
        explain = messages_tokens(self.llm, self.explain_prompt.render(source="", claim=text)) + reply_budget(
            self.llm, EXPLAIN_REPLY_TOKENS
        )
        return max(score, explain)

    def flagged(self, verdict: Verdict) -> bool:
        """Answered no, or P(supported) below ``explain_below`` (at 0.5 and temperature 0 the same thing, up to
        spellings the answer parser does not read; above 0.5 also the claims answered yes without confidence)."""
        if verdict.label == "unscored":
            return False
        low = verdict.support_probability is not None and verdict.support_probability < self.explain_below
        return verdict.label != "supported" or low

    async def score(self, claim: Claim, context: Context, source: str | None = None) -> Verdict:
        """One short reply: the claim's answer and P(supported) against one context. A snippet's prompts take
        their fence key from the whole ``source``, so every call about one source shares the system message and
        the instructions (the backend's prefix cache evaluates them once), the snippet and claim coming last."""
        if is_placeholder(claim.text):
            return Verdict.unscored(claim, f"the claim {claim.text[:40]!r} is a template placeholder, not a claim")
        messages = self.score_prompt.render(source=context.text, claim=claim.text, about=_about(context, source))
        params = self.llm.params(
            max_tokens=SCORE_REPLY_TOKENS, top_logprobs=VERDICT_TOP_LOGPROBS, json_mode=False, json_schema=None
        )
        try:
            completion = await self.llm.generate(messages, params)
        except Exception as exc:  # noqa: BLE001 - one failed call leaves one claim unscored, never the batch
            return Verdict.unscored(claim, f"verdict-first score call failed: {type(exc).__name__}: {exc}"[:1000])
        call = LLMCall(
            model=completion.model,
            messages=[dict(m) for m in messages],
            reply=completion.text,
            cached=completion.cached,
            usage=completion.usage,
        )
        return answer_verdict(claim, completion.text, completion.logprobs, call, self.min_label_mass)

    def settle(
        self,
        verdict: Verdict,
        reply: ExplainReply | None = None,
        calls: Sequence[LLMCall] = (),
        source: str = "",
    ) -> Verdict:
        """A flagged verdict's final label, decided here once: contradicted when its explanation says the source
        contradicts the claim, else unsupported (also a claim answered yes whose P(supported) is below
        ``explain_below``, its reason saying so); with the explanation its reason, located source quote and fix,
        and the explanation's calls."""
        reason = verdict.reason
        if verdict.label == "supported":
            p = verdict.support_probability or 0.0
            reason = f"answered yes, but P(supported) = {p:.3f} is below explain_below = {self.explain_below}"
        update: dict[str, Any] = {"label": "unsupported", "score": 0.0, "reason": reason}
        if calls:
            update["calls"] = list(verdict.calls) + list(calls)
        if reply is None:
            return verdict.model_copy(update=update)
        label = "contradicted" if reply.contradicted else "unsupported"
        evidence: list[Evidence] = []
        quote = reply.evidence.strip()
        if quote:
            match = locate(quote, source)
            evidence.append(
                Evidence(
                    text=match.span.of(source) if match else quote,
                    span=match.span if match else None,
                    relation="contradicts" if label == "contradicted" else "related",
                )
            )
        fix = reply.fix.strip() or None
        if fix is not None and fix.strip().lower() == verdict.claim.text.strip().lower():
            fix = None  # the claim copied back is no fix
        update.update(
            label=label,
            reason=reply.reason.strip() or reason,
            evidence=evidence + list(verdict.evidence),
            fix=fix,
        )
        return verdict.model_copy(update=update)

    async def explain(self, verdict: Verdict, context: Context, source: str) -> tuple[Verdict, str | None]:
        """The flagged verdict settled with the reason, the located source quote and the fix the explanation
        proposed (not yet re-verified: :meth:`checked` does that); or, when the explanation reply is unusable,
        settled as scored, and why."""
        settled, error, _ = await self._explained(verdict, context, source)
        return settled, error

    async def checked(self, verdict: Verdict, context: Context, source: str) -> tuple[Verdict, str | None]:
        """:meth:`explain`, with the failing fact found (``fact_max``), then the relation read from probabilities
        (``relation_candidates``), the fix re-verified (``verify_fix``) and the reason written from the chosen
        evidence (``reason_from_evidence``): what the verifier reports for a flagged claim."""
        settled, error, _ = await self.checked_with_notes(verdict, context, source)
        return settled, error

    async def checked_with_notes(
        self, verdict: Verdict, context: Context, source: str
    ) -> tuple[Verdict, str | None, dict[str, Any]]:
        """:meth:`checked`, and what ``details["verdict_first"]`` records about it: the facts scored and the failing
        one (``facts``), and why a generated reason gave way to the plain one (``reason_replaced``)."""
        (settled, error, reply), split = await asyncio.gather(
            self._explained(verdict, context, source), self.scored_facts(verdict, context, source)
        )
        notes: dict[str, Any] = {}
        failing: Verdict | None = None
        if split is not None:
            facts, scored = split
            failing = self.failing(scored)
            update: dict[str, Any] = {
                "calls": list(settled.calls) + list(facts.calls) + [c for v in scored for c in v.calls]
            }
            if failing is not None and failing.claim.target_spans:
                update["target_spans"] = list(failing.claim.target_spans)
            settled = settled.model_copy(update=update)
            notes["facts"] = _facts_note(facts, scored, failing)
        if reply is None:
            return settled, error, notes
        about = failing.claim if failing is not None else verdict.claim
        if self.relation_candidates:
            settled = await self.related(settled, verdict.evidence, reply.evidence, source, about)
        if self.verify_fix:
            settled = await self.verified_fix(settled, reply.fix, context, source, failing)
        if self.reason_from_evidence and settled.evidence_relation is not None:
            settled, replaced = await self.written_reason(settled, about.text)
            if replaced is not None:
                notes["reason_replaced"] = replaced
        return settled, None, notes

    async def scored_facts(
        self, verdict: Verdict, context: Context, source: str
    ) -> tuple[SplitFacts, list[Verdict]] | None:
        """The flagged sentence's facts (:func:`~halluscope.methods.verdict_facts.split_facts`), at most
        ``fact_max`` of them scored by the same short reply against the same context; None for a claim that is not
        split (``fact_max`` 0, not a sentence, or one clause: no call)."""
        if not self.fact_max or not splittable(verdict.claim):
            return None
        facts = await split_facts(verdict.claim, self.decomposer(), self.fact_decomposer)
        chosen = facts.facts[: self.fact_max]
        return facts, list(await asyncio.gather(*(self.score(f, context, source) for f in chosen)))

    def failing(self, scored: Sequence[Verdict]) -> Verdict | None:
        """The failing fact: of the facts this verifier flags (:meth:`flagged`), the one with the lowest
        P(supported) (one answered no without a probability counts as 0), the first on a tie; None when none is."""
        flagged = [(v.support_probability or 0.0, i) for i, v in enumerate(scored) if self.flagged(v)]
        return scored[min(flagged)[1]] if flagged else None

    async def written_reason(self, verdict: Verdict, about: str) -> tuple[Verdict, str | None]:
        """``verdict`` with its reason written from its chosen evidence (:mod:`halluscope.methods.verdict_reason`)
        for ``about`` (the failing fact, else the claim), the call added; and why the generated reason gave way to
        the plain one (None when it is shown)."""
        relation = verdict.evidence_relation or "not_mentioned"
        passage = verdict.evidence[0].text if verdict.evidence else None
        reason, calls, replaced = await evidence_reason(self.llm, self.reason_prompt, about, passage, relation)
        return verdict.model_copy(update={"reason": reason, "calls": list(verdict.calls) + calls}), replaced

    async def _explained(
        self, verdict: Verdict, context: Context, source: str
    ) -> tuple[Verdict, str | None, ExplainReply | None]:
        claim = verdict.claim
        messages = self.explain_prompt.render(source=context.text, claim=claim.text, about=_about(context, source))
        step = await generate_reply(
            self.llm,
            messages,
            ExplainReply,
            params=self.llm.params(max_tokens=reply_budget(self.llm, EXPLAIN_REPLY_TOKENS)),
        )
        if step.value is None:
            return self.settle(verdict, calls=step.calls), step.error, None
        return self.settle(verdict, step.value, step.calls, source), None, step.value

    def passages(self, claim: Claim, quote: str, source: str) -> list[Evidence]:
        """The passages to ask about, closest first: the explanation's quote where the source holds it verbatim,
        then the claim's ``relation_candidates`` closest source sentences (a sentence already among them skipped)."""
        found: list[Evidence] = []
        quote = quote.strip()
        at = source.find(quote) if quote else -1
        if at >= 0:
            found.append(Evidence(text=quote, span=Span(start=at, end=at + len(quote))))
        for sentence in closest_sentences(claim.text, source, self.relation_candidates):
            if all(e.span != sentence.span for e in found):
                found.append(Evidence(text=sentence.text, span=sentence.span))
        return found

    async def contradiction(self, claim: Claim, passage: str, source: str) -> tuple[float | None, list[LLMCall]]:
        """P(the passage contradicts the claim) from one short yes/no reply (1 or 0 from the answer where the
        backend gives no probabilities), or None when the reply answers neither or the call fails."""
        messages = self.contradicts_prompt.render(passage=passage, claim=claim.text, about=source)
        params = self.llm.params(
            max_tokens=SCORE_REPLY_TOKENS, top_logprobs=VERDICT_TOP_LOGPROBS, json_mode=False, json_schema=None
        )
        try:
            completion = await self.llm.generate(messages, params)
        except Exception:  # noqa: BLE001 - one failed call leaves one passage unscored, never the claim
            return None, []
        call = LLMCall(
            model=completion.model,
            messages=[dict(m) for m in messages],
            reply=completion.text,
            cached=completion.cached,
            usage=completion.usage,
        )
        answer = read_answer(completion.text, completion.logprobs, *YES_NO, min_mass=self.min_label_mass)
        if answer.label is None:
            return None, [call]
        if answer.probability is not None:
            return answer.probability, [call]
        return (1.0 if answer.label else 0.0), [call]

    async def related(
        self, verdict: Verdict, scored_with: Sequence[Evidence], quote: str, source: str, about: Claim | None = None
    ) -> Verdict:
        """``verdict`` with its relation read from probabilities: each passage (:meth:`passages`) asked whether
        it contradicts ``about`` (the failing fact; the claim by default); contradicted, with the passage of highest
        P(contradicts) as the evidence, when it reaches :data:`CONTRADICTS_AT`; else unsupported and not mentioned,
        the closest passage as related context. A quote the source does not hold verbatim is never evidence. When no
        passage could be scored, the explanation's own label and quote stay."""
        about = about or verdict.claim
        passages = self.passages(about, quote, source)
        if not passages:
            return verdict.model_copy(
                update={
                    "label": "unsupported",
                    "evidence_relation": "not_mentioned",
                    "evidence": list(scored_with),
                }
            )
        asked = await asyncio.gather(*(self.contradiction(about, e.text, source) for e in passages))
        calls = list(verdict.calls) + [c for _, cs in asked for c in cs]
        scored = [(p, i) for i, (p, _) in enumerate(asked) if p is not None]
        if not scored:  # could not read the relation: the explanation's stays, and the reason says so
            note = f"{verdict.reason}; no passage's relation could be read (each reply answered neither or failed)"
            return verdict.model_copy(update={"calls": calls, "reason": note})
        p, best = max(scored, key=lambda item: (item[0], -item[1]))
        if p >= CONTRADICTS_AT:
            chosen, label, relation = (
                passages[best].model_copy(update={"relation": "contradicts"}),
                "contradicted",
                "contradicts",
            )
        else:
            chosen, label, relation = passages[0], "unsupported", "not_mentioned"
        return verdict.model_copy(
            update={
                "label": label,
                "evidence_relation": relation,
                "evidence": [chosen, *scored_with],
                "calls": calls,
            }
        )

    def fix_candidates(
        self, claim: Claim, proposed: str, source: str, failing: Verdict | None = None
    ) -> tuple[list[FixCandidate], str | None]:
        """The fixes worth re-verifying, in order (the explanation's, then the flagged text without its unsupported
        part: the clause the failing fact lies in where it was located, else the one holding the most words the
        source never uses), and why a proposed one was set aside unscored (it held markup or repeated the flagged
        text)."""
        candidates: list[FixCandidate] = []
        rejected: str | None = None
        removed = _without_failing(claim, failing) or without_unsupported_part(claim.text, source)
        for text, origin in ((proposed.strip(), "model"), ((removed or "").strip(), "removed")):
            if not text or any(c.text == text for c in candidates):
                continue
            problem = fix_problem(text, [claim.text])
            if problem is not None:
                rejected = rejected or problem
                continue
            candidates.append(FixCandidate(text=text, origin=origin))  # type: ignore[arg-type]
        return candidates, rejected

    async def verified_fix(
        self, verdict: Verdict, proposed: str, context: Context, source: str, failing: Verdict | None = None
    ) -> Verdict:
        """``verdict`` with the best fix that passes re-verification: each candidate scored by the same short reply
        against the same context as the claim; it passes when answered yes with P(supported) (where known) at least
        ``explain_below``. The best passing one (highest P(supported), the explanation's first on a tie) is the
        ``fix``; all stay in ``fix_candidates``; their calls join the verdict's."""
        candidates, rejected = self.fix_candidates(verdict.claim, proposed, source, failing)
        if not candidates:
            return verdict.model_copy(update={"fix": None, "fix_rejected": rejected})
        scored = await asyncio.gather(
            *(self.score(Claim(text=c.text, kind=verdict.claim.kind), context, source) for c in candidates)
        )
        checked = [_checked(c, v, self.explain_below) for c, v in zip(candidates, scored)]
        ranked = sorted(
            range(len(checked)),
            key=lambda i: (not checked[i].verified, -(checked[i].probability or 0.0), i),
        )
        best = checked[ranked[0]]
        update: dict[str, Any] = {
            "fix": None,
            "calls": list(verdict.calls) + [call for v in scored for call in v.calls],
            "fix_candidates": [checked[i] for i in ranked],
        }
        if best.verified:
            update.update(fix=best.text, fix_probability=best.probability, fix_verified=True)
        else:
            update["fix_rejected"] = rejected or "no verified fix: no candidate was scored supported by the source"
        return verdict.model_copy(update=update)

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        """The Verifier protocol: every claim scored against one context, the flagged ones explained against it."""
        verdicts = list(await asyncio.gather(*(self.score(c, context, source) for c in claims)))
        verdicts, _ = await self.explain_all(verdicts, {claim_id(c): context for c in claims}, source, 0.0)
        return verdicts

    async def verify_selection(
        self, claims: Sequence[Claim], selection: Selection, source: str
    ) -> tuple[list[Verdict], dict[str, Any]]:
        """Verdicts in claim order (scored, the flagged ones explained) and what to record in details: with the
        whole source one score per claim, with retrieval the max over its snippets (explained against its best)."""
        tried: dict[str, Any] = {}
        started = time.perf_counter()
        if selection.mode == "full":
            contexts = {claim_id(c): selection.contexts[claim_id(c)][0] for c in claims}
            verdicts = list(await asyncio.gather(*(self.score(c, contexts[claim_id(c)]) for c in claims)))
        else:
            verdicts, tried = await max_over_snippets(
                claims, selection.contexts, lambda pairs: self._round(pairs, source)
            )
            contexts = {
                claim_id(c): selection.contexts[claim_id(c)][0] for c in claims if selection.contexts.get(claim_id(c))
            }
        verdicts, record = await self.explain_all(verdicts, contexts, source, time.perf_counter() - started)
        return verdicts, {**tried, "verdict_first": record}

    async def explain_all(
        self, verdicts: list[Verdict], contexts: dict[str, Context], source: str, scored_s: float
    ) -> tuple[list[Verdict], dict[str, Any]]:
        """The scored verdicts with the flagged ones settled (explained, or scored only), and the record for
        ``details["verdict_first"]``."""
        verdicts = list(verdicts)
        flagged = [i for i, v in enumerate(verdicts) if self.flagged(v) and claim_id(v.claim) in contexts]
        chosen = self.to_explain(verdicts, flagged)
        for i in flagged:
            if i not in chosen:
                verdicts[i] = unexplained(self.settle(verdicts[i]), self.explain_flagged)
        if not self.explain_flagged:
            record = {
                "scored": len(verdicts),
                "explain_below": self.explain_below,
                "explain": False,
                "flagged": [claim_id(verdicts[i].claim) for i in flagged],
                "explanation_failed": {},
                "seconds": {"score": round(scored_s, 3), "explain": 0.0},
            }
            return verdicts, record
        started = time.perf_counter()
        explained = await asyncio.gather(
            *(self.checked_with_notes(verdicts[i], contexts[claim_id(verdicts[i].claim)], source) for i in chosen)
        )
        failed: dict[str, str] = {}
        notes: dict[str, dict[str, Any]] = {"facts": {}, "reason_replaced": {}}
        for i, (verdict, error, noted) in zip(chosen, explained):
            verdicts[i] = verdict
            if error is not None:
                failed[claim_id(verdict.claim)] = error
            for key, value in noted.items():
                notes[key][claim_id(verdict.claim)] = value
        verdicts = [v if v.decided_by else v.model_copy(update={"decided_by": "verdict_first"}) for v in verdicts]
        record = {
            "scored": len(verdicts),
            "explain_below": self.explain_below,
            "flagged": [claim_id(verdicts[i].claim) for i in flagged],
            **(
                {"explain_max": self.explain_max, "explained": [claim_id(verdicts[i].claim) for i in chosen]}
                if self.explain_max is not None
                else {}
            ),
            "explanation_failed": failed,
            **{key: value for key, value in notes.items() if value},
            "seconds": {"score": round(scored_s, 3), "explain": round(time.perf_counter() - started, 3)},
        }
        return verdicts, record

    def to_explain(self, verdicts: Sequence[Verdict], flagged: Sequence[int]) -> list[int]:
        """The flagged verdicts to explain, in claim order: none with ``explain=false``; all, or with ``explain_max``
        the ones with the lowest P(supported) (a verdict without one counts as 0), ties in claim order."""
        if not self.explain_flagged:
            return []
        if self.explain_max is None:
            return list(flagged)
        worst = sorted(flagged, key=lambda i: (verdicts[i].support_probability or 0.0, i))[: self.explain_max]
        return sorted(worst)

    async def _round(self, pairs: Sequence[tuple[Claim, Context]], source: str) -> list[Verdict]:
        return list(await asyncio.gather(*(self.score(c, ctx, source) for c, ctx in pairs)))


def unexplained(verdict: Verdict, explaining: bool = False) -> Verdict:
    """A flagged verdict left unexplained (``explain=false``, or past ``explain_max``), its reason saying so and what
    its evidence is."""
    where = (
        "the evidence is the source passage it was checked against"
        if verdict.evidence
        else "it was checked against the whole source"
    )
    why = "past explain_max, the claims with a lower P(supported) explained first" if explaining else "explain=false"
    note = f"{verdict.reason}; scored only ({why}): {where}, no reason or fix was asked for"
    return verdict.model_copy(update={"reason": note})


def _checked(candidate: FixCandidate, verdict: Verdict, explain_below: float) -> FixCandidate:
    """``candidate`` with its re-verification: verified when answered yes with P(supported) (where the backend gave
    one) at least ``explain_below``."""
    p = verdict.support_probability
    verified = verdict.label == "supported" and (p is None or p >= explain_below)
    return candidate.model_copy(update={"probability": p, "verified": verified, "note": verdict.reason})


def _without_failing(claim: Claim, failing: Verdict | None) -> str | None:
    """The sentence ``claim`` without the clause its failing fact was located in (None when it was not)."""
    if failing is None or not failing.claim.target_spans or len(claim.target_spans) != 1:
        return None
    start = claim.target_spans[0].start
    span = failing.claim.target_spans[0]
    return without_part_at(claim.text, span.start - start, span.end - start)


def _facts_note(facts: SplitFacts, scored: Sequence[Verdict], failing: Verdict | None) -> dict[str, Any]:
    """What ``details["verdict_first"]["facts"]`` records for one flagged sentence: how it was split, each fact
    scored (its P(supported), label and characters in the target) and the failing one."""
    return {
        "split_by": facts.split_by,
        **({"note": facts.note} if facts.note else {}),
        "facts": [
            {
                "text": v.claim.text,
                "label": v.label,
                "p_supported": v.support_probability,
                "span": [v.claim.target_spans[0].start, v.claim.target_spans[0].end] if v.claim.target_spans else None,
            }
            for v in scored
        ],
        "failing": failing.claim.text if failing is not None else None,
    }


def _about(context: Context, source: str | None) -> str | None:
    """The text a snippet's fence key comes from: the whole source (None for the whole source itself)."""
    return source if context.kind == "snippet" and source is not None else None
