"""The ``montage_auc`` suite: AUC-ROC per difficulty and averaged (MontageLie protocol)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench.builtin_suites.shared import _ci_pair, _plot_path, both, md_table
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report

# --- MontageLie AUC per difficulty -----------------------------------------------------------------


def _has_montage(examples: list[Example]) -> bool:
    return any(e.difficulty and e.group for e in examples)


@register_suite("montage_auc", applies=_has_montage)
def montage_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    grouped = [(e, r) for e, r in zip(examples, reports) if e.group is not None]
    exs = [e for e, _ in grouped]
    scored = np.array([r.score is not None for _, r in grouped], dtype=bool)
    n_unscored = int((~scored).sum())
    labels = [e.label for e in exs]
    truth = [1 if (e.label == 1 or e.difficulty == M.TRUTH) else 0 for e in exs]
    scores = M.worst_case_scores([r.score for _, r in grouped], truth)  # unscored: a truth lowest, a lie highest
    groups = [e.group for e in exs]
    diffs = [e.difficulty for e in exs]

    def stat(key: str) -> Callable[[np.ndarray], float | None]:
        # Copies of a resampled group need no separate keys: a group only decides which truths and lies
        # enter the pooled AUC, and every copy of it enters with the same members.
        return lambda idx: M.auc_per_difficulty(
            scores[idx].tolist(), [labels[i] for i in idx], [groups[i] for i in idx], [diffs[i] for i in idx]
        ).get(key)

    point = M.auc_per_difficulty(scores.tolist(), labels, groups, diffs)
    m: dict[str, Any] = {
        "n": len(grouped),
        "n_unscored": n_unscored,
        "n_scored": int(scored.sum()),
        "coverage": M.coverage(int(scored.sum()), len(grouped)),
        "n_groups": len(set(groups)),
    }
    difficulties = [k for k in point if k != "average"]
    for key in [*difficulties, "average"]:
        m[f"auc_{key}"], m[f"auc_{key}_all"] = _ci_pair(ctx, stat(key), np.arange(len(exs)), scored, clusters=groups)
    result = SuiteResult(metrics=m)
    result.tables.append(
        (
            f"AUC-ROC per difficulty, MontageLie protocol ({m['n_groups']} groups; coverage {m['n_scored']}/{m['n']}; "
            "'all' ranks an unscored truth lowest and an unscored lie highest)",
            md_table([*difficulties, "average"], [[both(m, f"auc_{k}") for k in [*difficulties, "average"]]]),
        )
    )
    violin = {
        M.TRUTH: [float(s) for s, e, ok in zip(scores, exs, scored) if ok and (e.label == 1 or e.difficulty == M.TRUTH)]
    }
    for d in difficulties:
        violin[d] = [float(s) for s, e, ok in zip(scores, exs, scored) if ok and e.difficulty == d and e.label != 1]
    from halluscope.bench.plots import violin_plot

    result.plots.append(
        violin_plot(
            violin,
            _plot_path(ctx, "montage_scores_by_difficulty"),
            title=f"{ctx.method} scores by difficulty ({ctx.dataset})",
        )
    )
    return result
