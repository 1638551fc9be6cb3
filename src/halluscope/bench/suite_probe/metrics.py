"""PROBE's step metrics over items: the metric table, bootstrap CIs and the reasons a metric is not computable."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench.suite_probe.counts import COUNTERS, _max_evidence, item_counts, unscored_item_counts
from halluscope.bench.suite_probe.matching import (
    EVIDENCE_MIN_OVERLAP,
    MIN_CLAIM_SIMILARITY,
    Similarity,
    claim_similarity,
)
from halluscope.records import Example, Report

NO_GOLD = "no item has gold claims (meta.gold_claims, see docs/datasets.md)"
NO_CLAIMS = "the reports hold no claims (the method gives no claim verdicts)"
NO_COMPLETE = (
    "no item has the complete gold claim set (meta.gold_claims_complete; written by "
    "`halluscope generate inject --gold-evidence` or `reproduce probe --gold-model MODEL`)"
)
NO_EVIDENCE = (
    "no truthful gold claim carries gold evidence (written by `halluscope generate inject "
    "--gold-evidence` or `reproduce probe --gold-model MODEL`)"
)
NO_STEPS = "the reports carry no evidence-finding step record (details.steps, written by the probe method)"

# name -> (numerator, denominator, [(counter that must be > 0, reason otherwise), ...], reason for a zero denominator)
METRICS: dict[str, tuple[str, str, list[tuple[str, str]], str]] = {
    "decomposition_precision": (
        "dec_pred_matched",
        "dec_pred",
        [("items_complete", NO_COMPLETE), ("items_claims", NO_CLAIMS)],
        "no predicted claim outside uncertain gold claims",
    ),
    "decomposition_recall": (
        "dec_gold_matched",
        "dec_gold",
        [("items_complete", NO_COMPLETE), ("items_claims", NO_CLAIMS)],
        "no certain gold claim",
    ),
    "decomposition_recall_hallucinated": (
        "gold_halluc_matched",
        "gold_halluc",
        [("items_claims", NO_CLAIMS)],
        "the gold holds no hallucinated claim",
    ),
    "evidence_finding_partial": (
        "ef_partial",
        "ef_claims",
        [("items_gold_evidence", NO_EVIDENCE), ("items_steps", NO_STEPS)],
        "no truthful gold claim with evidence was matched by a predicted claim with a usable evidence search",
    ),
    "evidence_finding_complete": (
        "ef_complete",
        "ef_claims",
        [("items_gold_evidence", NO_EVIDENCE), ("items_steps", NO_STEPS)],
        "no truthful gold claim with evidence was matched by a predicted claim with a usable evidence search",
    ),
    "evidence_evaluation_accuracy_truth": (
        "ee_truth_correct",
        "ee_truth",
        [("items_gold_evidence", NO_EVIDENCE), ("items_steps", NO_STEPS)],
        "no matched truth claim had a passage on its gold evidence judged",
    ),
    "evidence_evaluation_accuracy_hallucinated": (
        "ee_halluc_correct",
        "ee_halluc",
        [("items_steps", NO_STEPS)],
        "no matched hallucinated claim had a judged passage",
    ),
    "localization_precision": (
        "loc_tp_chars",
        "loc_pred_chars",
        [("items_claims", NO_CLAIMS)],
        "no predicted hallucinated claim covers any character of the target",
    ),
    "localization_recall": (
        "loc_tp_chars",
        "loc_gold_chars",
        [("items_claims", NO_CLAIMS)],
        "the gold holds no hallucinated characters",
    ),
    "evidence_found_truth_proxy": (
        "proxy_truth_with_evidence",
        "proxy_truth_claims",
        [("items_steps", NO_STEPS)],
        "no predicted claim taken as truthful had a usable evidence search",
    ),
    "evidence_evaluation_accuracy_truth_proxy": (
        "proxy_ee_truth_correct",
        "proxy_ee_truth",
        [("items_steps", NO_STEPS)],
        "no predicted claim taken as truthful had a decided judgment",
    ),
    "quote_verified_rate": ("quotes_verified", "quotes", [("items_steps", NO_STEPS)], "the finder quoted nothing"),
}
PAPER_METRICS = (
    "decomposition_precision",
    "decomposition_recall",
    "evidence_finding_partial",
    "evidence_finding_complete",
    "evidence_evaluation_accuracy",
    "localization_precision",
    "localization_recall",
    "localization_f1",
)
OWN_METRICS = (
    "decomposition_recall_hallucinated",
    "evidence_evaluation_accuracy_truth",
    "evidence_evaluation_accuracy_hallucinated",
    "evidence_found_truth_proxy",
    "evidence_evaluation_accuracy_truth_proxy",
    "quote_verified_rate",
)
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


def probe_metrics(
    examples: Sequence[Example],
    reports: Sequence[Report],
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    min_similarity: float = MIN_CLAIM_SIMILARITY,
    evidence_min_overlap: float = EVIDENCE_MIN_OVERLAP,
    similarity: Similarity = claim_similarity,
    counts_every_item: bool = False,
) -> dict[str, Any]:
    """Every metric of :data:`METRIC_KEYS` as a CI dict (``reason`` added when it is null), plus ``counts``.
    ``evidence_finding_complete`` carries ``capped`` when some gold claims have more gold evidence passages than
    the finder was allowed to return (``max_evidence``): complete is then out of reach for them.
    ``counts_every_item`` (the headline, :data:`worst_case.HEADLINE_RULE`): the reports include unscored ones,
    each counted at its worst outcome (:func:`unscored_item_counts`), and a gold claim a scored report gave no
    outcome counts as a miss (``item_counts(worst=True)``); a metric is not refused because no report has claims
    or a step record - that is the worst outcome, counted - only because the gold lacks something."""
    n_wrong = max([1, *(len(r.claims) or len(r.verdicts) for r in reports if r.score is not None)])
    rows = [
        unscored_item_counts(e, n_wrong)
        if counts_every_item and r.score is None
        else item_counts(
            e,
            r,
            min_similarity=min_similarity,
            evidence_min_overlap=evidence_min_overlap,
            similarity=similarity,
            worst=counts_every_item,
        )
        for e, r in zip(examples, reports)
    ]
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
    out["localization_f1"] = ci(
        _f1(table), [("items_claims", NO_CLAIMS)], "no predicted and no gold hallucinated characters"
    )
    out["evidence_evaluation_accuracy"] = ci(
        _ee_accuracy(table),
        [("items_gold_evidence", NO_EVIDENCE), ("items_steps", NO_STEPS)],
        "no matched claim had a judged passage with a gold label",
    )
    out = {k: out[k] for k in METRIC_KEYS}
    caps = {c for c in (_max_evidence(r) for r in reports) if c is not None}
    if totals["ef_capped"]:
        out["evidence_finding_complete"]["capped"] = {
            "max_evidence": max(caps) if caps else None,
            "claims": totals["ef_capped"],
            "note": f"{totals['ef_capped']} of {totals['ef_claims']} claims have more gold evidence passages than "
            f"max_evidence={max(caps) if caps else '?'} allows: raise -o max_evidence to uncap",
        }
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
        out[name] = {
            "n": len(idx),
            **{
                k: m[k]["value"]
                for k in (
                    "localization_precision",
                    "localization_recall",
                    "localization_f1",
                    "decomposition_recall_hallucinated",
                )
            },
        }
    return out
