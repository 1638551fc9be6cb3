"""The one max over snippets (long-document stress-test paper Eq. 2): with retrieval, each claim is judged against its
snippets, best first, and keeps its best verdict (supported > contradicted > unsupported), stopping at the first snippet
that supports it; unscored only when a snippet that might have supported it could not be judged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from halluscope.records import Claim, Evidence, LLMCall, Relation, Verdict
from halluscope.stages import Context
from halluscope.stages.context import claim_id

LABEL_RANK = {"supported": 3, "contradicted": 2, "unsupported": 1, "unscored": 0}


def best_verdict(claim: Claim, tried: Sequence[tuple[Context, Verdict]]) -> Verdict:
    """A claim's verdict over its snippets: the best label (supported > contradicted > unsupported), the
    snippet it came from as evidence; unscored only when no snippet could be judged. All calls are kept."""
    calls = unique_calls([c for _, v in tried for c in v.calls])
    if not tried:
        return Verdict.unscored(claim, "retrieval found no source snippet for this claim")
    ctx, chosen = max(tried, key=lambda p: (LABEL_RANK[p[1].label], -p[0].rank))
    undecided = [(c, v) for c, v in tried if v.label == "unscored"]
    if chosen.label == "unscored" or (chosen.label != "supported" and undecided):
        # the max over snippets is unknown while a snippet that might support the claim could not be judged
        reasons = "; ".join(dict.fromkeys(f"snippet {c.rank + 1}: {v.reason}" for c, v in undecided))
        what = (
            "no snippet could be judged"
            if chosen.label == "unscored"
            else (f"{len(undecided)} of {len(tried)} snippets could not be judged and none supports the claim")
        )
        return Verdict.unscored(claim, f"{what}: {reasons}"[:1000], calls)
    evidence = list(chosen.evidence)
    if not any(e.span == ctx.span for e in evidence):
        relation: Relation = "supports" if chosen.label == "supported" else "related"
        evidence.append(Evidence(text=ctx.text, span=ctx.span, relation=relation))
    update: dict[str, Any] = {"claim": claim, "calls": calls, "evidence": evidence}
    probabilities = [v.support_probability for _, v in tried if v.label != "unscored"]
    if probabilities and None not in probabilities:  # Eq. 2's max, over P(supported) where every snippet has one
        update["support_probability"] = max(probabilities)  # type: ignore[type-var]
    return chosen.model_copy(update=update)


JudgeRound = Callable[[list[tuple[Claim, Context]]], Awaitable[list[Verdict]]]


async def max_over_snippets(
    claims: Sequence[Claim], contexts: Mapping[str, Sequence[Context]], judge_round: JudgeRound
) -> tuple[list[Verdict], dict[str, Any]]:
    """The long-document paper's Eq. 2: each claim judged against its snippets, best first, keeping its best verdict
    (:func:`best_verdict`) and stopping at the first supporting snippet (the max cannot rise further).

    It runs in rounds so that a verifier can share calls: every claim still open is judged against its next
    snippet in one ``judge_round(pairs)`` (one verdict per pair, in order). Returns the verdicts in claim order
    and ``{"per_snippet": {claim id: [{"rank", "label"}, ...]}}``, the labels per tried snippet."""
    snippets = {claim_id(c): list(contexts.get(claim_id(c), [])) for c in claims}
    tried: dict[str, list[tuple[Context, Verdict]]] = {claim_id(c): [] for c in claims}
    open_claims = [c for c in claims if snippets[claim_id(c)]]
    while open_claims:
        pairs = [(c, snippets[claim_id(c)][len(tried[claim_id(c)])]) for c in open_claims]
        verdicts = await judge_round(pairs)
        still_open = []
        for (claim, ctx), verdict in zip(pairs, verdicts):
            done = tried[claim_id(claim)]
            done.append((ctx, verdict))
            if verdict.label != "supported" and len(done) < len(snippets[claim_id(claim)]):
                still_open.append(claim)
        open_claims = still_open
    trace = {claim_id(c): [{"rank": ctx.rank, "label": v.label} for ctx, v in tried[claim_id(c)]] for c in claims}
    return [best_verdict(c, tried[claim_id(c)]) for c in claims], {"per_snippet": trace}


def unique_calls(calls: Sequence[LLMCall]) -> list[LLMCall]:
    """Each call once, in order (a call shared by several verdicts, e.g. a batch call, is kept once)."""
    seen: set[int] = set()
    out = []
    for call in calls:
        if id(call) not in seen:
            seen.add(id(call))
            out.append(call)
    return out
