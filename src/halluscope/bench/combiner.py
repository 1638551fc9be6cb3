"""Fit a combiner of several methods' scores on labelled pairs (``halluscope fit-combiner``).

Inputs are the members' reports on the same labelled items (bench output folders' ``items.jsonl``, or fresh bench
runs). The features of a member are its score and, with ``features="all"``, its numeric sub-scores, plus a 0/1
"unscored" indicator when the member could not score some items. A missing value (the member unscored, or a
sub-score it did not give) is replaced by the feature's training mean and counted in the file; nothing is
dropped silently. Features that are constant on the items, or an exact copy of an earlier one (G-Eval's score is
its rating rescaled), are left out before fitting, with the reason written in the file. These choices look at
the features only, never at the labels, so they do not leak into the cross-validation.

The model is small and L2-regularised on standardised features: scikit-learn's ``LogisticRegression`` for binary
labels (score = P(consistent)), ``Ridge`` for human scores. It is judged by k-fold cross-validation (stratified
for labels; whole groups kept in one fold when the items have groups, e.g. SummEdits' edits of one summary) and
compared on the same folds with each member: its own score as it is (an unscored item counted as the worst
outcome, as the bench does), and the same model fitted on that member's features alone. AUC (labels) or Spearman
(human scores), each with a bootstrap 95% CI (:func:`halluscope.bench.metrics.bootstrap_ci`; the same resamples
for every column, so the paired difference has a CI too). A combiner that does not beat its best member out of
fold is refused (:attr:`CombinerFit.refusal`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from halluscope._optional import require
from halluscope.bench import metrics as M
from halluscope.bench.folder import ITEMS_FILE, RESULTS_JSON, RUN_FILE, ItemStore
from halluscope.methods.ensemble import CombinerFeature, CombinerFile, CombinerMember
from halluscope.records import Example, Report

Features = Literal["all", "score"]
MISSING_DOC = (
    "A member that could not score an item (score None) has every value feature missing on it; a missing "
    "value is replaced by the feature's training mean (z = 0) and counted in n_imputed. A member unscored "
    "on some training items also gets an 'unscored' indicator feature (1 = unscored). At prediction the "
    "same rule applies to a member that is unscored or not run (skipped by the cascade: its indicator "
    "stays at its mean too); values are clipped to the training range [min, max]."
)


class CombinerError(ValueError):
    """Inputs a combiner cannot be fitted on; the message says what to change."""


@dataclass
class MemberRuns:
    """One member's reports on the items, and how to run it again."""

    spec: CombinerMember
    reports: dict[str, Report]
    dataset: str | None = None


def load_member_run(folder: str | Path, name: str | None = None) -> MemberRuns:
    """A member from a bench output folder: its ``run.json`` (method, options, model) and ``items.jsonl``."""
    folder = Path(folder)
    run_file, items = folder / RUN_FILE, folder / ITEMS_FILE
    if not run_file.is_file() or not items.is_file():
        raise CombinerError(
            f"{folder} is not a bench output folder (needs {RUN_FILE} and {ITEMS_FILE}; "
            "run `halluscope bench ... -O FOLDER` first)"
        )
    run = json.loads(run_file.read_text(encoding="utf-8"))
    results_file = folder / RESULTS_JSON
    results = json.loads(results_file.read_text(encoding="utf-8")) if results_file.is_file() else {}
    from halluscope.methods import method_class

    method = run["method"]
    try:
        uses_llm = method_class(method).uses_llm
    except KeyError as exc:
        raise CombinerError(f"{folder}: {exc.args[0]}") from None
    spec = CombinerMember(
        name=name or method,
        method=method,
        options=run.get("method_options") or {},
        model=run.get("model"),
        uses_llm=bool(uses_llm),
        prompt_version=run.get("prompt_version") or results.get("prompt_version") or "none",
        run=str(folder),
    )
    reports = ItemStore(items).load()
    if not reports:
        raise CombinerError(f"{folder}/{ITEMS_FILE} holds no finished item")
    return MemberRuns(spec=spec, reports=reports, dataset=run.get("dataset"))


# --- features ------------------------------------------------------------------------------------------------


@dataclass
class FeatureTable:
    names: list[str]
    specs: list[dict[str, Any]]  # member, source, key
    X: np.ndarray  # items x features, NaN = missing
    dropped: dict[str, str] = field(default_factory=dict)

    def columns_of(self, member: str) -> list[int]:
        return [j for j, s in enumerate(self.specs) if s["member"] == member]


