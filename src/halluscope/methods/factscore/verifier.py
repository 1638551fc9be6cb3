"""FActScore's verifier (verifier ``factscore``, usable by any claim method): a fact supported by the context or
not, as a stated JSON boolean, with each inconsistency described (``describe``) or without."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from halluscope.llm.label_probs import TRUE_FALSE, VERDICT_TOP_LOGPROBS, step_label, with_label_probability
from halluscope.llm.structured import generate_reply
from halluscope.methods.batching import BatchCall, BatchingVerifier
from halluscope.methods.factscore.prompts import (
    FACTSCORE_DESCRIBE_BATCH_PROMPT,
    FACTSCORE_DESCRIBE_PROMPT,
    FACTSCORE_VERIFY_BATCH_PROMPT,
    FACTSCORE_VERIFY_PROMPT,
    VERIFY_REPLY_TOKENS,
)
from halluscope.methods.factscore.replies import (
    FactCheckBatchEntry,
    FactCheckReply,
    FactJudgmentBatchEntry,
    FactJudgmentReply,
)
from halluscope.options import MAX_BATCH_SIZE, StageOptions
from halluscope.records import Claim, LLMCall, Verdict
from halluscope.stages import Context, PromptResolver, register_stage, same_prompt
from halluscope.text.placeholders import is_placeholder

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM


@register_stage("factscore", "verifier")
class FactScoreVerifier(BatchingVerifier[FactCheckReply]):
    """One call per claim: supported by the context or not (a stated JSON boolean), inconsistencies described.

    With ``describe`` an unsupported claim's inconsistencies are its reason, one per line; without it the model
    only states the boolean. With the whole source and ``batch_size`` > 1 several facts are judged per call,
    each on its own (:mod:`halluscope.methods.batching`); a fact the batch reply does not judge is asked on its
    own. Against a retrieved snippet every fact has its own context, so each gets its own call."""

    reply_tokens = VERIFY_REPLY_TOKENS

    class Options(StageOptions):
        describe: bool = True
        """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

        batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
        """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one
        call per fact)."""

    def __init__(
        self, model: LLM, options: FactScoreVerifier.Options | None = None, *, prompts: PromptResolver = same_prompt
    ):
        super().__init__(model, options, prompts=prompts)
        self.describe = self.options.describe
        self.batch_size = self.options.batch_size
        self.schema: type[FactCheckReply] = FactJudgmentReply if self.describe else FactCheckReply
        self.prompt = prompts(FACTSCORE_DESCRIBE_PROMPT if self.describe else FACTSCORE_VERIFY_PROMPT)
        self.batch = BatchCall(
            prompts(FACTSCORE_DESCRIBE_BATCH_PROMPT if self.describe else FACTSCORE_VERIFY_BATCH_PROMPT),
            FactJudgmentBatchEntry if self.describe else FactCheckBatchEntry,
            listing="facts",
            unit="fact",
            reply_tokens=self.reply_tokens,
        )

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        return self.prompt.render(source=context_text, fact=claims[0].text)

    async def check(self, claim: Claim, context: Context, source: str) -> Verdict:
        if is_placeholder(claim.text):
            return Verdict.unscored(claim, self.placeholder_reason(claim))
        step = await generate_reply(
            self.llm,
            self.messages([claim], context.text),
            self.schema,
            params=self.llm.params(top_logprobs=VERDICT_TOP_LOGPROBS),
        )
        if step.value is None:
            return Verdict.unscored(claim, f"verification reply unusable: {step.error}", step.calls)
        verdict = self.verdict(claim, step.value, step.calls)
        return with_label_probability(verdict, step_label(step, *TRUE_FALSE, key="supported"))

    def accept(self, claim: Claim, entry: FactCheckReply, calls: list[LLMCall], source: str) -> Verdict:
        return self.verdict(claim, entry, calls)

    @staticmethod
    def verdict(claim: Claim, reply: FactCheckReply, calls: Sequence[LLMCall]) -> Verdict:
        """The verdict a stated judgment gives (the same for a single reply and a batch entry)."""
        if reply.supported:
            return Verdict(
                claim=claim, label="supported", reason="supported by the source", score=1.0, calls=list(calls)
            )
        descriptions = list(getattr(reply, "inconsistencies", ()))
        return Verdict(
            claim=claim,
            label="unsupported",
            score=0.0,
            calls=list(calls),
            reason="\n".join(descriptions) or f"Not supported by the source: {claim.text}",
        )
