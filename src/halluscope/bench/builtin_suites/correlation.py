"""The ``correlation`` suite: Pearson, Spearman and Kendall against graded human scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench.builtin_suites.shared import _ci_pair, _plot_path, both, md_table
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report

# --- graded human scores: correlations -------------------------------------------------------------


def document_key(example: Example) -> str:
    """Which document an item's target was written from: ``meta["doc_id"]`` when given, else the source text."""
    doc = example.meta.get("doc_id")
    return str(doc) if doc is not None else example.source


def per_document_correlation(scores: np.ndarray, human: np.ndarray, docs: Sequence[str], name: str) -> float | None:
    """Summary-level correlation: ``name`` (pearson/spearman/kendall) within each document's items, averaged
    over the documents where it is defined (at least 3 items, neither side constant). None when none is."""
    by_doc: dict[str, list[int]] = {}
    for i, d in enumerate(docs):
        by_doc.setdefault(d, []).append(i)
    values = [M.correlations(scores[ix].tolist(), human[ix].tolist())[name] for ix in by_doc.values()]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


@register_suite("correlation", applies=lambda examples: any(e.human_score is not None for e in examples))
def correlation_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    """Pearson, Spearman and Kendall against the human scores. ``pooled``: over all items at once (keys
    ``pearson``...). When documents repeat (several targets per source, SummEval-style), also ``per_document``:
    the correlation within each document, averaged over documents (the summary-level protocol of DCR's line of
    work), which is then the ``level`` reported first. Each is given over the scored items and over all items
    (``_all``: an unscored item takes the score that disagrees most with its human score, the lowest for the
    highest human scores and the highest for the lowest, chosen for each correlation and level:
    :func:`metrics.adversarial_scores`)."""
    graded = [(e, r) for e, r in zip(examples, reports) if e.human_score is not None]
    exs = [e for e, _ in graded]
    scored = np.array([r.score is not None for _, r in graded], dtype=bool)
    n_unscored = int((~scored).sum())
    human = np.array([e.human_score for e in exs], dtype=float)
    raw = [r.score for _, r in graded]
    scores = M.worst_case_scores(raw)  # the scored positions' own scores (the fill is per statistic, below)
    docs = [document_key(e) for e in exs]
    n_docs = len(set(docs))
    repeats = n_docs < len(exs)
    m: dict[str, Any] = {
        "n": len(graded),
        "n_unscored": n_unscored,
        "n_scored": int(scored.sum()),
        "coverage": M.coverage(int(scored.sum()), len(graded)),
        "n_documents": n_docs,
        "worst_case": M.WORST_CASE_CORRELATION_RULE,
        "level": "per_document" if repeats else "pooled",
        "levels": {
            "pooled": "one correlation over all items",
            "per_document": "correlation within each document, averaged over documents",
        },
    }
    everything = np.arange(len(exs))
    for name in ("pearson", "spearman", "kendall"):
        filled = M.adversarial_scores(raw, human, lambda x, name=name: M.correlations(x.tolist(), human.tolist())[name])
        m[name], m[f"{name}_all"] = _ci_pair(
            ctx,
            lambda idx, name=name, x=filled: M.correlations(x[idx].tolist(), human[idx].tolist())[name],
            everything,
            scored,
        )
    rows = [["pooled", *(both(m, k) for k in ("pearson", "spearman", "kendall"))]]
    if repeats:
        pd: dict[str, Any] = {"n_documents": n_docs}
        for name in ("pearson", "spearman", "kendall"):
            filled = M.adversarial_scores(
                raw, human, lambda x, name=name: per_document_correlation(x, human, docs, name)
            )
            pd[name], pd[f"{name}_all"] = _ci_pair(
                ctx,
                lambda idx, name=name, x=filled: per_document_correlation(
                    x[idx], human[idx], [docs[i] for i in idx], name
                ),
                everything,
                scored,
                clusters=docs,
            )
        m["per_document"] = pd
        rows.insert(
            0, [f"per document (averaged over {n_docs})", *(both(pd, k) for k in ("pearson", "spearman", "kendall"))]
        )
    result = SuiteResult(metrics=m)
    result.tables.append(
        (
            f"Correlation with human scores (coverage {m['n_scored']}/{len(exs)}; 'all': "
            f"{M.WORST_CASE_CORRELATION_RULE}; "
            f"{n_docs} documents{', several targets each' if repeats else ''})",
            md_table(["level", "Pearson", "Spearman", "Kendall"], rows),
        )
    )
    if scored.any():
        from halluscope.bench.plots import scatter_plot

        result.plots.append(
            scatter_plot(
                human[scored].tolist(),
                scores[scored].tolist(),
                _plot_path(ctx, "correlation_scatter"),
                title=f"{ctx.method} vs human ({ctx.dataset})",
                xlabel="human score",
                ylabel=f"{ctx.method} score",
            )
        )
    return result
