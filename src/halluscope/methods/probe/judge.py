"""Step 3, evidence evaluation: does this passage ALONE support the claim? PASS/FAIL per judge, then consensus.

Every judge (a model, times ``samples`` votes with their own seed) reads the claim, the passage and the source
sentences around it (to understand the passage, not as proof) and answers with :class:`~.replies.EvaluationReply`.
A vote is valid only when the reply states exactly ``PASS`` or ``FAIL`` in its ``verdict`` field. A passage is
accepted when the PASS votes reach ``consensus`` of ALL the votes (an unusable vote counts against; the paper:
at least 3 of 4 judges, 0.75) - the one rule, shared with the gold builder (:func:`votes_needed`); with fewer
than half of the votes valid it is undecided. With ``batch_size`` > 1 the claims
that quoted the same passage (so the same excerpt and surrounding context) share each judge's call, each
claim judged on its own (:meth:`EvidenceEvaluator.batch`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from halluscope.llm import LLM
from halluscope.llm.base import GenerateParams
from halluscope.llm.label_probs import PASS_FAIL, VERDICT_TOP_LOGPROBS, step_probability
from halluscope.llm.structured import generate_reply
from halluscope.methods.batching import BatchCall, BatchStep, judge_in_batches
from halluscope.methods.probe.replies import (
    EVALUATE_BATCH_PROMPT,
    EVALUATE_PROMPT,
    EVALUATE_REPLY_TOKENS,
    EvaluationBatchEntry,
    EvaluationReply,
)
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Evidence, LLMCall
from halluscope.stages.snippets import unique_calls
from halluscope.stages.verifiers import reply_budget


@dataclass
class Judge:
    """One voter: a model and a sample number (samples > 0 use ``temperature`` with their own seed)."""

    llm: LLM
    sample: int = 0
    temperature: float = 0.0

    @property
    def name(self) -> str:
        return self.llm.name if self.sample == 0 else f"{self.llm.name}#{self.sample}"

    def params(self) -> GenerateParams:
        budget = reply_budget(self.llm, EVALUATE_REPLY_TOKENS)
        if self.sample == 0:
            return self.llm.params(max_tokens=budget, top_logprobs=VERDICT_TOP_LOGPROBS)
        return self.llm.params(
            max_tokens=budget, temperature=self.temperature, seed=self.sample, top_logprobs=VERDICT_TOP_LOGPROBS
        )


@dataclass
class Vote:
    judge: str
    sample: int
    passed: bool | None  # None: the reply stated no valid verdict
    error: str | None = None
    pass_probability: float | None = None  # P(PASS) renormalised over PASS/FAIL at the verdict's token, when given


def votes_needed(consensus: float, votes: int) -> int:
    """PASS votes needed out of ``votes`` (0.75 of 4 -> 3; 0.75 of 3 -> 3; 0.75 of 1 -> 1)."""
    return max(1, math.ceil(consensus * votes - 1e-9))


@dataclass
class EvidenceJudgment:
    """Every judge's vote on one passage, and the consensus."""

    claim_id: str
    evidence: Evidence
    votes: list[Vote]
    calls: list[LLMCall] = field(default_factory=list)
    consensus: float = 0.75

    @property
    def valid_votes(self) -> list[Vote]:
        return [v for v in self.votes if v.passed is not None]

    @property
    def pass_fraction(self) -> float | None:
        """PASS votes / all votes (an unusable vote counts against); None with no valid vote."""
        return sum(v.passed is True for v in self.votes) / len(self.votes) if self.valid_votes else None

    @property
    def pass_probability(self) -> float | None:
        """The mean of the votes' P(PASS); None unless every vote has one (a vote without one is never guessed)."""
        probs = [v.pass_probability for v in self.votes]
        if not probs or any(p is None for p in probs):
            return None
        return sum(probs) / len(probs)  # type: ignore[arg-type]

    @property
    def accepted(self) -> bool | None:
        """True/False by consensus over all the votes; None when fewer than half of the votes could be read."""
        if not self.valid_votes or 2 * len(self.valid_votes) < len(self.votes):
            return None
        return sum(v.passed is True for v in self.votes) >= votes_needed(self.consensus, len(self.votes))

    def record(self, position: int, rank: int, kind: str) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "context": {"rank": rank, "kind": kind},
            "position": position,
            "evidence_span": self.evidence.span.model_dump() if self.evidence.span else None,
            "votes": [
                {
                    "judge": v.judge,
                    "verdict": None if v.passed is None else ("PASS" if v.passed else "FAIL"),
                    "error": v.error,
                }
                for v in self.votes
            ],
            "pass_fraction": self.pass_fraction,
            "pass_probability": self.pass_probability,
            "accepted": self.accepted,
        }


