"""Metric functions with plain signatures (lists in, numbers out), reusable by any suite.

Conventions
- Scores are "higher = more consistent"; label 1 = consistent, 0 = inconsistent.
- A metric that is undefined on its input (one class only, constant scores, no items) returns ``None``,
  never a made-up number; :func:`bootstrap_ci` drops resamples where the metric is undefined.
- Detection metrics (binary P/R/F1, spans, FINAL matching) treat *inconsistent* as the positive class.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from halluscope.records import Span

TRUTH = "truth"
DIFFICULTY_ORDER = ("easy", "medium", "hard", "extreme")


def _clean(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


# --- ranking / threshold metrics -------------------------------------------------------------------


def roc_auc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """AUC-ROC of ``scores`` for separating label 1 (consistent) from label 0; None with one class.

    Computed as the Mann-Whitney U statistic from scipy's tie-aware ranks, which equals scikit-learn's
    ``roc_auc_score`` (tested) at a fraction of its per-call cost; bootstraps call this thousands of times."""
    from scipy.stats import rankdata

    y = np.asarray(labels)
    n_pos = int((y == 1).sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(np.asarray(scores, dtype=float))
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def brier_score(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    """Mean squared difference between the score read as P(consistent) and the gold label (1 = consistent): 0 is
    perfect, 0.25 what a constant 0.5 gets. None without items."""
    if len(labels) == 0:
        return None
    y = np.asarray(labels, dtype=float)
    return float(np.mean((np.asarray(scores, dtype=float) - y) ** 2))


def expected_calibration_error(labels: Sequence[int], scores: Sequence[float], bins: int = 10) -> float | None:
    """ECE of the score read as P(consistent): over ``bins`` equal-width bins of the score, the item-weighted mean
    of |fraction consistent - mean score| (the last bin includes 1.0). None without items."""
    if len(labels) == 0:
        return None
    y = np.asarray(labels, dtype=float)
    x = np.clip(np.asarray(scores, dtype=float), 0.0, 1.0)
    which = np.minimum((x * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.sum() * abs(y[inside].mean() - x[inside].mean())
    return float(total / len(y))


def best_threshold(
    labels: Sequence[int], scores: Sequence[float], *, ties: Literal["highest", "lowest"] = "highest"
) -> float | None:
    """The threshold ``t`` (predict consistent when ``score >= t``), one of the scores, that maximizes balanced
    accuracy on these items, i.e. Youden's J on the ROC curve. Balanced accuracies are compared exactly (as
    fractions of the class counts), so equal ones tie: ``ties`` picks the highest threshold among them (the bench's
    choice) or the lowest (the one ``train-verifier`` writes). None with one class."""
    y = np.asarray(labels, dtype=np.int64)
    x = np.asarray(scores, dtype=float)
    pos = int((y == 1).sum())
    neg = len(y) - pos
    if not pos or not neg:
        return None
    cuts = np.unique(x)  # ascending
    order = np.argsort(x, kind="stable")
    ranks = np.searchsorted(cuts, x[order])
    below_pos = np.concatenate(([0], np.cumsum(np.bincount(ranks, weights=y[order] == 1, minlength=len(cuts)))))
    below_neg = np.concatenate(([0], np.cumsum(np.bincount(ranks, weights=y[order] != 1, minlength=len(cuts)))))
    tp = pos - below_pos[:-1]  # positives with score >= each cut
    tn = below_neg[:-1]  # negatives with score < each cut
    merit = (tp * neg + tn * pos).astype(np.int64)  # balanced accuracy times 2 * pos * neg: exact integers
    best = np.flatnonzero(merit == merit.max())
    return float(cuts[best[-1] if ties == "highest" else best[0]])


def _confusion(
    labels: Sequence[int], predicted: Sequence[int] | npt.NDArray[Any], positive: int
) -> tuple[int, int, int, int]:
    y, p = np.asarray(labels), np.asarray(predicted)
    tp = int(((y == positive) & (p == positive)).sum())
    fp = int(((y != positive) & (p == positive)).sum())
    fn = int(((y == positive) & (p != positive)).sum())
    return tp, fp, fn, len(y) - tp - fp - fn


def balanced_accuracy(labels: Sequence[int], scores: Sequence[float], threshold: float) -> float | None:
    """Balanced accuracy of "consistent iff score >= threshold"; None with one class in ``labels``."""
    predicted = (np.asarray(scores, dtype=float) >= threshold).astype(int)
    return balanced_accuracy_of(labels, predicted)


def balanced_accuracy_of(labels: Sequence[int], predicted: Sequence[int] | npt.NDArray[Any]) -> float | None:
    """Mean per-class recall (scikit-learn's ``balanced_accuracy_score``, tested equal); None with one class."""
    tp, fp, fn, tn = _confusion(labels, predicted, positive=1)
    if tp + fn == 0 or tn + fp == 0:
        return None
    return (tp / (tp + fn) + tn / (tn + fp)) / 2


def binary_prf(labels: Sequence[int], predicted: Sequence[int], positive: int = 0) -> dict[str, float]:
    """Precision, recall and F1 for detecting class ``positive`` (default 0 = inconsistent).
    A ratio with a zero denominator is 0 (as scikit-learn's ``zero_division=0``, tested equal)."""
    tp, fp, fn, _ = _confusion(labels, predicted, positive)
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f}


