"""Unscored items are counted (coverage beside every value, and a value where an unscored item
is the worst outcome), FINAL's variant choice cannot win on fewer items, and the choice can be held out."""

from __future__ import annotations

import json

import pytest

from halluscope.bench import metrics as M
from halluscope.bench.builtin_suites import binary_suite, correlation_suite, fmt_cov, montage_suite, span_suite
from halluscope.bench.calibration import holdout_split
from halluscope.bench.datasets import Dataset
from halluscope.bench.reproduce.core import Metric, _metric_value, main_table
from halluscope.bench.suites import SuiteContext
from halluscope.methods.localize.protocol import VariantScore, choose_variant
from halluscope.records import Example, Finding, Report, Span


def _ctx(tmp_path) -> SuiteContext:
    return SuiteContext(out_dir=tmp_path, method="m", model="m", dataset="d", n_bootstrap=0)


def _report(score: float | None, label: str | None = None) -> Report:
    if score is None:
        return Report(method="m", unscored_reason="failed on a hard item")
    return Report(
        method="m", score=score, threshold=0.5, label=label or ("consistent" if score >= 0.5 else "inconsistent")
    )


def test_worst_case_scores_put_unscored_items_on_the_wrong_side():
    filled = M.worst_case_scores([0.9, None, 0.1, None], [1, 1, 0, 0])
    assert filled[1] < 0.1 and filled[3] > 0.9  # a truth below every score, a lie above every score
    low = M.worst_case_scores([0.4, None, 0.2])
    assert low[1] < 0.2 and low[0] == 0.4  # lowest rank without labels


def test_binary_auc_counts_the_unscored_hard_item(tmp_path):
    # the method separates the items it scores perfectly but gives up on one inconsistent item
    exs = [Example(id=str(i), source="s", target="t", label=lab) for i, lab in enumerate([1, 1, 0, 0])]
    reps = [_report(0.9), _report(0.8), _report(0.1), _report(None)]
    m = binary_suite(exs, reps, _ctx(tmp_path)).metrics
    assert m["auc"]["value"] == 1.0  # the old, flattering value over scored items is still there...
    assert m["auc"]["coverage"] == {"scored": 3, "total": 4, "share": 0.75}
    assert m["auc_all"]["value"] == pytest.approx(0.5)  # ...but the value counting every item is not flattered
    assert m["inconsistent_recall_all"]["value"] == pytest.approx(0.5)  # the unscored lie is a miss
    assert m["balanced_accuracy_at_method_threshold_all"]["value"] == pytest.approx(0.75)


def test_binary_table_shows_coverage_beside_the_value(tmp_path):
    exs = [Example(id=str(i), source="s", target="t", label=lab) for i, lab in enumerate([1, 1, 0, 0])]
    res = binary_suite(exs, [_report(0.9), _report(0.8), _report(0.1), _report(None)], _ctx(tmp_path))
    table = res.tables[0][1]
    assert "all 4" in table and "on 3/4 scored" in table


def test_correlation_puts_an_unscored_top_rated_item_at_the_lowest_rank(tmp_path):
    human = [0.1, 0.3, 0.5, 0.7, 0.9]
    exs = [Example(id=str(i), source=f"doc {i}", target="t", human_score=h) for i, h in enumerate(human)]
    reps = [_report(0.1), _report(0.3), _report(0.5), _report(0.7), _report(None)]  # the best item unscored
    m = correlation_suite(exs, reps, _ctx(tmp_path)).metrics
    assert m["spearman"]["value"] == pytest.approx(1.0) and m["spearman"]["coverage"]["scored"] == 4
    assert m["spearman_all"]["value"] == pytest.approx(0.0)  # ranks 2,3,4,5,1 against 1..5
    assert m["level"] == "pooled" and "per_document" not in m  # every document once: nothing to average


