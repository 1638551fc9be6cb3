"""PROBE's verifier (registered verifier ``probe``): evidence finding + evidence evaluation for each claim.

Usable by any claim method (``-o verifier=probe`` on ``factscore``, ``dove``, ``dcr``): it takes claims, one
context (the whole source or a retrieved snippet) and the source, and returns one verdict per claim.

How a claim's verdict is decided in one context:

* the evidence reply was unusable -> ``unscored`` ("evidence finding failed: ...");
* every quoted passage was invented (found nowhere in the source) -> ``unscored``
  ("all N quoted passages were not found in the source");
* a valid reply with an explicit empty list -> ``unsupported`` (nothing in the context bears on it);
* some passage accepted by the judges' consensus -> ``supported``;
* no passage accepted and some passage undecided (too few valid votes) -> ``unscored``;
* the judges FAIL every passage -> ``unsupported``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from halluscope.methods.pipeline import LLMVerifier
from halluscope.methods.probe.evidence import (ProbeEvidenceFinder, QuoteSearch, SourceSentences, context_around,
                                               probe_options)
from halluscope.methods.probe.judge import EvidenceEvaluator, EvidenceJudgment, Judge
from halluscope.methods.probe.options import ProbeOptions
from halluscope.methods.probe.replies import (EVALUATE_PROMPT, FIND_EVIDENCE_PROMPT, FIND_REPLY_TOKENS,
                                              is_template_echo)
from halluscope.methods.probe.trace import current_trace
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Verdict
from halluscope.stages import Context, build_stage, register_stage

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.methods.base import Method

T = TypeVar("T")


async def gather_or_cancel(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Like ``asyncio.gather``, but the first error cancels the siblings (no orphan LLM calls keep running
    after, e.g., a context overflow that makes the pipeline start over on snippets)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def build_judges(method: "Method", opts: ProbeOptions) -> list[Judge]:
    """Every judge model (``probe``'s ``judges``; else the method's own model) times ``samples``."""
    judge_llms = getattr(method, "judge_llms", None)
    llms = judge_llms() if callable(judge_llms) else [method.llm]
    return [Judge(llm, sample, opts.sample_temperature) for llm in llms for sample in range(opts.samples)]


def decide(claim: Claim, search: QuoteSearch, judgments: Sequence[EvidenceJudgment]) -> tuple[Verdict, str]:
    """The claim's verdict in one context and the outcome code recorded in the steps."""
    calls = search.calls + [c for j in judgments for c in j.calls]
    failure = search.failure_reason
    if failure is not None:
        return Verdict.unscored(claim, failure, calls), f"unscored:{search.outcome}"
    where = "this source excerpt" if search.context.kind == "snippet" else "the source"
    rejected = (f" ({len(search.rejected)} other quoted passage(s) were not found in the source and were rejected)"
                if search.rejected else "")
    evidence = [j.evidence.model_copy(update={"relation": "supports" if j.accepted else "related"})
                for j in judgments]
    if not judgments:
        return (Verdict(claim=claim, label="unsupported", score=0.0, calls=calls,
                        reason=f"the evidence finder found no passage of {where} that bears on it"),
                "unsupported:no_evidence")
    best = max((j.pass_fraction for j in judgments if j.pass_fraction is not None), default=None)
    accepted = [j for j in judgments if j.accepted]
    if accepted:
        return (Verdict(claim=claim, label="supported", score=best, evidence=evidence, calls=calls,
                        reason=f"{len(accepted)} of {len(judgments)} source passages support it on their own"),
                "supported")
    undecided = [j for j in judgments if j.accepted is None]
    if undecided:
        errors = "; ".join(dict.fromkeys(v.error for j in undecided for v in j.votes if v.error))[:300]
        return (Verdict(claim=claim, label="unscored", evidence=evidence, calls=calls,
                        reason=f"{len(undecided)} of {len(judgments)} passages could not be judged (no valid PASS/FAIL "
                               f"vote from enough judges) and no other passage supports it: {errors}"),
                "unscored:undecided_judgments")
    return (Verdict(claim=claim, label="unsupported", score=best, evidence=evidence, calls=calls,
                    reason=f"the judges failed all {len(judgments)} passages of {where} found for it: none supports "
                           f"it on its own{rejected}"),
            "unsupported:all_failed")


@register_stage("probe", "verifier")
class ProbeVerifier(LLMVerifier):
    """PROBE steps 2-3: quoted source evidence, each passage judged PASS/FAIL on its own by judge consensus.

    Supported when some passage is accepted; see the module docstring for every other outcome."""

    reply_tokens = FIND_REPLY_TOKENS

    def __init__(self, method: "Method"):
        super().__init__(method)
        self.opts = probe_options(method)
        self.finder = build_stage("evidence_finder", "top_sentences" if self.opts.evidence == "retrieval" else "probe",
                                  method)
        self.evaluate_prompt = method.prompt(EVALUATE_PROMPT)
        self._evaluator: EvidenceEvaluator | None = None
        self._sentences = SourceSentences()

    @property
    def evaluator(self) -> EvidenceEvaluator:
        if self._evaluator is None:  # judge models are built on first use
            self._evaluator = EvidenceEvaluator(build_judges(self.method, self.opts), self.evaluate_prompt,
                                                consensus=self.opts.consensus)
        return self._evaluator

    def used_prompts(self) -> list[PromptTemplate]:
        finder = [self.method.prompt(FIND_EVIDENCE_PROMPT)] if isinstance(self.finder, ProbeEvidenceFinder) else []
        return finder + [self.evaluate_prompt]

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        if isinstance(self.finder, ProbeEvidenceFinder):
            return self.finder.messages(claims[0].text, context_text)
        return self.evaluate_prompt.render(claim=claims[0].text, evidence="", context="")

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        return await gather_or_cancel(self.check(c, context, source) for c in claims)

    async def check(self, claim: Claim, context: Context, source: str) -> Verdict:
        if is_template_echo(claim.text):
            return Verdict.unscored(claim, f"the claim {claim.text[:40]!r} is a template placeholder, not a claim")
        search: QuoteSearch = await self.finder.search(claim, context, source)  # type: ignore[attr-defined]
        judgments: list[EvidenceJudgment] = []
        if search.failure_reason is None and search.evidence:
            sentences = await self._sentences.get(source)
            judgments = await gather_or_cancel(
                self.evaluator(claim, e, context_around(source, sentences, e.span, self.opts.context_sentences))
                for e in search.evidence if e.span is not None)
        verdict, outcome = decide(claim, search, judgments)
        trace = current_trace()
        if trace is not None:
            trace.searches.append(search.record())
            trace.judgments.extend(j.record(i, context.rank, context.kind) for i, j in enumerate(judgments))
            trace.outcomes.append({"claim_id": claim.id, "context": {"rank": context.rank, "kind": context.kind},
                                   "label": verdict.label, "outcome": outcome, "reason": verdict.reason})
        return verdict

    def describe(self) -> dict[str, Any]:
        describe = getattr(self.finder, "describe", None)
        return {"evidence_finder": describe() if callable(describe) else self.finder.name,
                "judges": [j.name for j in self.evaluator.judges], "consensus": self.opts.consensus}
