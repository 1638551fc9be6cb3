"""The built-in metric suites: each applies when the dataset carries the labels it needs.

| suite | applies when examples have | metrics |
|---|---|---|
| ``binary`` | ``label`` | AUC-ROC, balanced accuracy (threshold from the dev split), P/R/F1 of "inconsistent" |
| ``correlation`` | ``human_score`` | Pearson, Spearman, Kendall |
| ``montage_auc`` | ``group`` + ``difficulty`` | AUC-ROC per difficulty and averaged (MontageLie protocol) |
| ``span`` | ``gold_spans`` | character-level P/R/F1 of finding spans vs gold spans |
| ``final_matching`` | ``descriptions`` | FINAL recall/precision/F1 via an LLM judge |

Unscored items: every metric ``K`` is computed twice. ``K`` is over the scored items (as before) and carries
``coverage`` (scored / total); ``K_all`` counts every item, an unscored one as the worst outcome it could have
(a miss for detection, the wrong side for AUC, the lowest rank for correlations, no match for FINAL, no span
for spans; :func:`metrics.worst_case_scores`). Tables show both with the coverage: a method that fails on the
hard items cannot look better than one that tries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite, scored_pairs
from halluscope.records import Example, Report, Usage

DEV_SPLIT_NAMES = ("evaluation", "validation", "dev", "val")


# --- formatting helpers shared by the suites -------------------------------------------------------


def fmt(value: Any, digits: int = 3) -> str:
    """A metric for a Markdown cell: ``0.712 [0.650, 0.770]`` for a CI dict, ``-`` when undefined."""
    if isinstance(value, dict) and "value" in value:
        if value["value"] is None:
            return "-"
        text = f"{value['value']:.{digits}f}"
        if value.get("low") is not None:
            text += f" [{value['low']:.{digits}f}, {value['high']:.{digits}f}]"
        return text
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def fmt_cov(all_items: Any, scored: Any, digits: int = 3) -> str:
    """A Markdown cell for one metric: the value over every item, then, when some items were unscored, the value
    over the scored ones with the coverage, e.g. ``0.650 [...] all 20 · 0.712 on 18/20 scored``."""
    cov = scored.get("coverage") if isinstance(scored, dict) else None
    if not cov:
        return fmt(scored, digits)
    if cov["scored"] == cov["total"]:
        return f"{fmt(scored, digits)} ({cov['scored']}/{cov['total']})"
    return f"{fmt(all_items, digits)} all {cov['total']} · {fmt(scored, digits)} on {cov['scored']}/{cov['total']} scored"


def both(m: dict[str, Any], key: str) -> str:
    """The cell for metric ``key`` of a suite's metrics (``key`` and ``key_all``)."""
    return fmt_cov(m.get(f"{key}_all"), m.get(key))


def with_coverage(ci: dict[str, Any], n_scored: int, n_total: int) -> dict[str, Any]:
    """A CI dict with its coverage attached (``n`` stays the number of items the value rests on)."""
    return {**ci, "coverage": M.coverage(n_scored, n_total)}


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _ci(ctx: SuiteContext, statistic: Callable[[np.ndarray], float | None], n: int,
        clusters: Sequence[Any] | None = None) -> dict[str, Any]:
    return M.bootstrap_ci(statistic, n, n_resamples=ctx.n_bootstrap, seed=ctx.seed, clusters=clusters)