def test_montage_auc_counts_an_unscored_lie_as_ranked_above_the_truth(tmp_path):
    exs = [
        Example(id="t", source="s", target="a", label=1, group="g", difficulty="truth"),
        Example(id="e", source="s", target="b", label=0, group="g", difficulty="easy"),
        Example(id="h", source="s", target="c", label=0, group="g", difficulty="hard"),
    ]
    m = montage_suite(exs, [_report(0.9), _report(0.1), _report(None)], _ctx(tmp_path)).metrics
    assert m["auc_easy_all"]["value"] == 1.0 and m["auc_hard_all"]["value"] == 0.0
    assert m["auc_hard"]["value"] is None  # scored only: the hard lie is simply gone


def test_span_recall_counts_an_unscored_item_as_a_miss(tmp_path):
    exs = [Example(id=str(i), source="s", target="abcdefghij", gold_spans=[Span(start=0, end=5)]) for i in range(2)]
    found = Report(method="m", score=0.2, findings=[Finding(description="x", target_spans=[Span(start=0, end=5)])])
    m = span_suite(exs, [found, _report(None)], _ctx(tmp_path)).metrics
    assert m["char_recall"]["value"] == 1.0 and m["char_recall_all"]["value"] == 0.5


def test_reproduce_headline_counts_every_item_and_shows_coverage():
    results = {
        "n": 4,
        "n_scored": 3,
        "n_unscored": 1,
        "metrics": {
            "binary": {
                "auc": {"value": 1.0, "low": None, "high": None, "n": 3, "coverage": M.coverage(3, 4)},
                "auc_all": {"value": 0.5, "low": None, "high": None, "n": 4, "coverage": M.coverage(3, 4)},
            }
        },
    }
    ours, reason = _metric_value(results, Metric("auc", "AUC", "binary", ("auc",)))
    assert reason is None and ours["value"] == 0.5 and ours["scored"]["value"] == 1.0
    assert ours["coverage"]["scored"] == 3 and ours["coverage"]["total"] == 4
    record = {
        "paper_row": "r",
        "id": "r",
        "n": 4,
        "n_unscored": 1,
        "model": "m",
        "judge_model": "m",
        "metrics": [{"label": "AUC", "paper": None, "ours": ours, "reason": None}],
    }
    line = main_table({"rows": [record]}).splitlines()[2]
    assert "| 0.500 | 1.000 | 3/4 | m (= evaluated model) |" in line


def test_variant_with_fewer_scored_items_is_not_called_better():
    # variant 1 scores a perfect F1 on the 2 items it managed; variant 2 scores all 4 with F1 0.8
    one = VariantScore(variant=1, final_f1=1.0, final_f1_all=0.5, n=4, n_unscored=2)
    two = VariantScore(variant=2, final_f1=0.8, final_f1_all=0.8, n=4, n_unscored=0)
    assert choose_variant([one, two]) == (2, "final_f1")


def test_holdout_split_keeps_selection_items_out_of_the_scored_ones():
    exs = [Example(id=f"x{i}", source="s", target="t") for i in range(10)]
    selection, evaluated, name = holdout_split(Dataset("final", "dev", exs), exs, 0.3, seed=1)
    assert len(selection) == 3 and len(evaluated) == 7
    assert not {e.id for e in selection} & {e.id for e in evaluated}
    assert holdout_split(Dataset("final", "dev", exs), exs, 0.3, seed=1)[0] == selection  # seeded
    assert "not scored" in name
    with pytest.raises(ValueError):
        holdout_split(Dataset("final", "dev", exs[:1]), exs[:1], 0.5)


def test_fmt_cov_says_only_one_value_when_nothing_is_unscored():
    ci = {"value": 0.5, "low": None, "high": None, "coverage": M.coverage(4, 4)}
    assert fmt_cov(ci, ci) == "0.500 (4/4)"
    assert json.dumps(M.coverage(0, 0))  # serialisable when empty


