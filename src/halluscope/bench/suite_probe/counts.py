"""The per-item counters of PROBE's step metrics: every metric is a ratio of their sums over items."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from halluscope.bench.suite_probe.gold import GoldClaim, read_gold
from halluscope.bench.suite_probe.matching import (
    EVIDENCE_MIN_OVERLAP,
    MIN_CLAIM_SIMILARITY,
    Similarity,
    _chars,
    _overlap,
    claim_similarity,
    hits,
    match_claim,
)
from halluscope.records import Claim, Example, Report, Span

FLAGGED = ("unsupported", "contradicted")
FOUND = ("verified", "retrieved")  # quote statuses that are passages of the source

COUNTERS = (
    "items",
    "items_gold",
    "items_complete",
    "items_gold_evidence",
    "items_steps",
    "items_claims",
    "dec_pred",
    "dec_pred_matched",
    "dec_pred_uncertain",
    "dec_gold",
    "dec_gold_matched",  # decomposition
    "gold_halluc",
    "gold_halluc_matched",
    "loc_pred_claims",
    "loc_pred_matched",
    "loc_unplaced",  # localization
    "loc_pred_chars",
    "loc_gold_chars",
    "loc_tp_chars",
    "ef_claims",
    "ef_partial",
    "ef_complete",
    "ef_unmatched",
    "ef_unusable",
    "ef_capped",  # evidence finding
    "ee_truth",
    "ee_truth_correct",
    "ee_halluc",
    "ee_halluc_correct",  # evidence evaluation
    "proxy_truth_claims",
    "proxy_truth_with_evidence",
    "proxy_ee_truth",
    "proxy_ee_truth_correct",
    "quotes",
    "quotes_verified",
)


def _steps(report: Report) -> dict[str, Any] | None:
    steps = report.details.get("steps") if isinstance(report.details, dict) else None
    return steps if isinstance(steps, dict) and "evidence_finding" in steps else None


def _max_evidence(report: Report) -> int | None:
    finder = (
        ((report.details or {}).get("verifier") or {}).get("evidence_finder")
        if isinstance(report.details, dict)
        else None
    )
    value = finder.get("max_evidence") if isinstance(finder, dict) else None
    return value if isinstance(value, int) else None


def item_counts(  # noqa: C901 - PROBE's per-item counts, one branch per outcome the paper tallies
    example: Example,
    report: Report,
    *,
    min_similarity: float = MIN_CLAIM_SIMILARITY,
    evidence_min_overlap: float = EVIDENCE_MIN_OVERLAP,
    similarity: Similarity = claim_similarity,
    worst: bool = False,
) -> dict[str, int]:
    """The counters of one (example, report) pair; every metric is a ratio of their sums over items.

    ``worst`` (the headline, :data:`worst_case.HEADLINE_RULE`): a gold claim the paper's step metric leaves out
    because the method gave it no outcome - no predicted claim matched it, its evidence search failed, no passage
    on its gold evidence was judged, a hallucinated claim had no decided judgment - is counted as a miss instead
    (evidence not found, judged wrong). Without it the counters are the paper's (evidence finding over the claims
    matched in the decomposition step)."""
    c: dict[str, int] = defaultdict(int)
    c["items"] = 1
    gold = read_gold(example)
    if gold is None:
        return {k: c.get(k, 0) for k in COUNTERS}
    c["items_gold"] = 1
    c["items_complete"] = int(gold.complete)
    c["items_gold_evidence"] = int(gold.has_evidence)
    claims = list(report.claims) or [v.claim for v in report.verdicts]
    c["items_claims"] = int(bool(claims))
    match = {id(cl): match_claim(cl, gold.claims, min_similarity, similarity) for cl in claims}

    def matched(claim: Claim) -> GoldClaim | None:
        if id(claim) not in match:
            match[id(claim)] = match_claim(claim, gold.claims, min_similarity, similarity)
        return match[id(claim)]

    # step 1: decomposition
    if gold.complete:
        for cl in claims:
            g = matched(cl)
            if g is not None and g.uncertain:
                c["dec_pred_uncertain"] += 1
                continue
            c["dec_pred"] += 1
            c["dec_pred_matched"] += g is not None
        certain = gold.certain
        c["dec_gold"] = len(certain)
        c["dec_gold_matched"] = sum(any(matched(cl) is g for cl in claims) for g in certain)
    c["gold_halluc"] = len(gold.hallucinated)
    c["gold_halluc_matched"] = sum(any(matched(cl) is g for cl in claims) for g in gold.hallucinated)

    # step 4: localization, in characters, after claim matching
    pred_spans: list[Span] = []
    tp_spans: list[Span] = []
    for v in report.verdicts:
        if v.label not in FLAGGED:
            continue
        g = matched(v.claim)
        if g is not None and g.uncertain:
            continue
        c["loc_pred_claims"] += 1
        c["loc_unplaced"] += not v.claim.target_spans
        pred_spans += v.claim.target_spans
        if g is not None and g.hallucinated and g.span is not None:
            c["loc_pred_matched"] += 1
            tp_spans += [
                Span(start=max(s.start, g.span.start), end=min(s.end, g.span.end))
                for s in v.claim.target_spans
                if _overlap(s, g.span)
            ]
    c["loc_pred_chars"] = len(_chars(pred_spans))
    c["loc_gold_chars"] = len(_chars([g.span for g in gold.hallucinated if g.span is not None]))
    c["loc_tp_chars"] = len(_chars(tp_spans))

    # steps 2-3: need the probe step record
    steps = _steps(report)
    if steps is None:
        return {k: c.get(k, 0) for k in COUNTERS}
    c["items_steps"] = 1
    finding = {f.get("claim_id"): f for f in steps.get("evidence_finding", [])}
    judged: dict[str, list[tuple[Span | None, bool]]] = defaultdict(list)  # decided judgments per claim id
    for e in steps.get("evidence_evaluation", []):
        if e.get("accepted") is not None:
            span = e.get("evidence_span")
            judged[e.get("claim_id")].append((Span(**span) if isinstance(span, dict) else None, bool(e["accepted"])))

    def found_spans(cl: Claim) -> list[Span] | None:
        """The finder's source passages for ``cl``; None when it has no usable search."""
        f = finding.get(cl.id)
        if f is None or f.get("error"):
            return None
        return [Span(**q["span"]) for q in f.get("quotes", []) if q.get("status") in FOUND and "span" in q]

    for cl in claims:
        f = finding.get(cl.id)
        if f is None or f.get("error"):
            continue
        quotes = f.get("quotes", [])
        c["quotes"] += sum(q.get("status") in ("verified", "rejected") for q in quotes)
        c["quotes_verified"] += sum(q.get("status") == "verified" for q in quotes)
        g = matched(cl)
        if g is not None and (g.hallucinated or g.uncertain):
            continue
        c["proxy_truth_claims"] += 1  # taken as truthful: matches no hallucinated or uncertain gold claim
        c["proxy_truth_with_evidence"] += bool(found_spans(cl))
        decided = judged.get(cl.id, [])
        if decided:
            c["proxy_ee_truth"] += 1
            c["proxy_ee_truth_correct"] += any(a for _, a in decided)

    by_gold: dict[int, list[Claim]] = defaultdict(list)  # keyed by the gold claim object
    for cl in claims:
        g = matched(cl)
        if g is not None and not g.uncertain:
            by_gold[id(g)].append(cl)
    for g in gold.certain:
        mine = by_gold.get(id(g), [])
        if g.hallucinated:
            decided = [a for cl in mine for _, a in judged.get(cl.id, [])]
            if decided:
                c["ee_halluc"] += 1
                c["ee_halluc_correct"] += not any(decided)
            elif worst:
                c["ee_halluc"] += 1
            continue
        if not g.evidence:
            continue
        if not mine:
            c["ef_unmatched"] += 1
            c["ef_claims"] += worst
            c["ee_truth"] += worst
            continue
        searches = [found_spans(cl) for cl in mine]
        usable = [s for s in searches if s is not None]
        if not usable:
            c["ef_unusable"] += 1
            c["ef_claims"] += worst
            c["ee_truth"] += worst
            continue
        found = [s for spans in usable for s in spans]
        hit = [any(hits(f, e, evidence_min_overlap) for f in found) for e in g.evidence]
        c["ef_claims"] += 1
        cap = _max_evidence(report)
        c["ef_capped"] += cap is not None and len(g.evidence) > cap  # "complete" is out of reach for this claim
        c["ef_partial"] += any(hit)
        c["ef_complete"] += all(hit)
        on_gold = [
            a
            for cl in mine
            for s, a in judged.get(cl.id, [])
            if s is not None and any(hits(s, e, evidence_min_overlap) for e in g.evidence)
        ]
        if on_gold:
            c["ee_truth"] += 1
            c["ee_truth_correct"] += all(on_gold)
        elif worst:
            c["ee_truth"] += 1
    return {k: c.get(k, 0) for k in COUNTERS}


