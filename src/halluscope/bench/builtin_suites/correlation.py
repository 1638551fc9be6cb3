"""The ``correlation`` suite: Pearson, Spearman and Kendall against graded human scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench import worst_case as W
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


def _headline(ci: dict[str, Any], worst: W.WorstCase) -> dict[str, Any]:
    """The value counting every item is the minimum over the unscored items' placements (``worst.value``); its
    interval is the bootstrap of the completion attaining it. A bound has no completion attaining it: no interval,
    and ``bound`` says so."""
    out = {**ci, "value": worst.value, "exact": worst.exact, "how": worst.how}
    if not worst.exact:
        out.update({"low": None, "high": None, "bound": True})
    return out


@register_suite("correlation", applies=lambda examples: any(e.human_score is not None for e in examples))
def correlation_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    """Pearson, Spearman and Kendall against the human scores. ``pooled``: over all items at once (keys
    ``pearson``...). When documents repeat (several targets per source, SummEval-style), also ``per_document``:
    the correlation within each document, averaged over documents (the summary-level protocol of DCR's line of
    work), which is then the ``level`` reported first. Each is given over the scored items and over all items
    (``_all``, the headline: the minimum over every score the unscored items could have had, exact, found for
    each correlation and level on its own: :func:`worst_case.worst_correlation`,
    :func:`worst_case.worst_per_document`; a bound provably no higher where the exact search is too costly,
    marked ``bound``)."""
    graded = [(e, r) for e, r in zip(examples, reports) if e.human_score is not None]
    exs = [e for e, _ in graded]
    scored = np.array([r.score is not None for _, r in graded], dtype=bool)
    n_unscored = int((~scored).sum())
    human = np.array([e.human_score for e in exs], dtype=float)
    raw = [r.score for _, r in graded]
    scores = np.array([s if s is not None else np.nan for s in raw], dtype=float)  # plotted where scored
    docs = [document_key(e) for e in exs]
    n_docs = len(set(docs))
    repeats = n_docs < len(exs)
    m: dict[str, Any] = {
        "n": len(graded),
        "n_unscored": n_unscored,
        "n_scored": int(scored.sum()),
        "coverage": M.coverage(int(scored.sum()), len(graded)),
        "n_documents": n_docs,
        "worst_case": W.CORRELATION_RULE,
        "headline": W.HEADLINE_RULE,
        "level": "per_document" if repeats else "pooled",
        "levels": {
            "pooled": "one correlation over all items",
            "per_document": "correlation within each document, averaged over documents",
        },
    }
    everything = np.arange(len(exs))
    for name in ("pearson", "spearman", "kendall"):
        worst = W.worst_correlation(name, raw, human)
        m[name], m[f"{name}_all"] = _ci_pair(
            ctx,
            lambda idx, name=name, x=worst.filled: M.correlations(x[idx].tolist(), human[idx].tolist())[name],
            everything,
            scored,
        )
        m[f"{name}_all"] = _headline(m[f"{name}_all"], worst)
    rows = [["pooled", *(both(m, k) for k in ("pearson", "spearman", "kendall"))]]
    if repeats:
        pd: dict[str, Any] = {"n_documents": n_docs}
        for name in ("pearson", "spearman", "kendall"):
            worst = W.worst_per_document(name, raw, human, docs)
            pd[name], pd[f"{name}_all"] = _ci_pair(
                ctx,
                lambda idx, name=name, x=worst.filled: per_document_correlation(
                    x[idx], human[idx], [docs[i] for i in idx], name
                ),
                everything,
                scored,
                clusters=docs,
            )
            pd[f"{name}_all"] = _headline(pd[f"{name}_all"], worst)
        m["per_document"] = pd
        rows.insert(
            0, [f"per document (averaged over {n_docs})", *(both(pd, k) for k in ("pearson", "spearman", "kendall"))]
        )
    result = SuiteResult(metrics=m)
    result.tables.append(
        (
            f"Correlation with human scores (coverage {m['n_scored']}/{len(exs)}; 'all': "
            f"{W.CORRELATION_RULE}; "
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
