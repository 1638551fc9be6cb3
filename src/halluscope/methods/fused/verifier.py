"""The ``fused`` verifier stage: verdict-first scoring, then one calibrated P(supported) per claim from the judge's
probability and the claim's lexical support (:mod:`~halluscope.methods.fused.features`), by the fitted model of
:mod:`~halluscope.methods.fused.model`.

Each claim costs exactly the verdict-first verifier's short reply (no extra LLM call: the other features need no
model). The fused P(supported) replaces the judge's on the verdict (``support_probability``; the label is
supported at 0.5 and above), so every aggregator that reads probabilities (DCR's Eq. 3 with z = 2P - 1, the
supported fraction's mean) uses it; the judge's own probability stays in the reason and, with every feature, in
``details["verdict_first"]["fused"]``. The flagged claims (fused P below ``explain_below``) are explained as the
verdict-first verifier explains its own (``explain``, ``explain_max``, ``relation_candidates``, ``verify_fix``).
A claim the judge could not score stays unscored, with the judge's reason.

``-o verifier=fused`` uses the file shipped with the package; ``-o verifier=fused:FILE`` (or
``-o verifier.model=FILE``) a file written by ``halluscope fit-verifier``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from halluscope.methods.fused.features import ClaimFeatures, claim_features
from halluscope.methods.fused.model import SHIPPED, FusedModel, FusedModelError, load_model
from halluscope.methods.verdict_first import VerdictFirst
from halluscope.options import OptionsError
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Verdict
from halluscope.stages import Context, PromptResolver, Selection, register_stage, same_prompt
from halluscope.stages.context import claim_id
from halluscope.stages.snippets import max_over_snippets

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM

SUPPORTED_AT = 0.5
"""A claim whose fused P(supported) reaches this is labelled supported."""


def _findings(f: ClaimFeatures) -> str:
    """The lexical findings behind a fused probability, in words (empty when there are none)."""
    parts = [
        f"{int(n)} {kind}{'s' if n != 1 else ''} the source never mentions"
        for kind, n in (("number", f.missing_numbers), ("date", f.missing_dates), ("name", f.missing_names))
        if n
    ]
    if f.negation_flip:
        parts.append("a negation flip against its closest source sentence")
    if f.whole_for_part:
        parts.append("a whole where the source gives a part")
    return "; ".join(parts)


def fused_verdict(verdict: Verdict, p: float, features: ClaimFeatures) -> Verdict:
    """The judge's verdict with the fused P(supported): the label from it (supported at :data:`SUPPORTED_AT`),
    the reason giving both probabilities and the lexical findings."""
    judge = "no probability" if features.judge_p is None else f"judge {features.judge_p:.3f}"
    found = _findings(features)
    reason = f"{verdict.reason}; fused P(supported) = {p:.3f} ({judge}, lexical support {features.gate_score:.2f}"
    reason += f"; {found})" if found else ")"
    supported = p >= SUPPORTED_AT
    return verdict.model_copy(
        update={
            "label": "supported" if supported else "unsupported",
            "score": 1.0 if supported else 0.0,
            "support_probability": p,
            "reason": reason[:1000],
            "decided_by": "fused",
        }
    )


@register_stage(
    "fused",
    "verifier",
    "verdict-first scoring fused with the claim's lexical support (gate findings, ROUGE precision) by a fitted "
    "logistic model: one calibrated P(supported) per claim, no extra LLM call (fused:FILE: a fit-verifier file)",
    argument="FILE",
    argument_option="model",
)
class FusedVerifier:
    """The fused verifier (see the module docstring): a :class:`VerdictFirst` judge and a :class:`FusedModel`."""

    name = "fused"
    uses_llm: ClassVar[bool] = True

    class Options(VerdictFirst.Options):
        model: str = ""
        """The fused verifier file (written by ``halluscope fit-verifier``); empty: the one shipped with halluscope."""

    def __init__(self, model: LLM, options: Any = None, *, prompts: PromptResolver = same_prompt):
        if model is None:
            raise TypeError("the fused verifier scores claims with an LLM judge first")
        opts = options if isinstance(options, FusedVerifier.Options) else FusedVerifier.Options()
        judge_options = VerdictFirst.Options(**opts.model_dump(exclude={"model"}))
        self.judge = VerdictFirst(model, judge_options, prompts=prompts)
        self.llm = model
        self.options = opts
        self.where = opts.model or f"halluscope/resources/{SHIPPED}"
        try:
            self.model: FusedModel = load_model(opts.model or None)
        except FusedModelError as exc:
            raise OptionsError(f"verifier=fused: {exc}") from exc

    def used_prompts(self) -> list[PromptTemplate]:
        return self.judge.used_prompts()

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        return self.judge.reserve_tokens(claims)

    async def fuse(self, verdicts: Sequence[Verdict], source: str) -> tuple[list[Verdict], dict[str, Any]]:
        """The judged verdicts with the fused P(supported) (unscored ones as they are), and the record of each
        claim's features and probabilities."""
        claims = [v.claim for v in verdicts]
        features = await claim_features(claims, list(verdicts), source, embeddings=self.model.uses_embeddings)
        probabilities = self.model.predict(features)
        out: list[Verdict] = []
        per_claim: dict[str, Any] = {}
        for verdict, f, p in zip(verdicts, features, probabilities):
            if verdict.label == "unscored":
                out.append(verdict)
                continue
            out.append(fused_verdict(verdict, p, f))
            per_claim[claim_id(verdict.claim)] = {"fused_p": round(p, 6), **f.record()}
        return out, {"model": self.where, "claims": per_claim}

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        """The Verifier protocol: every claim scored against one context and fused, the flagged ones explained."""
        scored = await asyncio.gather(*(self.judge.score(c, context, source) for c in claims))
        verdicts, _ = await self.fuse(scored, source)
        verdicts, _ = await self.judge.explain_all(verdicts, {claim_id(c): context for c in claims}, source, 0.0)
        return verdicts

    async def verify_selection(
        self, claims: Sequence[Claim], selection: Selection, source: str
    ) -> tuple[list[Verdict], dict[str, Any]]:
        """As :meth:`VerdictFirst.verify_selection`, with the fused probability set before the flagged claims are
        chosen and explained."""
        tried: dict[str, Any] = {}
        started = time.perf_counter()
        if selection.mode == "full":
            contexts = {claim_id(c): selection.contexts[claim_id(c)][0] for c in claims}
            verdicts = list(await asyncio.gather(*(self.judge.score(c, contexts[claim_id(c)]) for c in claims)))
        else:
            verdicts, tried = await max_over_snippets(
                claims, selection.contexts, lambda pairs: self.judge._round(pairs, source)
            )
            contexts = {
                claim_id(c): selection.contexts[claim_id(c)][0] for c in claims if selection.contexts.get(claim_id(c))
            }
        verdicts, fused = await self.fuse(verdicts, source)
        verdicts, record = await self.judge.explain_all(verdicts, contexts, source, time.perf_counter() - started)
        verdicts = [v if v.label == "unscored" else v.model_copy(update={"decided_by": "fused"}) for v in verdicts]
        return verdicts, {**tried, "verdict_first": {**record, "fused": fused}}