def unscored_item_counts(example: Example, n_wrong: int) -> dict[str, int]:
    """The counters of an item the method left unscored, at the worst outcome it could have had
    (:data:`worst_case.HEADLINE_RULE`): ``n_wrong`` predicted claims (as many as the method gave on any scored
    item, at least one) matching no gold claim and flagged, covering every character of the target outside the
    hallucinated gold spans; no gold claim matched, no evidence found, every judgment wrong, every quote
    rejected."""
    n_wrong = max(1, n_wrong)
    c: dict[str, int] = defaultdict(int)
    c["items"] = 1
    gold = read_gold(example)
    if gold is None:
        return {k: c.get(k, 0) for k in COUNTERS}
    c.update(items_gold=1, items_complete=int(gold.complete), items_gold_evidence=int(gold.has_evidence))
    c.update(items_steps=1, items_claims=1)
    if gold.complete:
        c["dec_pred"] = n_wrong
        c["dec_gold"] = len(gold.certain)
    c["gold_halluc"] = len(gold.hallucinated)
    gold_chars = len(_chars([g.span for g in gold.hallucinated if g.span is not None]))
    c.update(
        loc_pred_claims=n_wrong, loc_gold_chars=gold_chars, loc_pred_chars=max(0, len(example.target) - gold_chars)
    )
    truths = [g for g in gold.certain if not g.hallucinated and g.evidence]
    c.update(ef_claims=len(truths), ee_truth=len(truths), ee_halluc=len(gold.hallucinated))
    c.update(proxy_truth_claims=n_wrong, proxy_ee_truth=n_wrong, quotes=n_wrong)
    return {k: c.get(k, 0) for k in COUNTERS}
