"""PROBE's step-wise metrics (seed 004 §4.1-4.2), each computed only where the gold it needs exists.

The gold lives in ``Example.meta`` (format: ``docs/datasets.md``, "Gold claims and evidence"; written by
``halluscope generate inject``, with truthful claims and evidence under ``--gold-evidence``):

- ``gold_claims``: ``[{"id", "text", "span": {start, end}, "hallucinated": bool, "evidence": [{start, end}, ...]}]``
  -- every hallucinated claim of the target (so the hallucinated set is exhaustive), and the truthful claims
  whose supporting source spans (``evidence``) the judges agreed on;
- ``gold_claims_complete``: true when every claim of the target is listed (the truthful ones too), either
  in ``gold_claims`` or in ``gold_claims_uncertain`` (claims of the text the gold could not confirm).

Older injected sets (``meta.injected_claims``, no ``gold_claims``) are read as hallucinated-only gold.

**Claim matching** (step 1, reused by every later step as in the paper). Each predicted claim is matched
to at most one gold claim: the most similar one among those with similarity >= ``min_similarity`` whose gold
span the predicted claim's target span overlaps. Similarity: ``lexical`` (default; rapidfuzz token-sort ratio of
the two claim texts, case and punctuation ignored, >= 70) or ``semantic`` (the paper says its matching is
semantic: cosine of the two claims' sentence embeddings >= 0.70, needs the embeddings extra; ``auto`` takes it
when installed). Chosen with ``HALLUSCOPE_CLAIM_MATCHING`` (or the suite context's ``claim_matching``) and
named in the results (``claim_matching``). A predicted claim with no target span is matched on its text alone. Several
predicted claims may match the same gold claim (a decomposer may split a fact in two). A predicted claim
matched to an *uncertain* gold claim is neither right nor wrong: it is left out of precision.

The paper's metrics (names as in the paper):

- ``decomposition_precision`` / ``decomposition_recall`` (needs the complete gold claim set): predicted
  claims matched to a gold claim / predicted claims; gold claims matched by some predicted claim / gold claims.
- ``evidence_finding_partial`` / ``evidence_finding_complete`` (needs gold evidence): over the truthful gold
  claims with gold evidence that some predicted claim matched: the finder's passages for the matched claim(s)
  (quotes ``verified`` in the source, or ``retrieved`` sentences) hit at least one / every gold evidence span.
  A passage hits a gold span when they share at least half of the shorter one's characters.
- ``evidence_evaluation_accuracy`` (needs gold evidence), split into ``..._truth`` and ``..._hallucinated``
  (the latter needs only the hallucinated gold): a truth claim is correct when the judges accepted every
  judged passage that hits its gold evidence (claims whose finder surfaced no gold evidence are left out: the
  paper isolates evaluation from retrieval); a hallucinated claim is correct when the judges accepted none of
  the passages found for it. Undecided judgments (too few valid votes) are ignored; a claim with none decided
  is left out.
- ``localization_precision`` / ``localization_recall`` / ``localization_f1``: predicted hallucinated claims
  (verdict ``unsupported``/``contradicted``) are matched to the gold claims (above); then, in characters of the
  target, true positives = the characters shared by a predicted hallucinated claim's span and the span of the
  gold *hallucinated* claim it matched; precision = TP / characters covered by predicted hallucinated claims,
  recall = TP / characters covered by gold hallucinated claims, F1 = 2 TP / (both denominators). A flagged
  claim that matches no gold hallucinated claim adds only to the precision denominator, however much it
  overlaps a gold span.

Our own measures, never under the paper's names:

- ``decomposition_recall_hallucinated``: gold hallucinated claims matched by some predicted claim / gold
  hallucinated claims (needs only the hallucinated gold; the paper's recall is over every gold claim).
- ``evidence_found_truth_proxy`` / ``evidence_evaluation_accuracy_truth_proxy``: without gold evidence, over
  predicted claims not matched to a hallucinated (or uncertain) gold claim, taken as truthful: the share for
  which the finder returned a source passage / the share (of those with a decided judgment) with an accepted
  passage. They assume the finder surfaced real support; they measure no gold evidence.
- ``quote_verified_rate``: model quotes located in the source / model quotes (verified + rejected).

Every metric is micro-averaged (sums over items, then divided) with a bootstrap CI over items, stored as
``{"value", "low", "high", "n", "resamples"}``; when it cannot be computed ``value`` is null and ``reason``
says why. Unscored reports are left out and counted. A claim whose evidence search failed in every context
(``error`` on its ``evidence_finding`` entry) is left out of the evidence metrics and counted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
import os
from typing import Any, Literal

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from halluscope.bench import metrics as M
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite, scored_pairs
from halluscope.records import Claim, Example, Report, Span

FLAGGED = ("unsupported", "contradicted")
FOUND = ("verified", "retrieved")  # quote statuses that are passages of the source
MIN_CLAIM_SIMILARITY = 70.0
"""rapidfuzz token-sort ratio (0-100) two claim texts need to be matched."""
EVIDENCE_MIN_OVERLAP = 0.5
"""A found passage hits a gold evidence span when they share this fraction of the shorter one's characters."""


