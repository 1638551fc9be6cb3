"""The ``binary`` suite: AUC-ROC, balanced accuracy (threshold from the dev split) and P/R/F1 on binary labels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench.builtin_suites.shared import _ci_pair, _plot_path, both, fmt_cov, md_table
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report

DEV_SPLIT_NAMES = ("evaluation", "validation", "dev", "val")


# --- binary labels: AUC, balanced accuracy, P/R/F1 -------------------------------------------------


def pick_dev_split(splits: Sequence[str | None]) -> str | None:
    """The split that thresholds are chosen on: one named like a dev split, and only when another split
    remains to evaluate on. None means there is a single split (thresholds are then chosen in-sample)."""
    present = set(splits)
    if len(present) < 2:
        return None
    for name in DEV_SPLIT_NAMES:
        if name in present:
            return name
    return None


@register_suite("binary", applies=lambda examples: any(e.label is not None for e in examples))
def binary_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:  # noqa: C901 - one pass computing the suite's table; splitting it would scatter one report
    """AUC-ROC and balanced accuracy per domain (``meta["domain"]``, SummEdits protocol) with the threshold
    chosen on the dev split of that domain and applied to its other split(s); the overall figure is the
    mean over domains. With a single split the threshold is chosen on the same items (optimistic: it is
    labelled so), and balanced accuracy at the method's own default threshold is reported next to it.
    Thresholds are fitted on scored items; every metric is given over the scored test items and over all
    test items (an unscored one counted as wrong: :func:`metrics.worst_case_scores`)."""
    labelled = [(e, r) for e, r in zip(examples, reports) if e.label is not None]
    exs = [e for e, _ in labelled]
    reps = [r for _, r in labelled]
    scored = np.array([r.score is not None for r in reps], dtype=bool)
    n_unscored = int((~scored).sum())
    result = SuiteResult(metrics={"n": len(labelled), "n_unscored": n_unscored})
    if not labelled:
        return result
    dev_split = pick_dev_split([e.split for e in exs])
    domains = sorted({str(e.meta.get("domain", "all")) for e in exs})
    dom = np.array([str(e.meta.get("domain", "all")) for e in exs])
    labels = np.array([e.label for e in exs])
    scores = M.worst_case_scores([r.score for r in reps], labels.tolist())
    is_dev = np.array([dev_split is not None and e.split == dev_split for e in exs])
    is_test = ~is_dev if dev_split is not None else np.ones(len(exs), bool)

    thresholds: dict[str, float] = {}
    notes: list[str] = []
    for d in domains:
        fit = [i for i in range(len(exs)) if dom[i] == d and scored[i] and (is_dev[i] if dev_split else True)]
        t = M.best_threshold(labels[fit].tolist(), scores[fit].tolist())
        if t is None:
            t = reps[fit[0]].threshold if fit and reps[fit[0]].threshold is not None else 0.5
            notes.append(f"{d}: threshold split has one class; used the method threshold {t}")
        thresholds[d] = t
    thr = np.array([thresholds[d] for d in dom])
    # the method's own decision; an unscored item counts as the wrong one
    method_pred = np.array(
        [(1 if r.label == "consistent" else 0) if r.score is not None else 1 - int(lab) for r, lab in zip(reps, labels)]
    )
    test_idx = np.flatnonzero(is_test)

    def per_domain(fn: Callable[[np.ndarray], float | None]) -> Callable[[np.ndarray], float | None]:
        def macro(idx: np.ndarray) -> float | None:
            vals = [fn(idx[dom[idx] == d]) for d in domains]
            vals = [v for v in vals if v is not None]
            return float(np.mean(vals)) if vals else None

        return macro

    def auc(idx: np.ndarray) -> float | None:
        return M.roc_auc(labels[idx], scores[idx])

    def bacc(idx: np.ndarray) -> float | None:
        return M.balanced_accuracy_of(labels[idx], (scores[idx] >= thr[idx]).astype(int))

    def bacc_method(idx: np.ndarray) -> float | None:
        return M.balanced_accuracy_of(labels[idx], method_pred[idx])

    def prf(key: str) -> Callable[[np.ndarray], float | None]:
        return lambda idx: M.binary_prf(labels[idx], (scores[idx] >= thr[idx]).astype(int))[key]

    n_test = len(test_idx)
    m = result.metrics
    m.update(
        {
            "n_scored": int(scored.sum()),
            "n_dev": int(is_dev.sum()),
            "n_test": n_test,
            "coverage": M.coverage(int(scored[test_idx].sum()), n_test),
            "dev_split": dev_split,
            "threshold_chosen_on": f"the {dev_split!r} split"
            if dev_split
            else "the same items (in-sample, optimistic)",
            "thresholds": thresholds,
            "averaging": "mean over domains" if len(domains) > 1 else "single domain",
        }
    )
    stats = {
        "auc": per_domain(auc),
        "balanced_accuracy": per_domain(bacc),
        "balanced_accuracy_at_method_threshold": per_domain(bacc_method),
        "inconsistent_precision": prf("precision"),
        "inconsistent_recall": prf("recall"),
        "inconsistent_f1": prf("f1"),
    }
    if len(domains) > 1:
        stats["auc_pooled"] = auc
    for key, fn in stats.items():
        m[key], m[f"{key}_all"] = _ci_pair(ctx, fn, test_idx, scored)
    if notes:
        m["notes"] = notes
    rows = []
    per_dom: dict[str, Any] = {}

    def point(fn: Callable[[np.ndarray], float | None], idx: np.ndarray) -> tuple[dict[str, Any], dict[str, Any]]:
        kept = idx[scored[idx]]
        cov = M.coverage(len(kept), len(idx))
        return {"value": fn(kept) if len(kept) else None, "coverage": cov}, {"value": fn(idx), "coverage": cov}

    for d in domains:
        idx = test_idx[dom[test_idx] == d]
        cells = {
            k: point(fn, idx)
            for k, fn in (
                ("auc", auc),
                ("balanced_accuracy", bacc),
                ("balanced_accuracy_at_method_threshold", bacc_method),
            )
        }
        per_dom[d] = {
            "n_dev": int(sum(1 for i in range(len(exs)) if dom[i] == d and is_dev[i])),
            "n_test": len(idx),
            "threshold": thresholds[d],
            **{k: v[0]["value"] for k, v in cells.items()},
            **{f"{k}_all": v[1]["value"] for k, v in cells.items()},
            "coverage": M.coverage(int(scored[idx].sum()), len(idx)),
        }
        rows.append(
            [
                d,
                per_dom[d]["n_dev"],
                per_dom[d]["n_test"],
                thresholds[d],
                *(fmt_cov(cells[k][1], cells[k][0]) for k in cells),
            ]
        )
    if len(domains) > 1:
        m["per_domain"] = per_dom
        rows.append(
            [
                "**mean over domains**",
                m["n_dev"],
                n_test,
                "",
                both(m, "auc"),
                both(m, "balanced_accuracy"),
                both(m, "balanced_accuracy_at_method_threshold"),
            ]
        )
    else:
        rows = [
            [
                domains[0],
                m["n_dev"],
                n_test,
                thresholds[domains[0]],
                both(m, "auc"),
                both(m, "balanced_accuracy"),
                both(m, "balanced_accuracy_at_method_threshold"),
            ]
        ]
    cov = m["coverage"]
    result.tables.append(
        (
            f"Binary consistency (threshold chosen on {m['threshold_chosen_on']}; coverage "
            f"{cov['scored']}/{cov['total']} "
            f"test items scored; 'all' counts an unscored item as wrong)",
            md_table(["domain", "n dev", "n test", "threshold", "AUC-ROC", "BAcc", "BAcc @ method threshold"], rows),
        )
    )
    result.tables.append(
        (
            "Detecting inconsistent items (positive = label 0, predicted when score < threshold)",
            md_table(
                ["precision", "recall", "F1"],
                [[both(m, "inconsistent_precision"), both(m, "inconsistent_recall"), both(m, "inconsistent_f1")]],
            ),
        )
    )
    if not scored.any():  # nothing to plot; the values counting every item are in the tables
        return result
    violin: dict[str, list[float]] = {}
    for d in domains:
        for lab, name in ((1, "consistent"), (0, "inconsistent")):
            key = name if len(domains) == 1 else f"{d}\n{name}"
            violin[key] = [float(scores[i]) for i in range(len(exs)) if scored[i] and dom[i] == d and labels[i] == lab]
    from halluscope.bench.plots import roc_plot, violin_plot

    result.plots.append(
        violin_plot(
            violin, _plot_path(ctx, "binary_scores_by_label"), title=f"{ctx.method} scores by label ({ctx.dataset})"
        )
    )
    kept_test = test_idx[scored[test_idx]]
    curves = {
        d: (labels[kept_test][dom[kept_test] == d].tolist(), scores[kept_test][dom[kept_test] == d].tolist())
        for d in domains
    }
    if len(domains) > 1:
        curves["pooled"] = (labels[kept_test].tolist(), scores[kept_test].tolist())
    result.plots.append(
        roc_plot(
            curves,
            _plot_path(ctx, "binary_roc"),
            title=f"ROC, {ctx.method} ({ctx.dataset}, {'test split' if dev_split else 'all'})",
        )
    )
    return result