# --- correlations ----------------------------------------------------------------------------------


def correlations(scores: Sequence[float], human: Sequence[float]) -> dict[str, float | None]:
    """Pearson, Spearman and Kendall (tau-b) between method scores and human scores (scipy).
    None when fewer than 3 items or either side is constant."""
    from scipy import stats

    if len(scores) < 3 or len(set(scores)) < 2 or len(set(human)) < 2:
        return {"pearson": None, "spearman": None, "kendall": None}
    return {
        "pearson": _clean(stats.pearsonr(scores, human).statistic),
        "spearman": _clean(stats.spearmanr(scores, human).statistic),
        "kendall": _clean(stats.kendalltau(scores, human).statistic),
    }


# --- MontageLie AUC per difficulty -----------------------------------------------------------------


def auc_per_difficulty(
    scores: Sequence[float],
    labels: Sequence[int | None],
    groups: Sequence[Hashable],
    difficulties: Sequence[str | None],
) -> dict[str, float | None]:
    """MontageLie protocol (DoveScore paper §3.3): for each lie difficulty, AUC-ROC of the truths against the lies
    of that difficulty, using only groups that have both (a group's truths are its items with label 1 or
    difficulty "truth"). Returns ``{difficulty: auc, ..., "average": mean of the defined ones}``."""
    truths_by_group: dict[Hashable, list[float]] = {}
    lies: dict[str, dict[Hashable, list[float]]] = {}
    for s, lab, g, d in zip(scores, labels, groups, difficulties):
        if d == TRUTH or lab == 1:
            truths_by_group.setdefault(g, []).append(s)
        elif d is not None:
            lies.setdefault(d, {}).setdefault(g, []).append(s)
    out: dict[str, float | None] = {}
    for d in ordered_difficulties(lies):
        y: list[int] = []
        x: list[float] = []
        for g, lie_scores in lies[d].items():
            if g not in truths_by_group:
                continue
            y += [1] * len(truths_by_group[g]) + [0] * len(lie_scores)
            x += truths_by_group[g] + lie_scores
        out[d] = roc_auc(y, x)
    defined = [v for v in out.values() if v is not None]
    out["average"] = float(np.mean(defined)) if defined else None
    return out


def ordered_difficulties(names: Iterable[str]) -> list[str]:
    """easy, medium, hard, extreme first (in that order), then any other names alphabetically."""
    names = set(names) - {TRUTH}
    known = [d for d in DIFFICULTY_ORDER if d in names]
    return known + sorted(names - set(DIFFICULTY_ORDER))


# --- counts -> P/R/F1 ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PRF:
    precision: float
    recall: float
    f1: float

    def as_dict(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1}


def prf_from_counts(tp: int, n_pred: int, n_gold: int) -> PRF:
    """P = tp/n_pred, R = tp/n_gold. Empty cases: nothing predicted and nothing gold is perfect agreement
    (P = R = F1 = 1); otherwise a ratio with a zero denominator is 0."""
    if n_pred == 0 and n_gold == 0:
        return PRF(1.0, 1.0, 1.0)
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return PRF(p, r, f)


# --- character-level spans -------------------------------------------------------------------------


def _chars(spans: Iterable[Span]) -> set[int]:
    out: set[int] = set()
    for s in spans:
        out.update(range(s.start, s.end))
    return out


def span_counts(pred_spans: Iterable[Span], gold_spans: Iterable[Span]) -> tuple[int, int, int]:
    """(overlapping chars, predicted chars, gold chars) for one item; overlapping spans are merged."""
    pred, gold = _chars(pred_spans), _chars(gold_spans)
    return len(pred & gold), len(pred), len(gold)


def span_prf(pred_spans: Iterable[Span], gold_spans: Iterable[Span]) -> PRF:
    """Character-level P/R/F1 of predicted vs gold spans of one text (empty cases: :func:`prf_from_counts`)."""
    return prf_from_counts(*span_counts(pred_spans, gold_spans))


def span_prf_micro(items: Iterable[tuple[Iterable[Span], Iterable[Span]]]) -> PRF:
    """Micro-averaged character P/R/F1 over many (pred_spans, gold_spans) items: counts are summed first."""
    tp = n_pred = n_gold = 0
    for pred, gold in items:
        a, b, c = span_counts(pred, gold)
        tp, n_pred, n_gold = tp + a, n_pred + b, n_gold + c
    return prf_from_counts(tp, n_pred, n_gold)


# --- FINAL description matching --------------------------------------------------------------------