def feature_table(members: Sequence[MemberRuns], ids: Sequence[str], features: Features = "all") -> FeatureTable:
    """The candidate features of every member on ``ids`` (NaN where missing), minus the constant ones and exact
    copies (their names and why in ``dropped``)."""
    names: list[str] = []
    specs: list[dict[str, Any]] = []
    cols: list[list[float]] = []
    for m in members:
        reports = [m.reports[i] for i in ids]
        unscored = [r.score is None for r in reports]

        def value(r: Report, x: float | None) -> float:
            return float("nan") if r.score is None or x is None else float(x)

        names.append(f"{m.spec.name}.score")
        specs.append({"member": m.spec.name, "source": "score", "key": None})
        cols.append([value(r, r.score) for r in reports])
        if features == "all":
            keys = list(dict.fromkeys(k for r in reports if r.score is not None for k in r.subscores))
            for key in keys:
                names.append(f"{m.spec.name}.{key}")
                specs.append({"member": m.spec.name, "source": "subscore", "key": key})
                cols.append([value(r, r.subscores.get(key)) for r in reports])
        names.append(f"{m.spec.name}.unscored")
        specs.append({"member": m.spec.name, "source": "unscored", "key": None})
        cols.append([1.0 if u else 0.0 for u in unscored])
    X = np.array(cols, dtype=float).T if cols else np.empty((len(ids), 0))
    keep: list[int] = []
    dropped: dict[str, str] = {}
    filled = _mean_impute(X)
    for j, name in enumerate(names):
        observed = X[:, j][~np.isnan(X[:, j])]
        if observed.size == 0:
            dropped[name] = "never observed on these items"
            continue
        if np.ptp(filled[:, j]) == 0:
            dropped[name] = (
                "the member was never unscored on these items"
                if specs[j]["source"] == "unscored"
                else "constant on these items"
            )
            continue
        span = _spanned_by(filled, j, keep)
        if span is not None:
            dropped[name] = f"an exact linear combination of {', '.join(names[k] for k in span)}"
            continue
        keep.append(j)
    return FeatureTable([names[j] for j in keep], [specs[j] for j in keep], X[:, keep], dropped)


def _mean_impute(X: np.ndarray) -> np.ndarray:
    out = X.copy()
    for j in range(X.shape[1]):
        col = out[:, j]
        observed = col[~np.isnan(col)]
        col[np.isnan(col)] = observed.mean() if observed.size else 0.0
    return out


def _spanned_by(X: np.ndarray, j: int, keep: Sequence[int]) -> list[int] | None:
    """The kept columns (with an intercept) that reproduce column ``j`` exactly (G-Eval's score is its rating
    rescaled; ROUGE's mean score is the mean of its three sub-scores; the gate's claim count is the sum of its
    outcome counts), or None when ``j`` adds information."""
    if not keep:
        return None
    target = X[:, j] - X[:, j].mean()
    basis = X[:, list(keep)] - X[:, list(keep)].mean(axis=0)
    coef, *_ = np.linalg.lstsq(basis, target, rcond=None)
    if np.linalg.norm(target - basis @ coef) > 1e-9 * max(1.0, float(np.linalg.norm(target))):
        return None
    used = [k for k, c in zip(keep, coef) if abs(c) > 1e-9]
    return used or list(keep)


# --- the model -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    kind: Literal["binary", "score"]
    l2: float = 1.0

    def estimator(self) -> Any:
        require("sklearn", "bench", "fitting a combiner")
        from sklearn.linear_model import LogisticRegression, Ridge

        if self.kind == "binary":
            return LogisticRegression(C=1.0 / self.l2, max_iter=1000)
        return Ridge(alpha=self.l2)

    def identity(self) -> dict[str, Any]:
        import sklearn

        est = self.estimator()
        return {
            "class": f"{type(est).__module__}.{type(est).__name__}",
            "params": {k: v for k, v in est.get_params().items() if isinstance(v, (int, float, str, bool, type(None)))},
            "l2": self.l2,
            "standardised": True,
            "scikit_learn": sklearn.__version__,
        }