def _ci_pair(ctx: SuiteContext, statistic: Callable[[np.ndarray], float | None], positions: np.ndarray,
             scored: np.ndarray, clusters: Sequence[Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(value over the scored ``positions``, value over all ``positions``), each with its coverage.
    ``statistic`` takes absolute positions; ``scored`` is the mask of scored positions; ``clusters`` one key per
    absolute position."""
    positions = np.asarray(positions, dtype=int)
    kept = positions[scored[positions]] if len(positions) else positions
    n_scored, n_total = len(kept), len(positions)

    def over(pos: np.ndarray) -> dict[str, Any]:
        keys = [clusters[i] for i in pos] if clusters is not None else None
        return with_coverage(_ci(ctx, lambda idx: statistic(pos[idx]), len(pos), keys), n_scored, n_total)

    return over(kept), over(positions)


def _plot_path(ctx: SuiteContext, name: str) -> Path:
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    return ctx.out_dir / f"{name}.png"


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
def binary_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
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
    method_pred = np.array([(1 if r.label == "consistent" else 0) if r.score is not None else 1 - int(lab)
                            for r, lab in zip(reps, labels)])
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
    m.update({
        "n_scored": int(scored.sum()),
        "n_dev": int(is_dev.sum()),
        "n_test": n_test,
        "coverage": M.coverage(int(scored[test_idx].sum()), n_test),
        "dev_split": dev_split,
        "threshold_chosen_on": f"the {dev_split!r} split" if dev_split else "the same items (in-sample, optimistic)",
        "thresholds": thresholds,
        "averaging": "mean over domains" if len(domains) > 1 else "single domain",
    })
    stats = {"auc": per_domain(auc), "balanced_accuracy": per_domain(bacc),
             "balanced_accuracy_at_method_threshold": per_domain(bacc_method),
             "inconsistent_precision": prf("precision"), "inconsistent_recall": prf("recall"),
             "inconsistent_f1": prf("f1")}
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
        cells = {k: point(fn, idx) for k, fn in (("auc", auc), ("balanced_accuracy", bacc),
                                                  ("balanced_accuracy_at_method_threshold", bacc_method))}
        per_dom[d] = {"n_dev": int(sum(1 for i in range(len(exs)) if dom[i] == d and is_dev[i])),
                      "n_test": len(idx), "threshold": thresholds[d],
                      **{k: v[0]["value"] for k, v in cells.items()}, **{f"{k}_all": v[1]["value"] for k, v in cells.items()},
                      "coverage": M.coverage(int(scored[idx].sum()), len(idx))}
        rows.append([d, per_dom[d]["n_dev"], per_dom[d]["n_test"], thresholds[d],
                     *(fmt_cov(cells[k][1], cells[k][0]) for k in cells)])
    if len(domains) > 1:
        m["per_domain"] = per_dom
        rows.append(["**mean over domains**", m["n_dev"], n_test, "", both(m, "auc"), both(m, "balanced_accuracy"),
                     both(m, "balanced_accuracy_at_method_threshold")])
    else:
        rows = [[domains[0], m["n_dev"], n_test, thresholds[domains[0]], both(m, "auc"), both(m, "balanced_accuracy"),
                 both(m, "balanced_accuracy_at_method_threshold")]]
    cov = m["coverage"]
    result.tables.append((
        f"Binary consistency (threshold chosen on {m['threshold_chosen_on']}; coverage {cov['scored']}/{cov['total']} "
        f"test items scored; 'all' counts an unscored item as wrong)",
        md_table(["domain", "n dev", "n test", "threshold", "AUC-ROC", "BAcc", "BAcc @ method threshold"], rows),
    ))
    result.tables.append((
        "Detecting inconsistent items (positive = label 0, predicted when score < threshold)",
        md_table(["precision", "recall", "F1"],
                 [[both(m, "inconsistent_precision"), both(m, "inconsistent_recall"), both(m, "inconsistent_f1")]]),
    ))
    if not scored.any():  # nothing to plot; the values counting every item are in the tables
        return result
    violin: dict[str, list[float]] = {}
    for d in domains:
        for lab, name in ((1, "consistent"), (0, "inconsistent")):
            key = name if len(domains) == 1 else f"{d}\n{name}"
            violin[key] = [float(scores[i]) for i in range(len(exs)) if scored[i] and dom[i] == d and labels[i] == lab]
    from halluscope.bench.plots import roc_plot, violin_plot

    result.plots.append(violin_plot(violin, _plot_path(ctx, "binary_scores_by_label"),
                                    title=f"{ctx.method} scores by label ({ctx.dataset})"))
    kept_test = test_idx[scored[test_idx]]
    curves = {d: (labels[kept_test][dom[kept_test] == d].tolist(), scores[kept_test][dom[kept_test] == d].tolist())
              for d in domains}
    if len(domains) > 1:
        curves["pooled"] = (labels[kept_test].tolist(), scores[kept_test].tolist())
    result.plots.append(roc_plot(curves, _plot_path(ctx, "binary_roc"),
                                 title=f"ROC, {ctx.method} ({ctx.dataset}, {'test split' if dev_split else 'all'})"))
    return result


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
    (an unscored item at the lowest rank: ``_all``)."""
    graded = [(e, r) for e, r in zip(examples, reports) if e.human_score is not None]
    exs = [e for e, _ in graded]
    scored = np.array([r.score is not None for _, r in graded], dtype=bool)
    n_unscored = int((~scored).sum())
    human = np.array([e.human_score for e in exs], dtype=float)
    scores = M.worst_case_scores([r.score for _, r in graded])
    docs = [document_key(e) for e in exs]
    n_docs = len(set(docs))
    repeats = n_docs < len(exs)
    m: dict[str, Any] = {"n": len(graded), "n_unscored": n_unscored, "n_scored": int(scored.sum()),
                         "coverage": M.coverage(int(scored.sum()), len(graded)), "n_documents": n_docs,
                         "level": "per_document" if repeats else "pooled",
                         "levels": {"pooled": "one correlation over all items",
                                    "per_document": "correlation within each document, averaged over documents"}}
    everything = np.arange(len(exs))
    for name in ("pearson", "spearman", "kendall"):
        m[name], m[f"{name}_all"] = _ci_pair(
            ctx, lambda idx, name=name: M.correlations(scores[idx].tolist(), human[idx].tolist())[name], everything,
            scored)
    rows = [["pooled", *(both(m, k) for k in ("pearson", "spearman", "kendall"))]]
    if repeats:
        pd: dict[str, Any] = {"n_documents": n_docs}
        for name in ("pearson", "spearman", "kendall"):
            pd[name], pd[f"{name}_all"] = _ci_pair(
                ctx, lambda idx, name=name: per_document_correlation(scores[idx], human[idx], [docs[i] for i in idx],
                                                                     name), everything, scored, clusters=docs)
        m["per_document"] = pd
        rows.insert(0, [f"per document (averaged over {n_docs})", *(both(pd, k) for k in ("pearson", "spearman", "kendall"))])
    result = SuiteResult(metrics=m)
    result.tables.append((
        f"Correlation with human scores (coverage {m['n_scored']}/{len(exs)}; 'all' puts an unscored item at the "
        f"lowest rank; {n_docs} documents{', several targets each' if repeats else ''})",
        md_table(["level", "Pearson", "Spearman", "Kendall"], rows),
    ))
    if scored.any():
        from halluscope.bench.plots import scatter_plot

        result.plots.append(scatter_plot(human[scored].tolist(), scores[scored].tolist(),
                                         _plot_path(ctx, "correlation_scatter"),
                                         title=f"{ctx.method} vs human ({ctx.dataset})", xlabel="human score",
                                         ylabel=f"{ctx.method} score"))
    return result


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
        return lambda idx: M.auc_per_difficulty(scores[idx].tolist(), [labels[i] for i in idx],
                                                [groups[i] for i in idx], [diffs[i] for i in idx]).get(key)

    point = M.auc_per_difficulty(scores.tolist(), labels, groups, diffs)
    m: dict[str, Any] = {"n": len(grouped), "n_unscored": n_unscored, "n_scored": int(scored.sum()),
                         "coverage": M.coverage(int(scored.sum()), len(grouped)), "n_groups": len(set(groups))}
    difficulties = [k for k in point if k != "average"]
    for key in [*difficulties, "average"]:
        m[f"auc_{key}"], m[f"auc_{key}_all"] = _ci_pair(ctx, stat(key), np.arange(len(exs)), scored, clusters=groups)
    result = SuiteResult(metrics=m)
    result.tables.append((
        f"AUC-ROC per difficulty, MontageLie protocol ({m['n_groups']} groups; coverage {m['n_scored']}/{m['n']}; "
        "'all' ranks an unscored truth lowest and an unscored lie highest)",
        md_table([*difficulties, "average"], [[both(m, f"auc_{k}") for k in [*difficulties, "average"]]]),
    ))
    violin = {M.TRUTH: [float(s) for s, e, ok in zip(scores, exs, scored)
                        if ok and (e.label == 1 or e.difficulty == M.TRUTH)]}
    for d in difficulties:
        violin[d] = [float(s) for s, e, ok in zip(scores, exs, scored) if ok and e.difficulty == d and e.label != 1]
    from halluscope.bench.plots import violin_plot

    result.plots.append(violin_plot(violin, _plot_path(ctx, "montage_scores_by_difficulty"),
                                    title=f"{ctx.method} scores by difficulty ({ctx.dataset})"))
    return result


# --- character-level spans -------------------------------------------------------------------------


def predicted_spans(report: Report) -> list:
    return [s for f in report.findings for s in f.target_spans]


@register_suite("span", applies=lambda examples: any(e.gold_spans is not None for e in examples))
def span_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    """Micro-averaged character P/R/F1 of the union of every finding's target spans against the gold spans.
    Empty cases (see :func:`metrics.prf_from_counts`): no predicted and no gold characters anywhere is a
    perfect 1.0; otherwise a zero denominator gives 0."""
    with_gold = [(e, r) for e, r in zip(examples, reports) if e.gold_spans is not None]
    scored = np.array([r.score is not None for _, r in with_gold], dtype=bool)
    n_unscored = int((~scored).sum())
    # an unscored item predicts nothing: every gold character of it is missed
    counts = np.array([M.span_counts(predicted_spans(r) if r.score is not None else [], e.gold_spans or [])
                       for e, r in with_gold], dtype=int).reshape(-1, 3)

    def stat(key: str) -> Callable[[np.ndarray], float]:
        return lambda idx: getattr(M.prf_from_counts(*counts[idx].sum(axis=0).tolist()), key)

    kept = counts[scored]
    m: dict[str, Any] = {
        "n": len(with_gold), "n_unscored": n_unscored, "n_scored": int(scored.sum()),
        "coverage": M.coverage(int(scored.sum()), len(with_gold)),
        "n_with_gold_spans": int((kept[:, 2] > 0).sum()), "n_with_predicted_spans": int((kept[:, 1] > 0).sum()),
        "gold_chars": int(kept[:, 2].sum()), "predicted_chars": int(kept[:, 1].sum()),
    }
    for key in ("precision", "recall", "f1"):
        m[f"char_{key}"], m[f"char_{key}_all"] = _ci_pair(ctx, stat(key), np.arange(len(with_gold)), scored)
    result = SuiteResult(metrics=m)
    result.tables.append((
        f"Character-level span P/R/F1, micro (coverage {m['n_scored']}/{m['n']}; 'all' counts an unscored item as "
        "finding no span)",
        md_table(["precision", "recall", "F1", "items with predicted spans"],
                 [[both(m, "char_precision"), both(m, "char_recall"), both(m, "char_f1"), m["n_with_predicted_spans"]]]),
    ))
    return result


# --- FINAL description matching --------------------------------------------------------------------

FINAL_MATCHES_FILE = "final_matches.jsonl"


def predicted_descriptions(report: Report) -> list[str]:
    return [f.description.strip() for f in report.findings if f.description.strip()]


def _load_matches(path: Path) -> dict[str, Any]:
    from pydantic import ValidationError

    from halluscope.bench.judge import MatchResult

    stored: dict[str, MatchResult] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                result = MatchResult.model_validate_json(line)
            except ValidationError:
                continue  # a line cut short by an interrupted run: that item is judged again
            stored[result.example_id] = result
    return stored


@register_suite("final_matching", applies=lambda examples: any(e.descriptions is not None for e in examples))
async def final_matching_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    """FINAL P/R/F1 (micro over items): an LLM judge (``ctx.judge``) aligns each item's predicted
    descriptions (``Report.findings[*].description``) with its gold ``descriptions``. Judge results are
    stored in ``final_matches.jsonl`` as they arrive, so a re-run asks the judge only about new items
    (and, with ``ctx.extra["retry_unscored"]``, again about items whose judge reply was unusable)."""
    from halluscope.bench.judge import MATCH_PROMPT, match_descriptions, match_key
    from halluscope.prompts import apply_overrides

    if ctx.judge is None:
        return SuiteResult(tables=[("FINAL matching", "Not computed: no judge model is available. Pass "
                                                      "--judge-model (and --judge-base-url) to match descriptions.")])

    prompt = apply_overrides(MATCH_PROMPT, ctx.prompts_dir)
    with_gold = [(e, r) for e, r in zip(examples, reports) if e.descriptions is not None]
    exs, reps, n_unscored = scored_pairs([e for e, _ in with_gold], [r for _, r in with_gold])
    judge_name = ctx.judge.name if ctx.judge is not None else "none"
    path = ctx.out_dir / FINAL_MATCHES_FILE
    stored = _load_matches(path)
    results: dict[str, Any] = {}
    todo = []
    for e, r in zip(exs, reps):
        gold, pred = list(e.descriptions or []), predicted_descriptions(r)
        old = stored.get(e.id)
        retry = old is not None and old.matches is None and ctx.extra.get("retry_unscored", False)
        if old is not None and old.key == match_key(judge_name, gold, pred, prompt) and not retry:
            results[e.id] = old
        else:
            todo.append((e, gold, pred))
    judge_usage = Usage()
    if todo:
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        sem = asyncio.Semaphore(max(1, getattr(ctx.judge, "max_concurrency", 4) or 4))

        async def one(e: Example, gold: list[str], pred: list[str]):
            async with sem:
                return await match_descriptions(ctx.judge, e.id, e.target, gold, pred, prompt)

        with path.open("a", encoding="utf-8") as fh:
            for fut in asyncio.as_completed([one(*t) for t in todo]):
                res = await fut
                results[res.example_id] = res
                for call in res.calls:
                    judge_usage = judge_usage + call.usage
                fh.write(res.model_dump_json() + "\n")
                fh.flush()
    ordered = [results[e.id] for e in exs]
    usable = [res for res in ordered if res.matches is not None]
    counts = np.array([(res.matched_gold, res.n_pred, res.n_gold) for res in usable], dtype=int).reshape(-1, 3)
    no_gold = [res for res in usable if res.n_gold == 0]
    # every item with gold: one the method or the judge could not score counts as no match
    by_id = {res.example_id: res for res in usable}
    counts_all = np.array([(by_id[e.id].matched_gold, by_id[e.id].n_pred, by_id[e.id].n_gold) if e.id in by_id
                           else (0, len(predicted_descriptions(r)) if r.score is not None else 0, len(e.descriptions or []))
                           for e, r in with_gold], dtype=int).reshape(-1, 3)

    def stat(table: np.ndarray, key: str) -> Callable[[np.ndarray], float]:
        return lambda idx: getattr(M.final_prf(table[idx].tolist()), key)

    m: dict[str, Any] = {
        "n": len(with_gold), "n_unscored": n_unscored, "n_judge_unscored": len(ordered) - len(usable),
        "n_scored": len(usable), "n_judged": sum(res.judged for res in ordered),
        "coverage": M.coverage(len(usable), len(with_gold)),
        "judge_model": judge_name, "judge_prompt_version": f"{prompt.name}@{prompt.version}",
        "judge_is_evaluated_model": judge_name == ctx.model,
        "predictions": int(counts[:, 1].sum()), "gold": int(counts[:, 2].sum()),
        "gold_matched": int(counts[:, 0].sum()),
        "false_positives_on_consistent_items": int(sum(res.n_pred for res in no_gold)),
        "judge_usage": sum((c.usage for res in ordered for c in res.calls), Usage()).model_dump(),
        "judge_usage_this_run": judge_usage.model_dump(),
        "averaging": "micro over items (counts summed, then ratios)",
    }
    for key in ("recall", "precision", "f1"):
        m[key] = with_coverage(_ci(ctx, stat(counts, key), len(usable)), len(usable), len(with_gold))
        m[f"{key}_all"] = with_coverage(_ci(ctx, stat(counts_all, key), len(with_gold)), len(usable), len(with_gold))
    if m["predictions"] == 0:
        m["note"] = "the method made no predictions: precision is 0 by convention (nothing predicted correctly)"
    reasons = [res.unscored_reason for res in ordered if res.unscored_reason]
    if reasons:
        m["judge_unscored_reasons"] = reasons[:20]
    result = SuiteResult(metrics=m)
    judge_text = f"{judge_name} (the evaluated model judges itself)" if m["judge_is_evaluated_model"] else judge_name
    result.tables.append((
        f"FINAL matching (judge {judge_text}; coverage {len(usable)}/{len(with_gold)}: {n_unscored} unscored by the "
        f"method and {m['n_judge_unscored']} by the judge; 'all' counts them as no match)",
        md_table(["recall", "precision", "F1", "judge", "predictions", "gold", "gold matched", "items judged",
                  "judge LLM calls (tokens)"],
                 [[both(m, "recall"), both(m, "precision"), both(m, "f1"), judge_text, m["predictions"], m["gold"],
                   m["gold_matched"], m["n_judged"], f"{m['judge_usage']['calls']} ({m['judge_usage']['prompt_tokens']}"
                   f"+{m['judge_usage']['completion_tokens']})"]]),
    ))
    return result
