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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from halluscope.methods.batching import BatchCall, BatchStep, gather_or_cancel, judge_in_batches
from halluscope.methods.probe.evidence import ProbeEvidenceFinder, QuoteSearch, SourceSentences, context_around
from halluscope.methods.probe.judge import EvidenceEvaluator, EvidenceJudgment, Judge
from halluscope.methods.probe.options import DEFAULT_EVIDENCE_FINDER, ProbeVerifierOptions
from halluscope.methods.probe.replies import (
    EVALUATE_BATCH_PROMPT,
    EVALUATE_PROMPT,
    FIND_EVIDENCE_BATCH_PROMPT,
    FIND_EVIDENCE_PROMPT,
    FIND_REPLY_TOKENS,
    EvidenceBatchEntry,
    EvidenceReply,
    is_template_echo,
)
from halluscope.methods.probe.trace import ProbeTrace
from halluscope.options import own_options
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Evidence, LLMCall, Verdict
from halluscope.stages import Context, PromptResolver, build_stage, register_stage, same_prompt, stage_spec
from halluscope.stages.verifiers import LLMVerifier

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM


async def search_with(finder: Any, claim: Claim, context: Context, source: str) -> QuoteSearch:
    """One evidence search: the finder's own ``search`` (PROBE's finders record every quote), else its protocol
    call (``(claim, context, source) -> StepResult[list[Evidence]]``, a plugin's finder) as a search."""
    search = getattr(finder, "search", None)
    if callable(search):
        return await search(claim, context, source)  # type: ignore[no-any-return]
    step = await finder(claim, context, source)
    found = QuoteSearch(claim, context, calls=list(step.calls), error=step.error)
    for e in step.value or []:
        found.evidence.append(e)
        found.quotes.append({"quote": e.text, "status": "found", "span": e.span.model_dump() if e.span else None})
    return found


def build_judges(llms: Sequence[LLM], samples: int, temperature: float) -> list[Judge]:
    """Every judge model times ``samples`` votes (samples beyond the first at ``temperature``)."""
    return [Judge(llm, sample, temperature) for llm in llms for sample in range(samples)]


def decide(claim: Claim, search: QuoteSearch, judgments: Sequence[EvidenceJudgment]) -> tuple[Verdict, str]:
    """The claim's verdict in one context and the outcome code recorded in the steps."""
    calls = search.calls + [c for j in judgments for c in j.calls]
    failure = search.failure_reason
    if failure is not None:
        return Verdict.unscored(claim, failure, calls), f"unscored:{search.outcome}"
    where = "this source excerpt" if search.context.kind == "snippet" else "the source"
    rejected = (
        f" ({len(search.rejected)} other quoted passage(s) were not found in the source and were rejected)"
        if search.rejected
        else ""
    )
    evidence = [j.evidence.model_copy(update={"relation": "supports" if j.accepted else "related"}) for j in judgments]
    if not judgments:
        return (
            Verdict(
                claim=claim,
                label="unsupported",
                score=0.0,
                calls=calls,
                reason=f"the evidence finder found no passage of {where} that bears on it",
            ),
            "unsupported:no_evidence",
        )
    best = max((j.pass_fraction for j in judgments if j.pass_fraction is not None), default=None)
    probabilities = [j.pass_probability for j in judgments]
    # P(supported): the best passage's mean P(PASS) (a claim is supported when any passage is); only when every
    # passage has one, since a passage without one could be the best
    support = max(probabilities) if probabilities and None not in probabilities else None  # type: ignore[type-var]
    accepted = [j for j in judgments if j.accepted]
    if accepted:
        return (
            Verdict(
                claim=claim,
                label="supported",
                score=best,
                evidence=evidence,
                calls=calls,
                support_probability=support,
                reason=f"{len(accepted)} of {len(judgments)} source passages support it on their own",
            ),
            "supported",
        )
    undecided = [j for j in judgments if j.accepted is None]
    if undecided:
        errors = "; ".join(dict.fromkeys(v.error for j in undecided for v in j.votes if v.error))[:300]
        return (
            Verdict(
                claim=claim,
                label="unscored",
                evidence=evidence,
                calls=calls,
                reason=f"{len(undecided)} of {len(judgments)} passages could not be judged (no valid PASS/FAIL "
                f"vote from enough judges) and no other passage supports it: {errors}",
            ),
            "unscored:undecided_judgments",
        )
    return (
        Verdict(
            claim=claim,
            label="unsupported",
            score=best,
            evidence=evidence,
            calls=calls,
            support_probability=support,
            reason=f"the judges failed all {len(judgments)} passages of {where} found for it: none supports "
            f"it on its own{rejected}",
        ),
        "unsupported:all_failed",
    )