@dataclass
class Fitted:
    mean: np.ndarray
    scale: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    coef: np.ndarray
    intercept: float
    n_imputed: np.ndarray


def fit_linear(X: np.ndarray, y: np.ndarray, spec: ModelSpec) -> Fitted:
    """Mean-impute, standardise and fit on ``X`` (NaN = missing); the parameters the saved file holds."""
    observed_mean = np.array([np.nanmean(X[:, j]) if (~np.isnan(X[:, j])).any() else 0.0 for j in range(X.shape[1])])
    filled = np.where(np.isnan(X), observed_mean, X)
    scale = filled.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    Z = (filled - observed_mean) / scale
    est = spec.estimator()
    est.fit(Z, y)
    coef = np.ravel(est.coef_)
    intercept = float(np.ravel([est.intercept_])[0])
    lo = np.array([np.nanmin(X[:, j]) if (~np.isnan(X[:, j])).any() else 0.0 for j in range(X.shape[1])])
    hi = np.array([np.nanmax(X[:, j]) if (~np.isnan(X[:, j])).any() else 0.0 for j in range(X.shape[1])])
    return Fitted(observed_mean, scale, lo, hi, coef, intercept, np.isnan(X).sum(axis=0))


def predict_value(f: Fitted, X: np.ndarray) -> np.ndarray:
    """The combined value (logit or predicted human score) of items, as the saved combiner computes it."""
    filled = np.where(np.isnan(X), f.mean, np.clip(X, f.lo, f.hi))
    return np.asarray(((filled - f.mean) / f.scale) @ f.coef + f.intercept, dtype=float)


# --- cross-validation ----------------------------------------------------------------------------------------


def _metric(kind: str) -> Callable[[np.ndarray, np.ndarray], float | None]:
    if kind == "binary":
        return lambda y, s: M.roc_auc(list(y), list(s))
    return lambda y, s: M.correlations(list(s), list(y))["spearman"]


def _worst_filled(scores: Sequence[float | None], y: np.ndarray, kind: str) -> np.ndarray:
    """A member's scores with every unscored item at its worst outcome for the metric of ``kind``
    (:data:`worst_case.HEADLINE_RULE`): the wrong side for AUC, the placement giving the lowest Spearman."""
    from halluscope.bench import worst_case as W

    if kind == "binary":
        return M.worst_case_scores(scores, list(y.astype(int)))
    return W.worst_correlation("spearman", scores, y).filled


