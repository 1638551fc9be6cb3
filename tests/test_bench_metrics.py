"""Metric functions against hand-computed values and against scikit-learn / scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from halluscope.bench import metrics as M
from halluscope.records import Span

# the reference implementations the metrics are tested against are in the bench extra
sklearn_metrics = pytest.importorskip(
    "sklearn.metrics", reason="scikit-learn is in the bench extra: pip install 'halluscope[bench]'"
)
balanced_accuracy_score = sklearn_metrics.balanced_accuracy_score
roc_auc_score = sklearn_metrics.roc_auc_score


def test_roc_auc_hand_computed_and_sklearn():
    labels = [1, 1, 0, 0]
    scores = [0.9, 0.4, 0.5, 0.1]
    # pairs (pos, neg): (0.9,0.5) (0.9,0.1) (0.4,0.5)x (0.4,0.1) -> 3/4
    assert M.roc_auc(labels, scores) == pytest.approx(0.75)
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200).tolist()
    s = rng.random(200).tolist()
    assert M.roc_auc(y, s) == pytest.approx(roc_auc_score(y, s))


def test_roc_auc_one_class_is_undefined():
    assert M.roc_auc([1, 1, 1], [0.1, 0.2, 0.3]) is None


def test_best_threshold_maximizes_balanced_accuracy():
    labels = [0, 0, 0, 1, 1, 1]
    scores = [0.1, 0.2, 0.6, 0.5, 0.7, 0.9]
    t = M.best_threshold(labels, scores)
    # brute force over every candidate cut
    best = max(balanced_accuracy_score(labels, [int(s >= c) for s in scores]) for c in scores)
    assert M.balanced_accuracy(labels, scores, t) == pytest.approx(best)
    assert t == pytest.approx(0.7)  # 0.5 and 0.7 both give 5/6: ties go to the highest
    assert M.best_threshold([1, 1], [0.2, 0.3]) is None
    assert M.best_threshold(labels, scores, ties="lowest") == pytest.approx(0.5)


def test_best_threshold_is_youdens_j_on_the_roc_curve():
    """The exact comparison gives scikit-learn's ROC answer (highest of the ties) on random scores with ties."""
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        y = rng.integers(0, 2, n).tolist()
        s = (rng.integers(0, 6, n) / 5).tolist()
        if len(set(y)) < 2:
            continue
        fpr, tpr, thresholds = roc_curve(y, s)
        j = np.where(np.isfinite(thresholds), tpr - fpr, -np.inf)
        assert M.best_threshold(y, s) == float(thresholds[int(np.flatnonzero(j >= j.max() - 1e-12)[0])])


def test_balanced_accuracy_hand_computed():
    labels = [1, 1, 0, 0, 0]
    scores = [0.8, 0.3, 0.2, 0.9, 0.1]
    # threshold 0.5 -> predicted [1,0,0,1,0]: TPR 1/2, TNR 2/3 -> 7/12
    assert M.balanced_accuracy(labels, scores, 0.5) == pytest.approx(7 / 12)