def test_per_document_correlation_where_documents_repeat(tmp_path):
    # two documents, three summaries each: the method ranks within each document right but the documents' levels
    # differ, so the pooled correlation is lower than the per-document one
    human = [0.1, 0.2, 0.3, 0.7, 0.8, 0.9]
    scores = [0.6, 0.7, 0.8, 0.1, 0.2, 0.3]
    exs = [
        Example(id=str(i), source="doc A" if i < 3 else "doc B", target=f"t{i}", human_score=h)
        for i, h in enumerate(human)
    ]
    m = correlation_suite(exs, [_report(s) for s in scores], _ctx(tmp_path)).metrics
    assert m["level"] == "per_document" and m["per_document"]["n_documents"] == 2
    assert m["per_document"]["spearman"]["value"] == pytest.approx(1.0)
    assert m["spearman"]["value"] < 0  # pooled: still reported, named
    ours, _ = _metric_value(
        {"n": 6, "n_scored": 6, "n_unscored": 0, "metrics": {"correlation": m}},
        Metric(
            "spearman",
            "S",
            "correlation",
            ("spearman",),
            paper_path=("per_document", "spearman"),
            level_names=("per document, averaged", "pooled"),
        ),
    )
    assert ours["value"] == pytest.approx(1.0) and ours["level"] == "per document, averaged"


def test_binary_with_no_scored_item_still_gives_the_values_counting_every_item(tmp_path):
    exs = [Example(id=str(i), source="s", target="t", label=lab) for i, lab in enumerate([1, 0, 1, 0])]
    m = binary_suite(exs, [_report(None)] * 4, _ctx(tmp_path)).metrics
    assert m["auc"]["value"] is None and m["auc_all"]["value"] == 0.0  # every item on the wrong side
    assert m["inconsistent_recall_all"]["value"] == 0.0 and m["coverage"]["scored"] == 0


def test_sweep_table_says_when_runs_rest_on_different_numbers_of_items():
    from halluscope.bench.sweep import fewer_items_warning, render_markdown

    def row(value, n_unscored):
        return {
            "value": value,
            "folder": f"/tmp/{value}",
            "n": 10,
            "n_unscored": n_unscored,
            "mean_score": {"value": 0.5, "low": None, "high": None},
            "mean_score_original": None,
            "mean_delta": {},
            "usage_per_item": {},
            "wall_time_s": 1.0,
            "metrics": {},
        }

    assert fewer_items_warning([row(1, 0), row(2, 0)]) is None
    md = render_markdown({"key": "top_k", "method": "dcr", "dataset": "d", "rows": [row(1, 0), row(3, 4)]})
    assert "Not like for like" in md and "3: 6/10" in md and "| 6/10 |" in md


def test_correlation_worst_case_gives_an_unscored_low_rated_item_the_highest_score(tmp_path):
    # the worst item (human 0.1) is unscored: the lowest rank would be its right rank and keep rho at 1
    human = [0.1, 0.3, 0.5, 0.7, 0.9]
    exs = [Example(id=str(i), source=f"doc {i}", target="t", human_score=h) for i, h in enumerate(human)]
    reps = [_report(None), _report(0.3), _report(0.5), _report(0.7), _report(0.9)]
    m = correlation_suite(exs, reps, _ctx(tmp_path)).metrics
    assert m["spearman"]["value"] == pytest.approx(1.0) and m["spearman"]["coverage"]["scored"] == 4
    assert m["spearman_all"]["value"] == pytest.approx(0.0)  # ranks 5,1,2,3,4 against 1..5
    assert m["kendall_all"]["value"] < 0.5 and m["pearson_all"]["value"] < 0.5
    assert "exact minimum" in m["worst_case"] and m["spearman_all"]["exact"]


def test_worst_correlation_is_no_higher_than_either_end():
    # two unscored items, one rated high and one low: no placement at the ends gives a lower value
    from halluscope.bench import worst_case as W

    human = [0.0, 1.0, 0.2, 0.4, 0.6, 0.8]
    scores = [None, None, 0.2, 0.4, 0.6, 0.8]
    worst = W.worst_correlation("spearman", scores, human)
    assert worst.exact and worst.filled[1] < 0.2 and worst.filled[0] > 0.8
    for a in (0.1, 0.9):
        for b in (0.1, 0.9):
            assert worst.value <= M.correlations([a, b, *scores[2:]], human)["spearman"] + 1e-12