class EvidenceEvaluator:
    """(claim, passage, surrounding context) -> every judge's PASS/FAIL vote and the consensus.

    :meth:`batch` judges several claims that quoted the *same* passage (same surrounding context) in one call
    per judge, each claim on its own; a claim the batch reply does not judge gets that judge's single call."""

    def __init__(
        self,
        judges: Sequence[Judge],
        prompt: PromptTemplate = EVALUATE_PROMPT,
        *,
        consensus: float = 0.75,
        batch_prompt: PromptTemplate = EVALUATE_BATCH_PROMPT,
    ):
        if not judges:
            raise ValueError("evidence evaluation needs at least one judge")
        self.judges, self.prompt, self.consensus = list(judges), prompt, consensus
        self.batch_prompt = batch_prompt
        self.batch_call = BatchCall(
            batch_prompt, EvaluationBatchEntry, listing="claims", unit="assertion", reply_tokens=EVALUATE_REPLY_TOKENS
        )

    async def vote(
        self, judge: Judge, claim: Claim, evidence: Evidence, context: str, about: str | None = None
    ) -> tuple[Vote, list[LLMCall]]:
        """One judge's vote on one (claim, passage): the unbatched step. ``about``: the whole source the passage
        comes from (its calls then share one fence key, hence one prompt prefix)."""
        messages = self.prompt.render(claim=claim.text, evidence=evidence.text, context=context, about=about)
        step = await generate_reply(judge.llm, messages, EvaluationReply, params=judge.params())
        passed = None if step.value is None else step.value.verdict == "PASS"
        probability = None if passed is None else step_probability(step, *PASS_FAIL, key="verdict")
        return Vote(judge.name, judge.sample, passed, step.error, probability), list(step.calls)

    async def __call__(
        self, claim: Claim, evidence: Evidence, context: str, about: str | None = None
    ) -> EvidenceJudgment:
        results = await asyncio.gather(*(self.vote(j, claim, evidence, context, about) for j in self.judges))
        return EvidenceJudgment(
            claim.id or "",
            evidence,
            [v for v, _ in results],
            [c for _, calls in results for c in calls],
            self.consensus,
        )

    async def batch(
        self, claims: Sequence[Claim], evidence: Evidence, context: str, size: int, about: str | None = None
    ) -> list[EvidenceJudgment]:
        """One judgment per claim on the one passage they all quoted, votes asked up to ``size`` claims per call."""

        async def judge_all(judge: Judge) -> list[tuple[Vote, list[LLMCall]]]:
            probabilities: dict[int, float] = {}  # id(claim) -> P(PASS) read from its batch entry

            async def ask(part: list[Claim]) -> BatchStep[EvaluationReply]:
                step = await self.batch_call.ask(
                    judge.llm,
                    [c.text for c in part],
                    params=judge.params(),
                    evidence=evidence.text,
                    context=context,
                    about=about,
                )
                for i, p in step.label_probabilities("verdict", *PASS_FAIL).items():
                    if 0 <= i < len(part):
                        probabilities[id(part[i])] = p
                return step

            def accept(claim: Claim, entry: EvaluationReply, calls: list[LLMCall]) -> tuple[Vote, list[LLMCall]]:
                return (
                    Vote(judge.name, judge.sample, entry.verdict == "PASS", None, probabilities.get(id(claim))),
                    list(calls),
                )

            def redone(
                result: tuple[Vote, list[LLMCall]], why: str, calls: list[LLMCall]
            ) -> tuple[Vote, list[LLMCall]]:
                vote, own = result
                if vote.passed is None:
                    vote = Vote(vote.judge, vote.sample, None, f"batch: {why}; alone: {vote.error}")
                return vote, list(calls) + own

            return await judge_in_batches(
                list(claims),
                size,
                ask=ask,
                accept=accept,
                alone=lambda c: self.vote(judge, c, evidence, context, about),
                redone=redone,
            )

        per_judge = await asyncio.gather(*(judge_all(j) for j in self.judges))
        out = []
        for i, claim in enumerate(claims):
            votes = [results[i] for results in per_judge]
            calls = unique_calls([c for _, cs in votes for c in cs])
            out.append(EvidenceJudgment(claim.id or "", evidence, [v for v, _ in votes], calls, self.consensus))
        return out