@register_stage("probe", "verifier")
class ProbeVerifier(LLMVerifier):
    """PROBE steps 2-3: quoted source evidence, each passage judged PASS/FAIL on its own by judge consensus.

    Supported when some passage is accepted; see the module docstring for every other outcome."""

    reply_tokens = FIND_REPLY_TOKENS
    Options = ProbeVerifierOptions

    def __init__(
        self,
        model: LLM,
        options: Any = None,
        *,
        prompts: PromptResolver = same_prompt,
        named_llm: Callable[[str], LLM] | None = None,
        evidence_finder: Any = None,
    ):
        """``named_llm``: a client for a judge model named in ``judges`` (at the main model's endpoint); needed
        only when ``judges`` names models. ``evidence_finder``: the evidence finder stage to use (the probe
        method's chosen one); without it the one the ``evidence_finder`` option names is built here."""
        super().__init__(model, options, prompts=prompts)
        self.opts = self.options
        if evidence_finder is None:
            finder = self.opts.evidence_finder or DEFAULT_EVIDENCE_FINDER
            spec = stage_spec("evidence_finder", finder)
            evidence_finder = build_stage(
                "evidence_finder",
                finder,
                model if getattr(spec.factory, "uses_llm", True) else None,
                own_options(spec.options_model, self.opts),
                prompts=prompts,
            )
        self.finder = evidence_finder
        self.evaluate_prompt = prompts(EVALUATE_PROMPT)
        self.named_llm = named_llm
        if self.opts.judges and named_llm is None:
            raise TypeError("the probe verifier needs named_llm to reach the judge models it is given")
        self._evaluator: EvidenceEvaluator | None = None
        self._sentences = SourceSentences()
        self.find_batch = BatchCall(
            prompts(FIND_EVIDENCE_BATCH_PROMPT),
            EvidenceBatchEntry,
            listing="claims",
            unit="assertion",
            reply_tokens=FIND_REPLY_TOKENS,
        )

    def judge_llms(self) -> list[LLM]:
        """The evidence-evaluation models: those named in ``judges``, else the verifier's own model."""
        return [self.named_llm(n) for n in self.opts.judges or []] or [self.llm]  # type: ignore[misc]

    @property
    def evaluator(self) -> EvidenceEvaluator:
        if self._evaluator is None:  # judge models are built on first use
            judges = build_judges(self.judge_llms(), self.opts.samples, self.opts.sample_temperature)
            self._evaluator = EvidenceEvaluator(
                judges,
                self.evaluate_prompt,
                consensus=self.opts.consensus,
                batch_prompt=self.prompts(EVALUATE_BATCH_PROMPT),
            )
        return self._evaluator

    def used_prompts(self) -> list[PromptTemplate]:
        finder = [self.prompts(FIND_EVIDENCE_PROMPT)] if isinstance(self.finder, ProbeEvidenceFinder) else []
        batched = []
        if self.batch_size > 1:
            batched = ([self.prompts(FIND_EVIDENCE_BATCH_PROMPT)] if finder else []) + [
                self.prompts(EVALUATE_BATCH_PROMPT)
            ]
        return finder + [self.evaluate_prompt] + batched

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        if isinstance(self.finder, ProbeEvidenceFinder):
            return self.finder.messages(claims[0].text, context_text)
        return self.evaluate_prompt.render(claim=claims[0].text, evidence="", context="")

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """The larger of a one-claim evidence call (longest claim) and, when batching, a call with the first batch."""
        reserve = super().reserve_tokens(claims)
        if self.batch_size > 1 and len(claims) > 1 and isinstance(self.finder, ProbeEvidenceFinder):
            batch = [c.text for c in claims[: self.batch_size]]
            reserve = max(
                reserve, self.find_batch.reserve(self.llm, batch, source="", max_evidence=self.finder.max_evidence)
            )
        return reserve

    @property
    def batch_size(self) -> int:
        return int(self.opts.batch_size)

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        if self.batch_size > 1 and context.kind == "source" and len(claims) > 1:
            return await self.check_batched(claims, context, source)
        return await gather_or_cancel(self.check(c, context, source) for c in claims)

    async def check(self, claim: Claim, context: Context, source: str) -> Verdict:
        if is_template_echo(claim.text):
            return Verdict.unscored(claim, f"the claim {claim.text[:40]!r} is a template placeholder, not a claim")
        search: QuoteSearch = await search_with(self.finder, claim, context, source)
        judgments: list[EvidenceJudgment] = []
        if search.failure_reason is None and search.evidence:
            sentences = await self._sentences.get(source)
            judgments = await gather_or_cancel(
                self.evaluator(claim, e, context_around(source, sentences, e.span, self.opts.context_sentences), source)
                for e in search.evidence
                if e.span is not None
            )
        return self.settle(claim, context, search, judgments)

    def settle(self, claim: Claim, context: Context, search: QuoteSearch, judgments: list[EvidenceJudgment]) -> Verdict:
        """The claim's verdict from its search and judgments, recorded in the check's trace (``context.trace``)."""
        verdict, outcome = decide(claim, search, judgments)
        if context.trace is not None:
            trace = context.trace.record(ProbeTrace)
            trace.searches.append(search.record())
            trace.judgments.extend(j.record(i, context.rank, context.kind) for i, j in enumerate(judgments))
            trace.outcomes.append(
                {
                    "claim_id": claim.id,
                    "context": {"rank": context.rank, "kind": context.kind},
                    "label": verdict.label,
                    "outcome": outcome,
                    "reason": verdict.reason,
                }
            )
        return verdict

    # -- batch_size > 1 (whole source) --------------------------------------------------------------------
    async def check_batched(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        """Steps 2 and 3 for claims that share the whole source: evidence for up to ``batch_size`` claims per call;
        then each passage judged for up to ``batch_size`` of the claims that quoted it (same passage, same
        surrounding context) per judge call. Each claim's verdict is decided exactly as in :meth:`check`."""
        real = [c for c in claims if not is_template_echo(c.text)]
        searches = await self.search_batched(real, context, source)
        sentences = await self._sentences.get(source)
        # every (claim, passage) to judge, grouped by passage span: same excerpt, same surrounding context
        groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
        passages: dict[tuple[int, int], Evidence] = {}
        for ci, search in enumerate(searches):
            if search.failure_reason is not None:
                continue
            for ei, evidence in enumerate(e for e in search.evidence if e.span is not None):
                key = (evidence.span.start, evidence.span.end)  # type: ignore[union-attr]
                groups.setdefault(key, []).append((ci, ei))
                passages.setdefault(key, evidence)
        judged: dict[tuple[int, int], EvidenceJudgment] = {}

        async def judge(key: tuple[int, int]) -> None:
            members = groups[key]
            evidence = passages[key]
            around = context_around(source, sentences, evidence.span, self.opts.context_sentences)  # type: ignore[arg-type]
            results = await self.evaluator.batch(
                [real[ci] for ci, _ in members], evidence, around, self.batch_size, source
            )
            for (ci, ei), judgment in zip(members, results):
                judged[(ci, ei)] = judgment

        await gather_or_cancel(judge(key) for key in groups)
        settled = []
        for ci, (claim, search) in enumerate(zip(real, searches)):
            n_located = sum(1 for e in search.evidence if e.span is not None) if search.failure_reason is None else 0
            settled.append(self.settle(claim, context, search, [judged[(ci, ei)] for ei in range(n_located)]))
        verdicts = iter(settled)
        return [
            next(verdicts) if not is_template_echo(c.text) else await self.check(c, context, source) for c in claims
        ]

    async def search_batched(self, claims: list[Claim], context: Context, source: str) -> list[QuoteSearch]:
        """Step 2 for claims sharing the whole source: one evidence call per ``batch_size`` claims (the model's
        finder), each claim's quotes located exactly as a single search locates them; a claim the batch reply
        does not answer gets its own search. The no-LLM finder searches claim by claim."""
        finder = self.finder
        if not isinstance(finder, ProbeEvidenceFinder):
            return await gather_or_cancel(search_with(finder, c, context, source) for c in claims)

        async def ask(part: list[Claim]) -> BatchStep[EvidenceReply]:
            return await self.find_batch.ask(
                self.llm, [c.text for c in part], source=context.text, max_evidence=finder.max_evidence
            )

        def redone(search: QuoteSearch, why: str, calls: list[LLMCall]) -> QuoteSearch:
            search.calls = list(calls) + search.calls
            if search.error is not None:
                search.error = f"batch: {why}; alone: {search.error}"
            return search

        found: list[QuoteSearch | _Quoted] = await judge_in_batches(
            claims,
            self.batch_size,
            ask=ask,
            accept=lambda claim, entry, calls: _Quoted(claim, entry.evidence, calls),
            alone=lambda claim: finder.search(claim, context, source),
            redone=redone,  # type: ignore[arg-type]
        )
        return await gather_or_cancel(
            _located(finder, f, context, source) if isinstance(f, _Quoted) else _done(f) for f in found
        )

    def describe(self) -> dict[str, Any]:
        describe = getattr(self.finder, "describe", None)
        return {
            "evidence_finder": describe() if callable(describe) else self.finder.name,
            "judges": [j.name for j in self.evaluator.judges],
            "consensus": self.opts.consensus,
        }


async def _done(search: QuoteSearch) -> QuoteSearch:
    return search


@dataclass
class _Quoted:
    """A claim's quotes from a batch evidence reply, not yet located."""

    claim: Claim
    quotes: list[str]
    calls: list[LLMCall]


async def _located(finder: ProbeEvidenceFinder, quoted: _Quoted, context: Context, source: str) -> QuoteSearch:
    """A batch entry's quotes located in the source and recorded exactly as :meth:`ProbeEvidenceFinder.search`
    records a single reply's quotes (verified with its span, duplicate, or rejected)."""
    found = QuoteSearch(quoted.claim, context, calls=list(quoted.calls))
    await finder.record_quotes(found, quoted.quotes, source)
    return found