def test_binary_prf_inconsistent_is_positive():
    labels = [0, 0, 1, 1]
    predicted = [0, 1, 0, 1]  # one of two inconsistent found, one false alarm
    assert M.binary_prf(labels, predicted) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert M.binary_prf([1, 1], [1, 1]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_correlations_match_scipy():
    rng = np.random.default_rng(3)
    x = rng.random(50)
    y = x + rng.normal(0, 0.3, 50)
    got = M.correlations(x.tolist(), y.tolist())
    assert got["pearson"] == pytest.approx(stats.pearsonr(x, y).statistic)
    assert got["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert got["kendall"] == pytest.approx(stats.kendalltau(x, y).statistic)
    assert M.correlations([0.5, 0.5, 0.5], [1, 2, 3]) == {"pearson": None, "spearman": None, "kendall": None}
    assert M.correlations([1, 2, 3], [1, 2, 3])["kendall"] == pytest.approx(1.0)


def test_auc_per_difficulty_pairs_truths_with_their_groups_lies():
    # group a: truth 0.9, easy lie 0.2, hard lie 0.95; group b: truth 0.5, easy lie 0.6; group c: lie only
    scores = [0.9, 0.2, 0.95, 0.5, 0.6, 0.0]
    labels = [1, 0, 0, 1, 0, 0]
    groups = ["a", "a", "a", "b", "b", "c"]
    diffs = ["truth", "easy", "hard", "truth", "easy", "easy"]
    out = M.auc_per_difficulty(scores, labels, groups, diffs)
    # easy: truths {0.9, 0.5} vs lies {0.2, 0.6} (group c has no truth: left out)
    # pairs: 0.9>0.2, 0.9>0.6, 0.5>0.2, 0.5<0.6 -> 3/4
    assert out["easy"] == pytest.approx(0.75)
    # hard: only group a: truth 0.9 vs lie 0.95 -> 0
    assert out["hard"] == pytest.approx(0.0)
    assert out["average"] == pytest.approx(0.375)
    assert list(out) == ["easy", "hard", "average"]


def test_auc_per_difficulty_truth_by_label_without_difficulty_name():
    out = M.auc_per_difficulty([0.9, 0.1], [1, 0], ["g", "g"], [None, "medium"])
    assert out == {"medium": 1.0, "average": 1.0}


def test_ordered_difficulties():
    assert M.ordered_difficulties(["zeta", "hard", "truth", "easy", "alpha"]) == ["easy", "hard", "alpha", "zeta"]


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        ([Span(start=0, end=10)], [Span(start=5, end=15)], (0.5, 0.5, 0.5)),
        ([Span(start=0, end=4)], [Span(start=0, end=8)], (1.0, 0.5, 2 / 3)),
        ([], [], (1.0, 1.0, 1.0)),  # nothing predicted, nothing to find: perfect agreement
        ([], [Span(start=0, end=3)], (0.0, 0.0, 0.0)),  # missed everything
        ([Span(start=0, end=3)], [], (0.0, 0.0, 0.0)),  # flagged a clean text
        # overlapping predicted spans are merged, not double counted
        ([Span(start=0, end=6), Span(start=3, end=8)], [Span(start=0, end=8)], (1.0, 1.0, 1.0)),
    ],
)
def test_span_prf_cases(pred, gold, expected):
    got = M.span_prf(pred, gold)
    assert (got.precision, got.recall, got.f1) == pytest.approx(expected)


def test_span_prf_micro_sums_counts_before_dividing():
    items = [
        ([Span(start=0, end=10)], [Span(start=0, end=10)]),  # 10 tp
        ([Span(start=0, end=10)], []),  # 10 fp
        ([], [Span(start=0, end=20)]),  # 20 fn
    ]
    got = M.span_prf_micro(items)
    assert got.precision == pytest.approx(10 / 20)
    assert got.recall == pytest.approx(10 / 30)
    assert got.f1 == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))


def test_count_matched_gold_counts_distinct_gold():
    assert M.count_matched_gold({0: 1, 1: 1, 2: None, 3: 0}) == 2
    assert M.count_matched_gold([None, None]) == 0
    assert M.count_matched_gold({}) == 0


def test_final_prf_penalizes_repeats_and_consistent_items():
    items = [
        (1, 3, 2),  # three predictions, all about gold #1 -> 1 distinct match out of 2 gold
        (0, 2, 0),  # consistent item, two predictions -> two false positives
        (0, 0, 1),  # nothing predicted, one gold missed
    ]
    got = M.final_prf(items)
    assert got.recall == pytest.approx(1 / 3)
    assert got.precision == pytest.approx(1 / 5)
    assert got.f1 == pytest.approx(2 * (1 / 3) * (1 / 5) / (1 / 3 + 1 / 5))


