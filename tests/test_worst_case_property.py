"""The headline rule (bench/worst_case.py): over hundreds of seeded random small inputs, the headline value of every
metric is never above the value of any concrete completion of the unscored items, enumerated from a grid of
candidate scores holding the observed scores, the midpoints between them and the ends of the score range."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from halluscope.bench import metrics as M
from halluscope.bench import worst_case as W
from halluscope.bench.builtin_suites import per_document_correlation

TOL = 1e-9


def _grid(observed: list[float], per_gap: int = 1, beyond: bool = False) -> list[float]:
    """The ends of the score range, the observed scores, ``per_gap`` points inside each gap between them (with
    one point per unscored item in every gap, every order of the unscored items is on the grid) and a few more.
    ``beyond``: the range widened by one on each side (Spearman and Kendall place unscored items in any order)."""
    lo, hi = W.score_interval(observed)
    if beyond:
        lo, hi = min([lo, *observed]) - 1, max([hi, *observed]) + 1
    values = sorted({lo, hi, *observed})
    inside = [a + (b - a) * j / (per_gap + 1) for a, b in zip(values, values[1:]) for j in range(1, per_gap + 1)]
    return sorted({*values, *inside, *np.linspace(lo, hi, 5).tolist()})


def _completions(scores: list[float | None], grid: list[float]) -> np.ndarray:
    miss = [i for i, s in enumerate(scores) if s is None]
    base = np.array([0.0 if s is None else s for s in scores])
    rows = np.repeat(base[None, :], len(grid) ** len(miss), axis=0)
    rows[:, miss] = np.array(list(itertools.product(grid, repeat=len(miss))))
    return rows


def _random_case(rng: np.random.Generator, n_max: int = 7, k_max: int = 3) -> tuple[list[float | None], np.ndarray]:
    n = int(rng.integers(3, n_max + 1))
    k = int(rng.integers(1, min(n, k_max) + 1))
    if rng.random() < 0.5:  # ties among the scores
        x = rng.choice([0.0, 0.2, 0.5, 0.5, 0.8, 1.0], n)
    else:
        x = rng.random(n).round(2)
    y = rng.choice([1.0, 2.0, 3.0, 4.0, 5.0], n)
    miss = set(rng.choice(n, k, replace=False).tolist())
    return [None if i in miss else float(x[i]) for i in range(n)], y


@pytest.mark.parametrize("name", W.CORRELATIONS)
def test_pooled_correlation_headline_is_no_higher_than_any_completion(name):
    rng = np.random.default_rng(20261204)
    checked = 0
    for _ in range(100):
        scores, y = _random_case(rng)
        worst = W.worst_correlation(name, scores, y)
        k = sum(s is None for s in scores)
        observed = [s for s in scores if s is not None]
        rows = _completions(scores, _grid(observed, per_gap=k, beyond=name != "pearson"))
        values = W.correlation_rows(name, rows, y)
        defined = values[~np.isnan(values)].tolist()
        if not defined:
            continue
        checked += 1
        assert worst.value is not None and worst.value <= min(defined) + TOL, (scores, y.tolist())
        if worst.exact:  # a completion attains it
            assert W.correlation_value(name, worst.filled, y) == pytest.approx(worst.value, abs=1e-9)
        if name != "pearson":  # order only: the grid holds every order, so the exact minimum is the grid's
            assert worst.value == pytest.approx(min(defined), abs=1e-9)
    assert checked > 60


@pytest.mark.parametrize("name", W.CORRELATIONS)
def test_per_document_headline_is_no_higher_than_any_completion(name):
    rng = np.random.default_rng(7)
    for _ in range(25):
        parts = [_random_case(rng, n_max=5, k_max=2) for _ in range(int(rng.integers(2, 4)))]
        scores = [s for p in parts for s in p[0]]
        y = np.concatenate([p[1] for p in parts])
        docs = [str(d) for d, p in enumerate(parts) for _ in p[0]]
        worst = W.worst_per_document(name, scores, y, docs)
        grid = _grid([s for s in scores if s is not None], beyond=name != "pearson")
        miss = [i for i, s in enumerate(scores) if s is None]
        rows = np.repeat(np.array([0.0 if s is None else s for s in scores])[None, :], 300, axis=0)
        rows[:, miss] = rng.choice(grid, (300, len(miss)))  # 300 random completions from the grid
        values = [per_document_correlation(r, y, docs, name) for r in rows]
        defined = [v for v in values if v is not None]
        if defined:
            assert worst.value is not None and worst.value <= min(defined) + TOL, (scores, y.tolist(), docs)
        if worst.exact and worst.value is not None:
            assert per_document_correlation(worst.filled, y, docs, name) == pytest.approx(worst.value, abs=1e-9)


def test_large_inputs_give_an_exact_value_or_a_named_bound_quickly():
    rng = np.random.default_rng(1)
    x = rng.random(400)
    y = x + rng.normal(0, 0.3, 400)
    scores = [None if i % 20 == 0 else float(v) for i, v in enumerate(x)]
    for name in W.CORRELATIONS:
        worst = W.worst_correlation(name, scores, y)
        scored_only = M.correlations([s for s in scores if s is not None], [h for s, h in zip(scores, y) if s])
        assert worst.value is not None and worst.value < scored_only[name]
        if worst.exact:
            assert W.correlation_value(name, worst.filled, y) == pytest.approx(worst.value, abs=1e-9)
        else:
            assert worst.how.startswith("bound") and worst.value <= W.correlation_value(name, worst.filled, y)


def test_set_metrics_headline_is_no_higher_than_any_completion():
    """AUC, balanced accuracy and P/R/F1 of either class with the unscored items on the wrong side; span and FINAL
    counts with the worst outcome: each against every completion."""
    rng = np.random.default_rng(11)
    for _ in range(60):
        scores, _ = _random_case(rng, n_max=6, k_max=2)
        labels = rng.integers(0, 2, len(scores)).tolist()
        filled = M.worst_case_scores(scores, labels)
        t = float(rng.choice([0.2, 0.5, 0.8]))
        rows = _completions(scores, _grid([s for s in scores if s is not None]))

        def metrics(x: np.ndarray, labels: list[int] = labels, t: float = t) -> dict[str, float | None]:
            pred = (x >= t).astype(int)
            out = {"auc": M.roc_auc(labels, x.tolist()), "bacc": M.balanced_accuracy_of(labels, pred)}
            for positive in (0, 1):
                for key, v in M.binary_prf(labels, pred.tolist(), positive).items():
                    out[f"{key}{positive}"] = v
            return out

        head = metrics(filled)
        for row in rows:
            for key, v in metrics(row).items():
                if v is not None:
                    assert head[key] is not None and head[key] <= v + TOL, key
    for _ in range(200):  # counts: (tp, predicted, gold) per item, micro
        scored = [tuple(int(v) for v in sorted(rng.integers(0, 4, 2))) for _ in range(int(rng.integers(0, 4)))]
        scored = [(tp, pred, int(tp + rng.integers(0, 3))) for tp, pred in scored]
        unscored = [(int(rng.integers(0, 4)), int(rng.integers(0, 6))) for _ in range(int(rng.integers(1, 3)))]
        # spans: an unscored item of target length L with g gold characters could overlap 0..g, add 0..L-g more
        head = M.prf_from_counts(*np.sum([*scored, *(W.worst_span_counts(g + extra, g) for g, extra in unscored)], 0))
        for choice in itertools.product(
            *[[(tp, tp + fp, g) for tp in range(g + 1) for fp in range(extra + 1)] for g, extra in unscored]
        ):
            done = M.prf_from_counts(*np.sum([*scored, *choice], 0))
            assert all(getattr(head, k) <= getattr(done, k) + TOL for k in ("precision", "recall", "f1"))
        # FINAL: an unscored item with g gold could match 0..g with 1..K predictions (K: the most on a scored item)
        most = max([1, *(p for _, p, _ in scored)])
        head = M.final_prf([*scored, *(W.worst_description_counts(g, most) for g, _ in unscored)])
        for choice in itertools.product(
            *[[(m, p, g) for p in range(0, most + 1) for m in range(min(g, p) + 1)] for g, _ in unscored]
        ):
            done = M.final_prf([*scored, *choice])
            assert all(getattr(head, k) <= getattr(done, k) + TOL for k in ("precision", "recall", "f1"))


def test_montage_auc_per_difficulty_headline_is_no_higher_than_any_completion():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(4, 8))
        groups = rng.choice(["g1", "g2"], n).tolist()
        diffs = rng.choice(["truth", "easy", "hard"], n).tolist()
        labels = [1 if d == "truth" else 0 for d in diffs]
        scores, _ = _random_case(rng, n_max=n, k_max=2)
        scores = (scores + [0.5] * n)[:n]
        filled = M.worst_case_scores(scores, labels)
        head = M.auc_per_difficulty(filled.tolist(), labels, groups, diffs)
        for row in _completions(scores, _grid([s for s in scores if s is not None])):
            done = M.auc_per_difficulty(row.tolist(), labels, groups, diffs)
            for key, v in done.items():
                if v is not None:
                    assert head[key] is not None and head[key] <= v + TOL


# --- the examples a reading of the earlier rule found --------------------------------------------------


def test_pearson_example_an_unscored_item_placed_just_outside_the_range_was_not_the_worst():
    # scored [0.6, 0.7, 0.8, 0.9] + one unscored item of human score 5: the earlier rule gave 0.243, yet a score of
    # 0.0 gives -0.447; the exact minimum over [0, 1] is that corner
    human = [1.0, 2.0, 3.0, 4.0, 5.0]
    worst = W.worst_correlation("pearson", [0.6, 0.7, 0.8, 0.9, None], human)
    assert M.correlations([0.6, 0.7, 0.8, 0.9, 0.0], human)["pearson"] == pytest.approx(-0.447, abs=1e-3)
    assert worst.exact and worst.value == pytest.approx(-0.447, abs=1e-3) and worst.filled[-1] == 0.0


def test_per_document_example_one_global_split_was_not_the_worst():
    # document a: the unscored item has the highest human score of its document but a low one overall; document
    # b the reverse. One split over all items (the earlier rule) could not put a's lowest and b's highest:
    # 0.25 (Spearman) where scoring them 0.0 and 1.0 gives -0.5
    human = np.array([1.0, 2.0, 3.0, 7.0, 8.0, 9.0])
    scores = [0.2, 0.4, None, None, 0.4, 0.6]
    docs = ["a", "a", "a", "b", "b", "b"]
    for name, expected in (("spearman", -0.5), ("kendall", -1 / 3)):
        completion = np.array([0.2, 0.4, 0.0, 1.0, 0.4, 0.6])
        assert per_document_correlation(completion, human, docs, name) == pytest.approx(expected)
        worst = W.worst_per_document(name, scores, human, docs)
        assert worst.exact and worst.value == pytest.approx(expected)


def test_kendall_example_with_ties_the_worst_placement_is_inside_the_range():
    scores = [0.4, 0.4, 0.8, 0.6, 0.2, None]
    human = [5.0, 5.0, 1.0, 1.0, 4.0, 3.0]
    ends = min(M.correlations([*scores[:-1], v], human)["kendall"] for v in (0.0, 0.1, 0.9, 1.0))
    inside = M.correlations([*scores[:-1], 0.5], human)["kendall"]
    worst = W.worst_correlation("kendall", scores, human)
    assert inside < ends - 0.2
    assert worst.exact and worst.value == pytest.approx(inside)


async def test_final_example_an_unscored_consistent_item_no_longer_raises_f1(tmp_path):
    # one item with 3 of 4 gold matched by 4 predictions, one consistent item: given 3 false descriptions F1 is
    # 6/11 = 0.545; left unscored it was counted as nothing predicted (0.750). Now it counts as 4 wrong ones
    # (the most the method gave on a scored item): 6/12 = 0.5, no higher than any outcome it could have had
    from halluscope.bench.builtin_suites import final_matching_suite
    from halluscope.bench.judge import MatchReply
    from halluscope.bench.suites import SuiteContext
    from halluscope.llm import LLM, FakeModel
    from halluscope.records import Example, Finding, Report

    examples = [
        Example(id="a", source="s", target="A.", descriptions=["g1", "g2", "g3", "g4"]),
        Example(id="b", source="s", target="B.", descriptions=[]),
    ]
    found = Report(method="m", score=0.1, findings=[Finding(description=f"p{i}") for i in range(1, 5)])
    reply = '{"matches": {"P1": "G1", "P2": "G2", "P3": "G3", "P4": null}}'
    judge = LLM(FakeModel(by_reply={MatchReply: lambda messages: reply}), cache=None)
    ctx = SuiteContext(out_dir=tmp_path, method="m", model="m", dataset="d", judge=judge, n_bootstrap=0)
    false_alarms = Report(method="m", score=0.2, findings=[Finding(description=f"f{i}") for i in range(3)])
    scored = (await final_matching_suite(examples, [found, false_alarms], ctx)).metrics
    assert scored["f1_all"]["value"] == pytest.approx(6 / 11)
    unscored = (await final_matching_suite(examples, [found, Report(method="m", unscored_reason="x")], ctx)).metrics
    assert unscored["f1"]["value"] == pytest.approx(0.75)  # over the scored item alone, beside the headline
    assert unscored["f1_all"]["value"] == pytest.approx(0.5) and unscored["worst_case_wrong_descriptions"] == 4
    assert unscored["precision_all"]["value"] <= scored["precision_all"]["value"]


def test_probe_example_an_unscored_item_no_longer_leaves_precision_and_evidence_finding_unchanged():
    from halluscope.bench.suite_probe import probe_metrics
    from halluscope.records import Example, Report
    from tests.test_probe_suite import GOLD_META, SOURCE, TARGET

    example = Example(id="x", source=SOURCE, target=TARGET, meta=GOLD_META)
    empty = probe_metrics([example], [Report(method="probe", score=1.0)], n_bootstrap=0, counts_every_item=True)
    worst = probe_metrics(
        [example], [Report(method="probe", unscored_reason="x")], n_bootstrap=0, counts_every_item=True
    )
    # as a scored report that found nothing, localization precision would be undefined (0/0) and the truthful
    # claims with evidence left out; at its worst the item flags every character outside the gold and finds nothing
    assert worst["localization_precision"]["value"] == 0.0
    assert worst["evidence_finding_partial"]["value"] == 0.0 and worst["counts"]["ef_claims"] >= 1
    assert empty["evidence_finding_partial"]["value"] in (None, 0.0)