def count_matched_gold(matches: dict[int, int | None] | Sequence[int | None]) -> int:
    """Distinct gold items matched by at least one prediction: repeats of one gold item count once, so a
    method that repeats itself gains predictions (lower precision) but no true positives (FINAL paper §D)."""
    values = matches.values() if isinstance(matches, dict) else matches
    return len({g for g in values if g is not None})


def final_prf(items: Iterable[tuple[int, int, int]]) -> PRF:
    """Micro P/R/F1 over items given as (distinct gold matched, n_predictions, n_gold):
    recall = matched gold / gold, precision = matched gold / predictions (FINAL paper §4.2)."""
    tp = n_pred = n_gold = 0
    for a, b, c in items:
        tp, n_pred, n_gold = tp + a, n_pred + b, n_gold + c
    return prf_from_counts(tp, n_pred, n_gold)


# --- bootstrap -------------------------------------------------------------------------------------


def bootstrap_ci(
    statistic: Callable[[np.ndarray], float | None],
    n_items: int,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
) -> dict[str, float | int | None]:
    """Percentile bootstrap CI of ``statistic(indices)``, where ``indices`` is a resample (with replacement)
    of ``range(n_items)``. With ``clusters`` (one key per item, e.g. a montage group) whole clusters are
    resampled, so a truth stays with its lies. Resamples where the statistic is undefined (None/NaN, e.g.
    one class only) are dropped and counted. Returns ``{"value", "low", "high", "n", "resamples"}``.

    (Hand-written rather than ``scipy.stats.bootstrap`` because we need cluster resampling and must drop
    undefined resamples instead of turning the whole interval into NaN.)"""
    all_idx = np.arange(n_items)
    value = _clean(statistic(all_idx)) if n_items else None
    result: dict[str, float | int | None] = {"value": value, "low": None, "high": None, "n": n_items, "resamples": 0}
    if value is None or n_items < 2 or n_resamples < 1:
        return result
    rng = np.random.default_rng(seed)
    if clusters is not None:
        keys = list(dict.fromkeys(clusters))
        members: dict[Hashable, list[int]] = {k: [] for k in keys}
        for i, k in enumerate(clusters):
            members[k].append(i)
        member_arrays = [np.asarray(members[k]) for k in keys]
    stats: list[float] = []
    for _ in range(n_resamples):
        if clusters is not None:
            picks = rng.integers(0, len(member_arrays), len(member_arrays))
            idx = np.concatenate([member_arrays[p] for p in picks])
        else:
            idx = rng.integers(0, n_items, n_items)
        v = _clean(statistic(idx))
        if v is not None:
            stats.append(v)
    if stats:
        alpha = (1 - confidence) / 2
        result["low"] = float(np.quantile(stats, alpha))
        result["high"] = float(np.quantile(stats, 1 - alpha))
    result["resamples"] = len(stats)
    return result


def format_ci(ci: dict[str, Any] | None) -> str:
    """A :func:`bootstrap_ci` result as table text: ``value [low, high]``, the value alone when the interval
    is undefined, ``-`` when there is no value."""
    if not ci or ci.get("value") is None:
        return "-"
    if ci.get("low") is None or ci.get("high") is None:
        return f"{ci['value']:.3f}"
    return f"{ci['value']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


# --- unscored items: coverage and "counts every item" values ---------------------------------------


def coverage(n_scored: int, n_total: int) -> dict[str, int | float | None]:
    """How many of the items a value rests on: ``{"scored", "total", "share"}`` (share None with no item)."""
    return {"scored": int(n_scored), "total": int(n_total), "share": round(n_scored / n_total, 4) if n_total else None}


def worst_case_scores(scores: Sequence[float | None], labels: Sequence[int | None] | None = None) -> np.ndarray:
    """``scores`` with every unscored item (None) given the worst outcome it could have, so a metric over all
    items counts it against the method instead of leaving it out (:data:`worst_case.HEADLINE_RULE`).

    With ``labels`` (1 = consistent): a consistent item gets -inf and an inconsistent one +inf, so it ranks on the
    wrong side of every threshold and every pair: the exact minimum of AUC, balanced accuracy and P/R/F1 of
    either class (:data:`worst_case.SET_RULE`). Without labels: the lowest rank, just below the lowest scored item
    (ties among the unscored); correlations against graded human scores use
    :func:`worst_case.worst_correlation` instead, where the lowest rank is not the worst case."""
    values = [float(s) for s in scores if s is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    out = np.empty(len(scores), dtype=float)
    for i, s in enumerate(scores):
        if s is not None:
            out[i] = float(s)
        elif labels is None:
            out[i] = lo - 1e-6 * max(1.0, hi - lo)
        else:
            out[i] = -np.inf if labels[i] == 1 else np.inf
    return out


def fewer_items_note(a_scored: int, a_total: int, b_scored: int, b_total: int) -> str | None:
    """What a comparison of two runs must say when one rests on fewer items (None when both cover the same)."""
    if (a_scored, a_total) == (b_scored, b_total):
        return None
    return (
        f"not like for like: {a_scored}/{a_total} vs {b_scored}/{b_total} items scored; compare the values "
        "that count every item"
    )