# --- gold ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldClaim:
    id: str
    text: str
    span: Span | None
    hallucinated: bool
    evidence: tuple[Span, ...] = ()
    uncertain: bool = False  # a claim of the text the gold could not confirm (no consensus evidence)


@dataclass(frozen=True)
class Gold:
    claims: tuple[GoldClaim, ...]  # certain and uncertain
    complete: bool  # every claim of the target is listed

    @property
    def certain(self) -> list[GoldClaim]:
        return [g for g in self.claims if not g.uncertain]

    @property
    def hallucinated(self) -> list[GoldClaim]:
        return [g for g in self.claims if g.hallucinated and not g.uncertain]

    @property
    def has_evidence(self) -> bool:
        return any(g.evidence for g in self.certain if not g.hallucinated)


def _span(value: Any, where: str) -> Span:
    try:
        return Span(start=value["start"], end=value["end"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: not a span {{start, end}}: {value!r}") from exc


def _gold_claim(entry: Any, target: str, source: str, where: str, uncertain: bool = False) -> GoldClaim:
    if not isinstance(entry, dict) or not isinstance(entry.get("text"), str) or not entry["text"].strip():
        raise ValueError(f"{where}: a gold claim needs a non-empty 'text'")
    hallucinated = entry.get("hallucinated", False if uncertain else None)
    if not isinstance(hallucinated, bool):
        raise ValueError(f"{where}: 'hallucinated' must be true or false")
    span = _span(entry["span"], where) if entry.get("span") is not None else None
    if span is None and hallucinated and not uncertain:
        raise ValueError(f"{where}: a hallucinated gold claim needs its 'span' in the target")
    if span is not None and span.end > len(target):
        raise ValueError(f"{where}: span {span.start}-{span.end} is outside the target ({len(target)} chars)")
    evidence = tuple(_span(e, f"{where} evidence") for e in entry.get("evidence") or [])
    if any(e.end > len(source) for e in evidence):
        raise ValueError(f"{where}: an evidence span is outside the source ({len(source)} chars)")
    return GoldClaim(id=str(entry.get("id", where)), text=entry["text"].strip(), span=span,
                     hallucinated=hallucinated, evidence=evidence, uncertain=uncertain)


def read_gold(example: Example) -> Gold | None:
    """The example's gold claims, or None when it has none. Raises ValueError on malformed gold."""
    meta = example.meta or {}
    if "gold_claims" in meta:
        claims = [_gold_claim(c, example.target, example.source, f"{example.id}: gold_claims[{i}]")
                  for i, c in enumerate(meta["gold_claims"] or [])]
        claims += [_gold_claim(c, example.target, example.source, f"{example.id}: gold_claims_uncertain[{i}]",
                               uncertain=True)
                   for i, c in enumerate(meta.get("gold_claims_uncertain") or [])]
        return Gold(tuple(claims), bool(meta.get("gold_claims_complete", False)))
    if "injected_claims" in meta:  # sets written by `generate inject` before gold_claims existed
        claims = [_gold_claim({"id": f"h{i + 1}", "text": c.get("fact") or c.get("inserted_text"),
                               "span": c.get("span"), "hallucinated": True},
                              example.target, example.source, f"{example.id}: injected_claims[{i}]")
                  for i, c in enumerate(meta["injected_claims"])]
        return Gold(tuple(claims), False)
    if meta.get("generator") == "inject" and example.label == 1:  # an older inject truth: nothing hallucinated
        return Gold((), False)
    return None


def has_gold(example: Example) -> bool:
    meta = example.meta or {}
    return "gold_claims" in meta or "injected_claims" in meta or (meta.get("generator") == "inject"
                                                                   and example.label == 1)


# --- matching ------------------------------------------------------------------------------------------------


def claim_similarity(a: str, b: str) -> float:
    return float(fuzz.token_sort_ratio(a, b, processor=default_process))


Similarity = Callable[[str, str], float]  # 0-100, compared with ``min_similarity``
ClaimMatching = Literal["lexical", "semantic", "auto"]
MIN_SEMANTIC_SIMILARITY = 70.0  # cosine >= 0.70 of the two claims' sentence embeddings, as 0-100


class SemanticSimilarity:
    """Cosine of two claims' sentence embeddings (seed 003's encoder, ``retrieval.load_encoder``), scaled to
    0-100; texts are encoded once each."""

    def __init__(self, model: str | None = None):
        from halluscope.retrieval import DEFAULT_EMBEDDING_MODEL, load_encoder

        self.model_name = model or DEFAULT_EMBEDDING_MODEL
        self.encoder = load_encoder(self.model_name)
        self._vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if todo:
            for t, v in zip(todo, self.encoder.encode(todo, normalize_embeddings=True)):
                self._vectors[t] = np.asarray(v, dtype=float)

    def __call__(self, a: str, b: str) -> float:
        self.encode([a, b])
        return float(np.dot(self._vectors[a], self._vectors[b])) * 100


def claim_matcher(kind: ClaimMatching = "lexical") -> tuple[Similarity, float, str]:
    """(similarity, threshold, name) for claim matching. ``semantic`` needs the embeddings extra; ``auto`` is
    semantic when it is installed, else lexical. The name goes into the results (which matching gave a number)."""
    if kind not in ("lexical", "semantic", "auto"):
        raise ValueError(f"claim matching must be lexical, semantic or auto, got {kind!r}")
    if kind != "lexical":
        from halluscope.retrieval import EmbeddingsUnavailable, embeddings_available

        if kind == "semantic" or embeddings_available():
            try:
                sim = SemanticSimilarity()
                return sim, MIN_SEMANTIC_SIMILARITY, (f"semantic ({sim.model_name} cosine >= "
                                                      f"{MIN_SEMANTIC_SIMILARITY / 100:.2f}, spans overlapping)")
            except (EmbeddingsUnavailable, OSError) as exc:
                if kind == "semantic":
                    raise ValueError(f"semantic claim matching is unavailable: {exc}") from exc
    return claim_similarity, MIN_CLAIM_SIMILARITY, (f"lexical (token-sort ratio >= {MIN_CLAIM_SIMILARITY:.0f}, "
                                                    "spans overlapping)")


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def match_claim(claim: Claim, gold: Sequence[GoldClaim], min_similarity: float = MIN_CLAIM_SIMILARITY,
                similarity: Similarity = claim_similarity) -> GoldClaim | None:
    """``claim``'s gold claim (see module docstring), or None. Ties go to the larger span overlap, then the
    first gold claim."""
    best, best_key = None, None
    for g in gold:
        sim = similarity(claim.text, g.text)
        if sim < min_similarity:
            continue
        overlap = max((_overlap(s, g.span) for s in claim.target_spans), default=0) if g.span is not None else 0
        if claim.target_spans and g.span is not None and overlap == 0:
            continue
        key = (sim, overlap)
        if best_key is None or key > best_key:
            best, best_key = g, key
    return best


def hits(found: Span, gold: Span, min_overlap: float = EVIDENCE_MIN_OVERLAP) -> bool:
    """Whether a found passage hits a gold evidence span (shares ``min_overlap`` of the shorter one)."""
    shorter = min(len(found), len(gold))
    return shorter > 0 and _overlap(found, gold) >= min_overlap * shorter


def _chars(spans: Sequence[Span]) -> set[int]:
    return {i for s in spans for i in range(s.start, s.end)}


# --- per-item counters ---------------------------------------------------------------------------------------

COUNTERS = (
    "items", "items_gold", "items_complete", "items_gold_evidence", "items_steps", "items_claims",
    "dec_pred", "dec_pred_matched", "dec_pred_uncertain", "dec_gold", "dec_gold_matched",   # decomposition
    "gold_halluc", "gold_halluc_matched",
    "loc_pred_claims", "loc_pred_matched", "loc_unplaced",                                   # localization
    "loc_pred_chars", "loc_gold_chars", "loc_tp_chars",
    "ef_claims", "ef_partial", "ef_complete", "ef_unmatched", "ef_unusable", "ef_capped",    # evidence finding
    "ee_truth", "ee_truth_correct", "ee_halluc", "ee_halluc_correct",                        # evidence evaluation
    "proxy_truth_claims", "proxy_truth_with_evidence", "proxy_ee_truth", "proxy_ee_truth_correct",
    "quotes", "quotes_verified",
)


def _steps(report: Report) -> dict[str, Any] | None:
    steps = report.details.get("steps") if isinstance(report.details, dict) else None
    return steps if isinstance(steps, dict) and "evidence_finding" in steps else None


def _max_evidence(report: Report) -> int | None:
    finder = ((report.details or {}).get("verifier") or {}).get("evidence_finder") if isinstance(report.details, dict) else None
    value = finder.get("max_evidence") if isinstance(finder, dict) else None
    return value if isinstance(value, int) else None


def item_counts(example: Example, report: Report, *, min_similarity: float = MIN_CLAIM_SIMILARITY,
                evidence_min_overlap: float = EVIDENCE_MIN_OVERLAP,
                similarity: Similarity = claim_similarity) -> dict[str, int]:
    """The counters of one (example, report) pair; every metric is a ratio of their sums over items."""
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
            tp_spans += [Span(start=max(s.start, g.span.start), end=min(s.end, g.span.end))
                         for s in v.claim.target_spans if _overlap(s, g.span)]
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
            continue
        if not g.evidence:
            continue
        if not mine:
            c["ef_unmatched"] += 1
            continue
        searches = [found_spans(cl) for cl in mine]
        usable = [s for s in searches if s is not None]
        if not usable:
            c["ef_unusable"] += 1
            continue
        found = [s for spans in usable for s in spans]
        hit = [any(hits(f, e, evidence_min_overlap) for f in found) for e in g.evidence]
        c["ef_claims"] += 1
        cap = _max_evidence(report)
        c["ef_capped"] += cap is not None and len(g.evidence) > cap  # "complete" is out of reach for this claim
        c["ef_partial"] += any(hit)
        c["ef_complete"] += all(hit)
        on_gold = [a for cl in mine for s, a in judged.get(cl.id, [])
                   if s is not None and any(hits(s, e, evidence_min_overlap) for e in g.evidence)]
        if on_gold:
            c["ee_truth"] += 1
            c["ee_truth_correct"] += all(on_gold)
    return {k: c.get(k, 0) for k in COUNTERS}


# --- metrics -------------------------------------------------------------------------------------------------

NO_GOLD = "no item has gold claims (meta.gold_claims, see docs/datasets.md)"
NO_CLAIMS = "the reports hold no claims (the method gives no claim verdicts)"
NO_COMPLETE = ("no item has the complete gold claim set (meta.gold_claims_complete; written by "
               "`halluscope generate inject --gold-evidence` or `reproduce probe -b gold_evidence=true`)")
NO_EVIDENCE = ("no truthful gold claim carries gold evidence (written by `halluscope generate inject "
               "--gold-evidence` or `reproduce probe -b gold_evidence=true`)")
NO_STEPS = "the reports carry no evidence-finding step record (details.steps, written by the probe method)"

# name -> (numerator, denominator, [(counter that must be > 0, reason otherwise), ...], reason for a zero denominator)
METRICS: dict[str, tuple[str, str, list[tuple[str, str]], str]] = {
    "decomposition_precision": ("dec_pred_matched", "dec_pred",
                                [("items_complete", NO_COMPLETE), ("items_claims", NO_CLAIMS)],
                                "no predicted claim outside uncertain gold claims"),
    "decomposition_recall": ("dec_gold_matched", "dec_gold",
                             [("items_complete", NO_COMPLETE), ("items_claims", NO_CLAIMS)], "no certain gold claim"),
    "decomposition_recall_hallucinated": ("gold_halluc_matched", "gold_halluc", [("items_claims", NO_CLAIMS)],
                                          "the gold holds no hallucinated claim"),
    "evidence_finding_partial": ("ef_partial", "ef_claims", [("items_gold_evidence", NO_EVIDENCE),
                                                             ("items_steps", NO_STEPS)],
                                 "no truthful gold claim with evidence was matched by a predicted claim with a "
                                 "usable evidence search"),
    "evidence_finding_complete": ("ef_complete", "ef_claims", [("items_gold_evidence", NO_EVIDENCE),
                                                               ("items_steps", NO_STEPS)],
                                  "no truthful gold claim with evidence was matched by a predicted claim with a "
                                  "usable evidence search"),
    "evidence_evaluation_accuracy_truth": ("ee_truth_correct", "ee_truth", [("items_gold_evidence", NO_EVIDENCE),
                                                                            ("items_steps", NO_STEPS)],
                                           "no matched truth claim had a passage on its gold evidence judged"),
    "evidence_evaluation_accuracy_hallucinated": ("ee_halluc_correct", "ee_halluc", [("items_steps", NO_STEPS)],
                                                  "no matched hallucinated claim had a judged passage"),
    "localization_precision": ("loc_tp_chars", "loc_pred_chars", [("items_claims", NO_CLAIMS)],
                               "no predicted hallucinated claim covers any character of the target"),
    "localization_recall": ("loc_tp_chars", "loc_gold_chars", [("items_claims", NO_CLAIMS)],
                            "the gold holds no hallucinated characters"),
    "evidence_found_truth_proxy": ("proxy_truth_with_evidence", "proxy_truth_claims", [("items_steps", NO_STEPS)],
                                   "no predicted claim taken as truthful had a usable evidence search"),
    "evidence_evaluation_accuracy_truth_proxy": ("proxy_ee_truth_correct", "proxy_ee_truth",
                                                 [("items_steps", NO_STEPS)],
                                                 "no predicted claim taken as truthful had a decided judgment"),
    "quote_verified_rate": ("quotes_verified", "quotes", [("items_steps", NO_STEPS)], "the finder quoted nothing"),
}
PAPER_METRICS = ("decomposition_precision", "decomposition_recall", "evidence_finding_partial",
                 "evidence_finding_complete", "evidence_evaluation_accuracy", "localization_precision",
                 "localization_recall", "localization_f1")
OWN_METRICS = ("decomposition_recall_hallucinated", "evidence_evaluation_accuracy_truth",
               "evidence_evaluation_accuracy_hallucinated", "evidence_found_truth_proxy",
               "evidence_evaluation_accuracy_truth_proxy", "quote_verified_rate")
METRIC_KEYS = PAPER_METRICS + OWN_METRICS
"""Every metric key ``probe_metrics`` returns (each a CI dict); stable, listed in docs/probe.md."""


def _sum(table: np.ndarray, idx: np.ndarray, name: str) -> float:
    return float(table[idx, COUNTERS.index(name)].sum())


def _ratio(table: np.ndarray, num: str, den: str) -> Callable[[np.ndarray], float | None]:
    def stat(idx: np.ndarray) -> float | None:
        d = _sum(table, idx, den)
        return _sum(table, idx, num) / d if d else None

    return stat


def _f1(table: np.ndarray) -> Callable[[np.ndarray], float | None]:
    """2 TP / (predicted + gold characters): the harmonic mean of P and R where both exist, 0 when nothing
    was flagged but something was hallucinated (or the reverse), undefined when neither."""

    def stat(idx: np.ndarray) -> float | None:
        den = _sum(table, idx, "loc_pred_chars") + _sum(table, idx, "loc_gold_chars")
        return 2 * _sum(table, idx, "loc_tp_chars") / den if den else None

    return stat


def _ee_accuracy(table: np.ndarray) -> Callable[[np.ndarray], float | None]:
    def stat(idx: np.ndarray) -> float | None:
        den = _sum(table, idx, "ee_truth") + _sum(table, idx, "ee_halluc")
        return (_sum(table, idx, "ee_truth_correct") + _sum(table, idx, "ee_halluc_correct")) / den if den else None

    return stat


def probe_metrics(examples: Sequence[Example], reports: Sequence[Report], *, n_bootstrap: int = 1000, seed: int = 0,
                  min_similarity: float = MIN_CLAIM_SIMILARITY, evidence_min_overlap: float = EVIDENCE_MIN_OVERLAP,
                  similarity: Similarity = claim_similarity, counts_every_item: bool = False) -> dict[str, Any]:
    """Every metric of :data:`METRIC_KEYS` as a CI dict (``reason`` added when it is null), plus ``counts``.
    ``evidence_finding_complete`` carries ``capped`` when some gold claims have more gold evidence passages than
    the finder was allowed to return (``max_evidence``): complete is then out of reach for them.
    ``counts_every_item``: the reports include unscored ones (emptied): a metric is not refused because no report
    has claims or a step record - that is the worst outcome, counted - only because the gold lacks something."""
    rows = [item_counts(e, r, min_similarity=min_similarity, evidence_min_overlap=evidence_min_overlap,
                        similarity=similarity) for e, r in zip(examples, reports)]
    table = np.array([[row[k] for k in COUNTERS] for row in rows], dtype=float).reshape(-1, len(COUNTERS))
    totals = {k: int(table[:, i].sum()) for i, k in enumerate(COUNTERS)}
    all_idx = np.arange(len(rows))

    def ci(stat: Callable[[np.ndarray], float | None], needs: list[tuple[str, str]], empty: str) -> dict[str, Any]:
        if counts_every_item:
            needs = [(k, why) for k, why in needs if k not in ("items_claims", "items_steps")]
        reason = NO_GOLD if not totals["items_gold"] else next((why for k, why in needs if not totals[k]), None)
        if reason is None and stat(all_idx) is None:
            reason = empty
        if reason is not None:
            return {"value": None, "low": None, "high": None, "n": len(rows), "resamples": 0, "reason": reason}
        return M.bootstrap_ci(stat, len(rows), n_resamples=n_bootstrap, seed=seed)

    out: dict[str, Any] = {}
    for name, (num, den, needs, empty) in METRICS.items():
        out[name] = ci(_ratio(table, num, den), needs, empty)
    out["localization_f1"] = ci(_f1(table), [("items_claims", NO_CLAIMS)],
                                "no predicted and no gold hallucinated characters")
    out["evidence_evaluation_accuracy"] = ci(
        _ee_accuracy(table), [("items_gold_evidence", NO_EVIDENCE), ("items_steps", NO_STEPS)],
        "no matched claim had a judged passage with a gold label")
    out = {k: out[k] for k in METRIC_KEYS}
    caps = {c for c in (_max_evidence(r) for r in reports) if c is not None}
    if totals["ef_capped"]:
        out["evidence_finding_complete"]["capped"] = {
            "max_evidence": max(caps) if caps else None, "claims": totals["ef_capped"],
            "note": f"{totals['ef_capped']} of {totals['ef_claims']} claims have more gold evidence passages than "
                    f"max_evidence={max(caps) if caps else '?'} allows: raise -o max_evidence to uncap"}
    out["counts"] = totals
    return out


def _by_difficulty(examples: list[Example], reports: list[Report], **kw: Any) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        groups[e.difficulty or "-"].append(i)
    out = {}
    for name in sorted(groups):
        idx = groups[name]
        m = probe_metrics([examples[i] for i in idx], [reports[i] for i in idx], n_bootstrap=0, **kw)
        out[name] = {"n": len(idx), **{k: m[k]["value"] for k in ("localization_precision", "localization_recall",
                                                                   "localization_f1",
                                                                   "decomposition_recall_hallucinated")}}
    return out


@register_suite("probe_steps", applies=lambda examples: any(has_gold(e) for e in examples))
def probe_steps_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    from halluscope.bench.builtin_suites import md_table

    from halluscope.bench.builtin_suites import both, with_coverage

    with_gold = [(e, r) for e, r in zip(examples, reports) if has_gold(e)]
    exs, reps, n_unscored = scored_pairs([e for e, _ in with_gold], [r for _, r in with_gold])
    kind = ctx.extra.get("claim_matching") or os.environ.get("HALLUSCOPE_CLAIM_MATCHING", "").strip() or "lexical"
    similarity, threshold, matching = claim_matcher(kind)
    kw = {"n_bootstrap": ctx.n_bootstrap, "seed": ctx.seed, "similarity": similarity, "min_similarity": threshold}
    m = probe_metrics(exs, reps, **kw)
    # every item: an unscored report counts as one that found nothing (no claim, no evidence, no span)
    every = probe_metrics([e for e, _ in with_gold],
                          [r if r.score is not None else Report(method=r.method, unscored_reason=r.unscored_reason)
                           for _, r in with_gold], counts_every_item=True, **kw)
    for key in METRIC_KEYS:
        m[key] = with_coverage(m[key], len(exs), len(with_gold))
        m[f"{key}_all"] = with_coverage(every[key], len(exs), len(with_gold))
    m["counts_all"] = every["counts"]
    m.update({"n": len(with_gold), "n_scored": len(exs), "n_unscored": n_unscored,
              "coverage": M.coverage(len(exs), len(with_gold)), "claim_matching": matching})
    m["by_difficulty"] = _by_difficulty(exs, reps, similarity=similarity, min_similarity=threshold)
    counts = m["counts"]
    result = SuiteResult(metrics=m)
    title = (f"PROBE step metrics as the paper defines them (coverage {len(exs)}/{len(with_gold)}; 'all' counts an "
             f"unscored item as finding nothing; {counts['items_complete']} with complete gold claims, "
             f"{counts['items_gold_evidence']} with gold evidence; claim matching {matching}"
             + (f"; EF complete capped: {m['evidence_finding_complete']['capped']['note']}"
                if m["evidence_finding_complete"].get("capped") else "")
             + "; '-' = not computable, reasons in results.json)")
    result.tables.append((title, md_table(
        ["decomp. P", "decomp. R", "EF partial", "EF complete", "EE acc.", "loc. P (chars)", "loc. R (chars)",
         "loc. F1"],
        [[both(m, k) for k in PAPER_METRICS]])))
    result.tables.append(("Our own PROBE measures (not the paper's metrics; proxies assume what gold lacks)", md_table(
        ["decomp. R (halluc. gold)", "EE acc. truth", "EE acc. halluc.", "EF truth proxy", "EE acc. truth proxy",
         "quotes verified"],
        [[both(m, k) for k in OWN_METRICS]])))
    if len(m["by_difficulty"]) > 1:
        result.tables.append((
            "PROBE localization by difficulty",
            md_table(["difficulty", "n", "loc. P", "loc. R", "loc. F1", "decomp. R (halluc. gold)"],
                     [[d, v["n"], v["localization_precision"], v["localization_recall"], v["localization_f1"],
                       v["decomposition_recall_hallucinated"]] for d, v in m["by_difficulty"].items()]),
        ))
    return result
