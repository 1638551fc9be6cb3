"""The ``span`` suite: character-level P/R/F1 of the findings' spans against the gold spans."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench import worst_case as W
from halluscope.bench.builtin_suites.shared import _ci_pair, both, md_table
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report, Span

# --- character-level spans -------------------------------------------------------------------------


def predicted_spans(report: Report) -> list[Span]:
    return [s for f in report.findings for s in f.target_spans]


@register_suite("span", applies=lambda examples: any(e.gold_spans is not None for e in examples))
def span_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    """Micro-averaged character P/R/F1 of the union of every finding's target spans against the gold spans.
    Empty cases (see :func:`metrics.prf_from_counts`): no predicted and no gold characters anywhere is a
    perfect 1.0; otherwise a zero denominator gives 0."""
    with_gold = [(e, r) for e, r in zip(examples, reports) if e.gold_spans is not None]
    scored = np.array([r.score is not None for _, r in with_gold], dtype=bool)
    n_unscored = int((~scored).sum())
    # an unscored item at its worst (worst_case.SPANS_RULE): every character outside the gold flagged, none inside
    counts = np.array(
        [
            M.span_counts(predicted_spans(r), e.gold_spans or [])
            if r.score is not None
            else W.worst_span_counts(len(e.target), M.span_counts([], e.gold_spans or [])[2])
            for e, r in with_gold
        ],
        dtype=int,
    ).reshape(-1, 3)

    def stat(key: str) -> Callable[[np.ndarray], float]:
        return lambda idx: getattr(M.prf_from_counts(*counts[idx].sum(axis=0).tolist()), key)

    kept = counts[scored]
    m: dict[str, Any] = {
        "n": len(with_gold),
        "n_unscored": n_unscored,
        "n_scored": int(scored.sum()),
        "coverage": M.coverage(int(scored.sum()), len(with_gold)),
        "n_with_gold_spans": int((kept[:, 2] > 0).sum()),
        "n_with_predicted_spans": int((kept[:, 1] > 0).sum()),
        "gold_chars": int(kept[:, 2].sum()),
        "predicted_chars": int(kept[:, 1].sum()),
        "worst_case": W.SPANS_RULE,
    }
    for key in ("precision", "recall", "f1"):
        m[f"char_{key}"], m[f"char_{key}_all"] = _ci_pair(ctx, stat(key), np.arange(len(with_gold)), scored)
    result = SuiteResult(metrics=m)
    result.tables.append(
        (
            f"Character-level span P/R/F1, micro (coverage {m['n_scored']}/{m['n']}; 'all' counts an unscored item as "
            "flagging every character outside the gold and none inside)",
            md_table(
                ["precision", "recall", "F1", "items with predicted spans"],
                [[both(m, "char_precision"), both(m, "char_recall"), both(m, "char_f1"), m["n_with_predicted_spans"]]],
            ),
        )
    )
    return result
