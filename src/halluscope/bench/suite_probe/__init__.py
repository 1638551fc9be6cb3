"""PROBE's step-wise metrics (PROBE paper §4.1-4.2), each computed only where the gold it needs exists.

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

from halluscope.bench.suite_probe.counts import COUNTERS, FLAGGED, FOUND, item_counts
from halluscope.bench.suite_probe.gold import Gold, GoldClaim, has_gold, read_gold
from halluscope.bench.suite_probe.matching import (
    EVIDENCE_MIN_OVERLAP,
    MIN_CLAIM_SIMILARITY,
    MIN_SEMANTIC_SIMILARITY,
    ClaimMatching,
    SemanticSimilarity,
    Similarity,
    claim_matcher,
    claim_similarity,
    hits,
    match_claim,
)
from halluscope.bench.suite_probe.metrics import (
    METRIC_KEYS,
    METRICS,
    NO_CLAIMS,
    NO_COMPLETE,
    NO_EVIDENCE,
    NO_GOLD,
    NO_STEPS,
    OWN_METRICS,
    PAPER_METRICS,
    probe_metrics,
)
from halluscope.bench.suite_probe.suite import probe_steps_suite  # registers the ``probe_steps`` suite

__all__ = [
    "COUNTERS",
    "EVIDENCE_MIN_OVERLAP",
    "FLAGGED",
    "FOUND",
    "METRICS",
    "METRIC_KEYS",
    "MIN_CLAIM_SIMILARITY",
    "MIN_SEMANTIC_SIMILARITY",
    "NO_CLAIMS",
    "NO_COMPLETE",
    "NO_EVIDENCE",
    "NO_GOLD",
    "NO_STEPS",
    "OWN_METRICS",
    "PAPER_METRICS",
    "ClaimMatching",
    "Gold",
    "GoldClaim",
    "SemanticSimilarity",
    "Similarity",
    "claim_matcher",
    "claim_similarity",
    "has_gold",
    "hits",
    "item_counts",
    "match_claim",
    "probe_metrics",
    "probe_steps_suite",
    "read_gold",
]