def test_bootstrap_ci_is_seeded_and_brackets_the_value():
    x = np.linspace(0, 1, 40)

    def mean(idx):
        return float(x[idx].mean())

    a = M.bootstrap_ci(mean, len(x), n_resamples=300, seed=7)
    b = M.bootstrap_ci(mean, len(x), n_resamples=300, seed=7)
    c = M.bootstrap_ci(mean, len(x), n_resamples=300, seed=8)
    assert a == b and a != c
    assert a["low"] < a["value"] < a["high"]
    assert a["value"] == pytest.approx(0.5)
    assert a["n"] == 40 and a["resamples"] == 300


def test_bootstrap_drops_undefined_resamples_and_keeps_clusters_whole():
    labels = np.array([1, 0] * 5)
    scores = np.array([0.9, 0.1] * 5)
    clusters = [i // 2 for i in range(10)]  # each cluster holds one truth and one lie

    def auc(idx):
        return M.roc_auc(labels[idx].tolist(), scores[idx].tolist())

    out = M.bootstrap_ci(auc, 10, n_resamples=200, seed=0, clusters=clusters)
    # cluster resampling always keeps both classes, so no resample is undefined and AUC stays 1
    assert out["resamples"] == 200 and out["low"] == out["high"] == 1.0
    # item resampling of a 2-item set: resamples with one class only are dropped, not scored
    two = M.bootstrap_ci(
        lambda idx: M.roc_auc(labels[:2][idx].tolist(), scores[:2][idx].tolist()), 2, n_resamples=200, seed=0
    )
    assert 0 < two["resamples"] < 200


def test_bootstrap_undefined_value_gives_no_interval():
    out = M.bootstrap_ci(lambda idx: None, 5, n_resamples=50)
    assert out["value"] is None and out["low"] is None and out["high"] is None
    assert M.bootstrap_ci(lambda idx: 1.0, 0)["value"] is None


def test_fast_metrics_equal_sklearn_on_random_data():
    from sklearn.metrics import precision_recall_fscore_support

    rng = np.random.default_rng(5)
    for _ in range(20):
        y = rng.integers(0, 2, 60)
        s = np.round(rng.random(60), 1)  # coarse scores: many ties
        assert M.roc_auc(y, s) == pytest.approx(roc_auc_score(y, s))
        pred = (s >= 0.5).astype(int)
        assert M.balanced_accuracy_of(y, pred) == pytest.approx(balanced_accuracy_score(y, pred))
        p, r, f, _ = precision_recall_fscore_support(y, pred, pos_label=0, average="binary", zero_division=0)
        assert M.binary_prf(y, pred) == pytest.approx({"precision": p, "recall": r, "f1": f})


def test_brier_and_ece_read_the_score_as_p_consistent() -> None:
    labels = [1, 1, 0, 0]
    assert M.brier_score(labels, [1.0, 1.0, 0.0, 0.0]) == 0.0
    assert M.brier_score(labels, [0.5] * 4) == pytest.approx(0.25)
    assert M.brier_score(labels, [0.8, 0.6, 0.4, 0.0]) == pytest.approx((0.04 + 0.16 + 0.16 + 0.0) / 4)
    assert M.brier_score([], []) is None and M.expected_calibration_error([], []) is None
    # two bins hold items: [0.8, 0.8] with 1 of 2 consistent (gap 0.3), [0.1, 0.1] with 0 of 2 (gap 0.1)
    assert M.expected_calibration_error([1, 0, 0, 0], [0.8, 0.8, 0.1, 0.1]) == pytest.approx((2 * 0.3 + 2 * 0.1) / 4)
    assert M.expected_calibration_error([1, 0], [1.0, 0.0]) == 0.0  # 1.0 falls in the last bin
    # a brier from the sklearn definition
    from sklearn.metrics import brier_score_loss

    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 50), rng.random(50)
    assert M.brier_score(y.tolist(), p.tolist()) == pytest.approx(brier_score_loss(y, p))