def cv_folds(
    y: np.ndarray, kind: str, groups: Sequence[str] | None, folds: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (train, test) index pairs every column is judged on."""
    require("sklearn", "bench", "fitting a combiner")
    from sklearn.model_selection import GroupKFold, KFold, StratifiedGroupKFold, StratifiedKFold

    n = len(y)
    if kind == "binary":
        smallest = min(Counter(y.tolist()).values())
        k = min(folds, smallest)
        if k < 2:
            raise CombinerError(
                f"cross-validation needs at least 2 items of each label; the smaller class has {smallest}"
            )
        splitter: Any = (
            StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
            if groups is not None
            else StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
        )
    else:
        k = min(folds, n)
        if k < 2:
            raise CombinerError("cross-validation needs at least 2 items")
        splitter = GroupKFold(n_splits=k) if groups is not None else KFold(n_splits=k, shuffle=True, random_state=seed)
    dummy = np.zeros((n, 1))
    return [(train, test) for train, test in splitter.split(dummy, y, groups)]


def out_of_fold(
    X: np.ndarray, y: np.ndarray, folds: list[tuple[np.ndarray, np.ndarray]], spec: ModelSpec
) -> np.ndarray:
    pred = np.full(len(y), np.nan)
    for train, test in folds:
        pred[test] = predict_value(fit_linear(X[train], y[train], spec), X[test])
    return pred


@dataclass
class CombinerFit:
    """A fitted combiner: the file content (:class:`CombinerFile`), and ``refusal`` (None when accepted)."""

    combiner: CombinerFile
    refusal: str | None
    oof: np.ndarray

    def markdown(self) -> str:
        return cv_markdown(self.combiner)


def fit_combiner(
    examples: Sequence[Example],
    members: Sequence[MemberRuns],
    *,
    dataset: str = "",
    folds: int = 5,
    seed: int = 0,
    l2: float = 1.0,
    features: Features = "all",
    n_bootstrap: int = 1000,
    min_gain: float = 0.0,
    transfer_by: str | None = None,
    target: Literal["auto", "label", "human_score"] = "auto",
) -> CombinerFit:
    """Fit, cross-validate and (when asked) transfer-test a combiner of ``members`` on ``examples`` (the items every
    member scored; labels or human scores from the examples)."""
    if not members:
        raise CombinerError("a combiner needs at least one member")
    names = [m.spec.name for m in members]
    if len(set(names)) != len(names):
        raise CombinerError(f"member names repeat ({', '.join(names)}): name them apart (NAME=FOLDER)")
    examples = [e for e in examples if all(e.id in m.reports for m in members)]
    kind, y = _targets(examples, target)
    if len(examples) < 4:
        raise CombinerError(f"only {len(examples)} labelled items are scored by every member; a combiner needs more")
    ids = [e.id for e in examples]
    table = feature_table(members, ids, features)
    if not table.names:
        raise CombinerError("no usable feature: every candidate is constant on these items")
    spec = ModelSpec(kind, l2)
    groups = [str(e.group) for e in examples] if all(e.group for e in examples) else None
    fold_pairs = cv_folds(y, kind, groups, folds, seed)
    metric = _metric(kind)
    oof = out_of_fold(table.X, y, fold_pairs, spec)

    def ci(pred: np.ndarray, rows: np.ndarray | None = None) -> dict[str, Any]:
        rows = np.arange(len(y)) if rows is None else rows
        yy, pp = y[rows], pred[rows]
        cl = None if groups is None else [groups[i] for i in rows]
        return M.bootstrap_ci(
            lambda idx: metric(yy[idx], pp[idx]), len(rows), n_resamples=n_bootstrap, seed=seed, clusters=cl
        )

    columns: dict[str, dict[str, Any]] = {}
    raw_preds: dict[str, np.ndarray] = {}
    alone_preds: dict[str, np.ndarray] = {}
    for m in members:
        scores = [m.reports[i].score for i in ids]
        n_scored = sum(s is not None for s in scores)
        raw = _worst_filled(scores, y, kind)
        raw_preds[m.spec.name] = raw
        cols = table.columns_of(m.spec.name)
        entry: dict[str, Any] = {
            "score": ci(raw),
            "coverage": M.coverage(n_scored, len(ids)),
            "features": [table.names[j] for j in cols],
        }
        if cols:
            alone = out_of_fold(table.X[:, cols], y, fold_pairs, spec)
            alone_preds[m.spec.name] = alone
            entry["fitted_alone"] = ci(alone)
        columns[m.spec.name] = entry
    combined = ci(oof)
    candidates = {(name, "score"): raw_preds[name] for name in raw_preds}
    candidates |= {(name, "fitted_alone"): alone_preds[name] for name in alone_preds}
    values = {key: metric(y, pred) for key, pred in candidates.items()}
    defined = {k: v for k, v in values.items() if v is not None}
    if not defined or combined["value"] is None:
        raise CombinerError("the metric is undefined on these items (one label only, or constant scores)")
    best_key = max(defined, key=lambda k: defined[k])
    best = candidates[best_key]
    gain = M.bootstrap_ci(
        lambda idx: _diff(metric, y[idx], oof[idx], best[idx]),
        len(y),
        n_resamples=n_bootstrap,
        seed=seed,
        clusters=groups,
    )
    metric_name = "AUC" if kind == "binary" else "Spearman"
    refusal = None
    if combined["value"] - defined[best_key] <= min_gain:
        refusal = (
            f"the combiner's out-of-fold {metric_name} {combined['value']:.3f} does not beat its best member, "
            f"{best_key[0]} ({'its own score' if best_key[1] == 'score' else 'fitted alone'}: "
            f"{defined[best_key]:.3f})"
            + (f" by more than {min_gain}" if min_gain else "")
            + "; use that member instead (or --force to write the file anyway)"
        )
    final = fit_linear(table.X, y, spec)
    if kind == "binary":
        probs = 1 / (1 + np.exp(-oof))
        threshold = M.best_threshold(list(y.astype(int)), list(probs))
        threshold = 0.5 if threshold is None else float(min(1.0, max(0.0, threshold)))
        rule = (
            "maximises balanced accuracy on the out-of-fold predictions (Youden's J; optimistic for the "
            "balanced accuracy reported at it, chosen on the same predictions)"
        )
        bal = M.balanced_accuracy(list(y.astype(int)), list(probs), threshold)
        extra: dict[str, Any] = {"balanced_accuracy_at_threshold": bal}
        target_range = None
    else:
        threshold, rule, extra = 0.5, "the middle of the human scores' training range (no labels to pick one on)", {}
        target_range = (float(y.min()), float(y.max()))
    member_specs = [m.spec for m in members]
    feats = [
        CombinerFeature(
            name=table.names[j],
            member=s["member"],
            source=s["source"],
            key=s["key"],
            mean=float(final.mean[j]),
            scale=float(final.scale[j]),
            min=float(final.lo[j]),
            max=float(final.hi[j]),
            weight=float(final.coef[j]),
            n_imputed=int(final.n_imputed[j]),
        )
        for j, s in enumerate(table.specs)
    ]
    from halluscope._version import package_version

    combiner = CombinerFile(
        kind=kind,
        estimator=spec.identity(),
        members=member_specs,
        features=feats,
        dropped_features=table.dropped,
        intercept=final.intercept,
        threshold=threshold,
        threshold_rule=rule,
        target_range=target_range,
        missing_values=MISSING_DOC,
        accepted=refusal is None,
        refusal=refusal,
        cv={
            "metric": metric_name,
            "folds": len(fold_pairs),
            "seed": seed,
            "splitter": ("stratified " if kind == "binary" else "") + ("group " if groups else "") + "k-fold",
            "grouped_by": "Example.group" if groups else None,
            "bootstrap_resamples": n_bootstrap,
            "bootstrap_clusters": "Example.group" if groups else None,
            "combiner": combined,
            "members": columns,
            "best_member": {"member": best_key[0], "as": best_key[1], "value": defined[best_key]},
            "gain_over_best": gain,
            "min_gain": min_gain,
            **extra,
        },
        data=_data_record(dataset, examples, y, kind),
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        halluscope_version=package_version(),
    )
    if transfer_by:
        combiner = combiner.model_copy(
            update={
                "transfer": _transfer(
                    examples, members, table, y, kind, spec, oof, transfer_by, n_bootstrap, seed, groups, ci
                )
            }
        )
    return CombinerFit(combiner, refusal, oof)


def _diff(
    metric: Callable[[np.ndarray, np.ndarray], float | None], y: np.ndarray, a: np.ndarray, b: np.ndarray
) -> float | None:
    x, z = metric(y, a), metric(y, b)
    return None if x is None or z is None else x - z


def _targets(examples: Sequence[Example], target: str) -> tuple[Literal["binary", "score"], np.ndarray]:
    if target == "auto":
        target = "label" if examples and all(e.label is not None for e in examples) else "human_score"
    if target == "label":
        missing = [e.id for e in examples if e.label is None]
        if missing:
            raise CombinerError(f"{len(missing)} items have no label (e.g. {missing[0]}); use --target human_score")
        return "binary", np.array([e.label for e in examples], dtype=float)
    missing = [e.id for e in examples if e.human_score is None]
    if missing or not examples:
        raise CombinerError(
            f"{len(missing)} items have neither a label nor a human score"
            + (f" (e.g. {missing[0]})" if missing else "")
        )
    return "score", np.array([e.human_score for e in examples], dtype=float)


def ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def _data_record(dataset: str, examples: Sequence[Example], y: np.ndarray, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dataset": dataset,
        "n": len(examples),
        "splits": dict(Counter(e.split or "-" for e in examples)),
        "ids_sha256": ids_digest([e.id for e in examples]),
    }
    domains = Counter(str(e.meta.get("domain")) for e in examples if e.meta.get("domain") is not None)
    if domains:
        out["domains"] = dict(domains)
    if kind == "binary":
        out["labels"] = {"consistent (1)": int((y == 1).sum()), "inconsistent (0)": int((y == 0).sum())}
    else:
        out["human_score_range"] = [float(y.min()), float(y.max())]
    return out


def _transfer(
    examples: Sequence[Example],
    members: Sequence[MemberRuns],
    table: FeatureTable,
    y: np.ndarray,
    kind: str,
    spec: ModelSpec,
    oof: np.ndarray,
    key: str,
    n_bootstrap: int,
    seed: int,
    groups: Sequence[str] | None,
    ci: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """Leave one value of ``meta[key]`` out: fit on the other values' items, score the held-out ones."""
    values = [e.meta.get(key) for e in examples]
    if any(v is None for v in values):
        raise CombinerError(f"--transfer-by {key}: some items have no meta[{key!r}]")
    rows: list[dict[str, Any]] = []
    for held in sorted(set(map(str, values))):
        test = np.array([i for i, v in enumerate(values) if str(v) == held])
        train = np.array([i for i, v in enumerate(values) if str(v) != held])
        row: dict[str, Any] = {key: held, "n": int(len(test)), "n_train": int(len(train))}
        if kind == "binary" and (len(set(y[train].tolist())) < 2 or len(set(y[test].tolist())) < 2):
            row["note"] = "one label only on one side: no figure"
            rows.append(row)
            continue
        fitted = fit_linear(table.X[train], y[train], spec)
        pred = np.full(len(y), np.nan)
        pred[test] = predict_value(fitted, table.X[test])
        row["trained_on_others"] = ci(pred, test)
        row["cross_validated_in_pool"] = ci(oof, test)
        row["members"] = {}
        for m in members:
            scores = [m.reports[examples[i].id].score for i in test]
            raw = _worst_filled(scores, y[test], kind)
            full = np.full(len(y), np.nan)
            full[test] = raw
            row["members"][m.spec.name] = ci(full, test)
        rows.append(row)
    return {
        "by": f"meta.{key}",
        "rows": rows,
        "note": (
            "trained_on_others: fitted on every other value's items, scored on this one's; "
            "cross_validated_in_pool: this value's items in the pooled k-fold run (out of fold); members: "
            "each member's own score on this value's items"
        ),
    }


# --- rendering -----------------------------------------------------------------------------------------------


def cv_markdown(c: CombinerFile) -> str:
    """The cross-validated table (and the transfer table, when there is one) as Markdown."""
    cv = c.cv
    metric = cv.get("metric", "")
    lines = [
        f"| | {metric} (out of fold, {cv.get('folds')} folds) | {metric} fitted alone on the same folds | scored |",
        "|---|---|---|---|",
        f"| **combiner** ({' + '.join(m.name for m in c.members)}) | {M.format_ci(cv['combiner'])} | - | "
        f"{c.data.get('n')}/{c.data.get('n')} |",
    ]
    for name, entry in cv["members"].items():
        cov = entry["coverage"]
        lines.append(
            f"| {name} | {M.format_ci(entry['score'])} (its own score) | "
            f"{M.format_ci(entry.get('fitted_alone'))} | {cov['scored']}/{cov['total']} |"
        )
    gain = cv["gain_over_best"]
    best = cv["best_member"]
    lines += [
        "",
        f"Gain over the best member ({best['member']}, {best['as'].replace('_', ' ')}): "
        f"{M.format_ci(gain)}. " + ("Accepted." if c.accepted else f"Refused: {c.refusal}"),
    ]
    if c.transfer:
        names = [m.name for m in c.members]
        by = c.transfer["by"]
        lines += [
            "",
            f"| {by} | n | combiner trained on the others | combiner, pooled CV | " + " | ".join(names) + " |",
            "|---|---|---|---|" + "---|" * len(names),
        ]
        for row in c.transfer["rows"]:
            key = by.split(".", 1)[1]
            if "trained_on_others" not in row:
                lines.append(f"| {row[key]} | {row['n']} | {row.get('note', '-')} | | " + " | " * len(names))
                continue
            lines.append(
                f"| {row[key]} | {row['n']} | {M.format_ci(row['trained_on_others'])} | "
                f"{M.format_ci(row['cross_validated_in_pool'])} | "
                + " | ".join(M.format_ci(row["members"][n]) for n in names)
                + " |"
            )
    return "\n".join(lines)


def weights_markdown(c: CombinerFile) -> str:
    lines = ["| feature | weight (standardised) | mean | scale | imputed |", "|---|---|---|---|---|"]
    for f in c.features:
        lines.append(f"| {f.name} | {f.weight:+.3f} | {f.mean:.3f} | {f.scale:.3f} | {f.n_imputed} |")
    lines.append(f"| (intercept) | {c.intercept:+.3f} | | | |")
    return "\n".join(lines)


def write_combiner(c: CombinerFile, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(c.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
