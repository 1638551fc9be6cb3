"""Fit the fused verifier on labelled pairs and judge it out of sample (``halluscope fit-verifier``,
``halluscope bench-fused``).

**Data.** The judge's P(supported) per claim is read from a bench output folder of the verdict-first default
(``dcr -o order=verdict_first``: its ``items.jsonl`` holds every claim's verdict and probability), so a fit or a table
needs no new LLM call; the other features are computed from the dataset's source and the claim
(:mod:`halluscope.methods.fused.features`). Items are the generic Example records: ``label`` (1 consistent), or a
human score, consistent when it reaches ``consistent_at`` (QAGS: consistency == 1).

**Claim labels from item labels (the aggregation the claim methods assume).** A consistent item has every claim
supported; an inconsistent item has at least one unsupported claim, which one is not known. The model is fitted as
that multiple-instance problem by expectation-maximisation: a consistent item's claims are label 1 with weight 1;
each claim i of an inconsistent item enters twice, as label 0 with weight r_i and as label 1 with weight 1 - r_i,
where r_i = (1 - p_i) / (1 - prod_j p_j) is the probability that claim i is unsupported given that the item holds at
least one unsupported claim (noisy-OR), p the current model's P(supported). The first round takes p from the judge
(0.5 without one); ``em_rounds`` rounds follow, each refitting scikit-learn's L2-regularised ``LogisticRegression``
(C = 1/l2) on standardised features. Features constant on the training claims are left out (named in the file).

**Calibration.** A Platt scaling (a, b) of the logit is fitted on out-of-fold logits (folds grouped by item), with
the last round's claim weights, so the shipped P(supported) is calibrated on claims it was not fitted on.

**Judged out of sample.** ``fit-verifier`` compares, on k folds grouped by item (an Example.group kept whole), the
item-level AUC of the fused verifier (the mean fused P(supported) of the item's claims, as DCR's probability score
aggregates it) with the judge alone (the mean judge P(supported)); a fit that does not beat the judge is refused.
The leave-one-dataset-out protocol (:func:`lodo_table`) holds out each dataset fold in turn (QAGS, each SummEdits
domain, FINAL), fits on the others and scores it, beside ROUGE, the gate and the current default.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halluscope._optional import require
from halluscope.bench import metrics as M
from halluscope.bench.datasets import Dataset, load_dataset
from halluscope.bench.folder import ITEMS_FILE, RUN_FILE, ItemStore
from halluscope.methods.fused.features import (
    EMBEDDING_FEATURES,
    FEATURE_NAMES,
    JUDGE_FEATURES,
    LEXICAL_FEATURES,
    SHAPE_FEATURES,
    ClaimFeatures,
    claim_features_sync,
)
from halluscope.methods.fused.model import FusedModel
from halluscope.records import Example, Report

FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "fused": FEATURE_NAMES,
    "fused_no_lexical": (*JUDGE_FEATURES, *SHAPE_FEATURES),
    "fused_no_judge": (*LEXICAL_FEATURES, *EMBEDDING_FEATURES, *SHAPE_FEATURES),
}
"""The fused verifier and its ablations: without the lexical features (judge, length, position), without the judge."""

P_FLOOR = 1e-3


class FusedFitError(ValueError):
    """Data a fused verifier cannot be fitted or judged on; the message says what to change."""


@dataclass
class ItemClaims:
    """One labelled item with its claims' features."""

    item_id: str
    fold: str  # the dataset fold (qags, final, summedits:news, ...)
    group: str  # items kept together in a fold (Example.group, else the item)
    label: int  # 1 consistent, 0 inconsistent
    human: float | None
    default_score: float | None  # the verdict-first run's own score (the current default)
    features: list[ClaimFeatures]
    source: str = ""
    target: str = ""

    def judge_score(self) -> float | None:
        """The mean judge P(supported) of the judged claims (None when none was judged)."""
        ps = [f.judge_p for f in self.features if f.judge_p is not None]
        return sum(ps) / len(ps) if ps else None


# --- reading the judge's probabilities from bench folders ------------------------------------------------------


def run_folder(path: str | Path) -> Path:
    """The bench run folder at ``path``: itself when it holds ``items.jsonl`` and ``run.json``, else its one
    sub-folder of a verdict-first run (e.g. ``dcr+order=verdict_first+explain=false``)."""
    folder = Path(path)
    if (folder / ITEMS_FILE).is_file() and (folder / RUN_FILE).is_file():
        return folder
    if not folder.is_dir():
        raise FusedFitError(f"{folder}: no such bench output folder")
    found = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if (sub / ITEMS_FILE).is_file() and (sub / RUN_FILE).is_file():
            run = json.loads((sub / RUN_FILE).read_text(encoding="utf-8"))
            if (run.get("method_options") or {}).get("order") == "verdict_first":
                found.append(sub)
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise FusedFitError(
            f"{folder}: {what} verdict-first run folder(s) inside (a folder with {ITEMS_FILE} and {RUN_FILE} of a "
            "`halluscope bench --methods dcr+order=verdict_first` run); give the run folder itself"
        )
    return found[0]


def item_label(example: Example, consistent_at: float = 1.0) -> int | None:
    """1 consistent, 0 inconsistent: the label, else the human score reaching ``consistent_at``; None without."""
    if example.label is not None:
        return int(example.label)
    if example.human_score is not None:
        return 1 if example.human_score >= consistent_at - 1e-9 else 0
    return None


def fold_of(spec: str, example: Example) -> str:
    """The dataset fold of an item: SummEdits by domain, every other dataset whole (its name without the split)."""
    name = spec.split(":", 1)[0]
    if name == "summedits":
        return f"summedits:{example.meta.get('domain') or spec.partition(':')[2] or 'all'}"
    return Path(name).stem if name.endswith(".jsonl") else name


def items_from_reports(
    spec: str,
    examples: Sequence[Example],
    reports: dict[str, Report],
    consistent_at: float = 1.0,
    embeddings: bool = False,
) -> list[ItemClaims]:
    """Every labelled item that has a report, with its claims' features (no LLM call: the judge's probabilities
    come from the reports). An item without claims keeps an empty feature list (it is scored as unscored)."""
    from halluscope.methods.gate import LexicalGate
    from halluscope.retrieval import RetrievalConfig, shared_index_sync

    gate = LexicalGate()
    config = RetrievalConfig(top_k=gate.opts.top_k, window=gate.opts.window, retriever="bm25")
    out = []
    for ex in examples:
        report = reports.get(ex.id)
        label = item_label(ex, consistent_at)
        if report is None or label is None:
            continue
        by_id = {v.claim.id: v for v in report.verdicts}
        judged = [by_id.get(c.id) for c in report.claims]
        features: list[ClaimFeatures] = []
        if report.claims:
            index = shared_index_sync(ex.source, config)
            features = claim_features_sync(report.claims, judged, ex.source, index, gate, embeddings)
        out.append(
            ItemClaims(
                item_id=ex.id,
                fold=fold_of(spec, ex),
                group=ex.group or ex.id,
                label=label,
                human=ex.human_score,
                default_score=report.score,
                features=features,
                source=ex.source,
                target=ex.target,
            )
        )
    return out


def load_run_items(
    path: str | Path,
    data_dir: str | Path | None = None,
    dataset: Dataset | None = None,
    consistent_at: float = 1.0,
    embeddings: bool = False,
) -> tuple[str, list[ItemClaims]]:
    """(dataset spec, items) of a verdict-first bench folder: its reports joined to the dataset its run.json names
    (or ``dataset``) by example id."""
    folder = run_folder(path)
    run = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    data = dataset or load_dataset(str(run.get("dataset") or ""), data_dir)
    reports = ItemStore(folder / ITEMS_FILE).load()
    if not reports:
        raise FusedFitError(f"{folder}/{ITEMS_FILE} holds no finished item")
    items = items_from_reports(data.spec, data.examples, reports, consistent_at, embeddings)
    if not items:
        raise FusedFitError(f"{folder}: none of its {len(reports)} items is a labelled example of {data.spec}")
    return data.spec, items


# --- fitting --------------------------------------------------------------------------------------------------


def _claims(items: Sequence[ItemClaims], names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X claims x features, owner item index per claim, judge P per claim with 0.5 where none)."""
    rows, owner, judge = [], [], []
    for i, item in enumerate(items):
        for f in item.features:
            rows.append(f.vector(names))
            owner.append(i)
            judge.append(0.5 if f.judge_p is None else f.judge_p)
    return np.array(rows, dtype=float).reshape(len(rows), len(names)), np.array(owner, dtype=int), np.array(judge)


LABEL_RULES: dict[str, str] = {
    "noisy_or": "consistent item: every claim supported (weight 1); inconsistent item: at least one claim unsupported, "
    "claim i as unsupported with weight r_i = (1 - p_i) / (1 - prod_j p_j) and as supported with weight 1 - r_i "
    "(noisy-OR EM, p from the judge first, then from the model)",
    "lowest": "consistent item: every claim supported (weight 1); inconsistent item: its claim with the lowest judge "
    "P(supported) unsupported (weight 1), its other claims left out",
    "item": "every claim takes its item's label, weight 1 / (claims of the item): the claim's P is fitted as the "
    "chance that its item is consistent, as the mean over claims aggregates it",
}
"""How item labels become claim labels (docs/verifiers.md)."""


def responsibilities(p: np.ndarray, owner: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per claim, P(the claim is unsupported | its item's label) under noisy-OR: 0 in a consistent item; in an
    inconsistent one (1 - p_i) / (1 - prod_j p_j)."""
    q = np.clip(p, P_FLOOR, 1 - P_FLOOR)
    r = np.zeros(len(q))
    for i in np.unique(owner):
        mine = owner == i
        if labels[i] == 0:
            r[mine] = np.minimum(1.0, (1 - q[mine]) / (1 - np.prod(q[mine])))
    return r


def claim_weights(rule: str, p: np.ndarray, owner: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weight as supported, weight as unsupported) of each claim under ``rule`` (:data:`LABEL_RULES`), ``p`` the
    current P(supported) of each claim (the judge's in the first round)."""
    inconsistent = labels[owner] == 0
    if rule == "noisy_or":
        r = responsibilities(p, owner, labels)
        return 1 - r, r
    if rule == "lowest":
        neg = np.zeros(len(p))
        for i in np.unique(owner[inconsistent]):
            mine = np.flatnonzero(owner == i)
            neg[mine[np.argmin(p[mine])]] = 1.0
        return np.where(inconsistent, 0.0, 1.0), neg
    if rule == "item":
        share = 1.0 / np.bincount(owner)[owner]
        return np.where(inconsistent, 0.0, share), np.where(inconsistent, share, 0.0)
    raise FusedFitError(f"unknown label rule {rule!r}; rules: {', '.join(LABEL_RULES)}")


def _expanded(Z: np.ndarray, weights: tuple[np.ndarray, np.ndarray]) -> tuple[Any, Any, Any]:
    """The weighted training rows: each claim as label 1 with its supported weight and as label 0 with its
    unsupported weight (rows of weight 0 left out)."""
    pos, neg = weights
    X = np.vstack([Z, Z])
    y = np.concatenate([np.ones(len(Z)), np.zeros(len(Z))])
    w = np.concatenate([pos, neg])
    keep = w > 1e-9
    return X[keep], y[keep], w[keep]


@dataclass
class _Linear:
    names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    coef: np.ndarray
    intercept: float
    weights: tuple[np.ndarray, np.ndarray]  # the last round's claim weights (supported, unsupported)
    dropped: dict[str, str] = field(default_factory=dict)

    def logits(self, X: np.ndarray) -> np.ndarray:
        z = (np.clip(X, self.lo, self.hi) - self.mean) / self.scale
        return np.asarray(z @ self.coef + self.intercept, dtype=float)


def _fit_linear(
    items: Sequence[ItemClaims], names: Sequence[str], l2: float, em_rounds: int, rule: str = "noisy_or"
) -> _Linear:
    require("sklearn", "bench", "fitting the fused verifier")
    from sklearn.linear_model import LogisticRegression

    X_all, owner, judge = _claims(items, names)
    if len(X_all) == 0:
        raise FusedFitError("no claims to fit on")
    labels = np.array([it.label for it in items])
    if len(set(labels.tolist())) < 2:
        raise FusedFitError("fitting needs consistent and inconsistent items")
    spread = X_all.std(axis=0)
    kept = [j for j in range(len(names)) if spread[j] > 1e-12]
    dropped = {names[j]: "constant on the training claims" for j in range(len(names)) if j not in kept}
    X = X_all[:, kept]
    mean, scale = X.mean(axis=0), X.std(axis=0)
    Z = (X - mean) / scale
    weights = claim_weights(rule, judge, owner, labels)
    est = LogisticRegression(C=1.0 / l2, max_iter=2000)
    for _ in range(max(1, em_rounds) if rule == "noisy_or" else 1):  # only noisy-OR's weights follow the model
        Xw, yw, ww = _expanded(Z, weights)
        est.fit(Xw, yw, sample_weight=ww)
        if rule == "noisy_or":
            weights = claim_weights(rule, est.predict_proba(Z)[:, 1], owner, labels)
    return _Linear(
        names=tuple(names[j] for j in kept),
        mean=mean,
        scale=scale,
        lo=X.min(axis=0),
        hi=X.max(axis=0),
        coef=np.ravel(est.coef_),
        intercept=float(np.ravel([est.intercept_])[0]),
        weights=weights,
        dropped=dropped,
    )


def item_folds(items: Sequence[ItemClaims], k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """k (train, test) item index pairs, stratified by label, each Example.group in one fold."""
    require("sklearn", "bench", "fitting the fused verifier")
    from sklearn.model_selection import StratifiedGroupKFold

    labels = np.array([it.label for it in items])
    smallest = min(int((labels == 0).sum()), int((labels == 1).sum()))
    k = min(k, smallest, len({it.group for it in items}))
    if k < 2:
        raise FusedFitError(
            f"out-of-fold evaluation needs at least 2 consistent and 2 inconsistent items; the smaller class has "
            f"{smallest}"
        )
    splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    groups = [it.group for it in items]
    return [(tr, te) for tr, te in splitter.split(np.zeros((len(items), 1)), labels, groups)]


def _platt(logits: np.ndarray, weights: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """Platt's (a, b) on out-of-fold logits with the claims' weighted labels; (1, 0) when it cannot be fitted."""
    from sklearn.linear_model import LogisticRegression

    Xw, yw, ww = _expanded(logits.reshape(-1, 1), weights)
    if len(set(yw.tolist())) < 2:
        return 1.0, 0.0
    est = LogisticRegression(C=1e4, max_iter=2000).fit(Xw, yw, sample_weight=ww)
    return float(est.coef_[0][0]), float(est.intercept_[0])


def fit_model(
    items: Sequence[ItemClaims],
    names: Sequence[str] = FEATURE_NAMES,
    *,
    l2: float = 1.0,
    em_rounds: int = 5,
    label_rule: str = "noisy_or",
    calibrate: bool = True,
    folds: int = 5,
    seed: int = 0,
    training: dict[str, Any] | None = None,
) -> FusedModel:
    """The fused verifier fitted on ``items`` (see the module docstring), calibrated out of fold when ``calibrate``
    and the items allow at least two folds."""
    fit = _fit_linear(items, names, l2, em_rounds, label_rule)
    a, b = 1.0, 0.0
    calibration = "none"
    if calibrate:
        try:
            splits = item_folds(items, folds, seed)
        except FusedFitError:
            splits = []
        if splits:
            X, owner, _ = _claims(items, fit.names)
            oof = np.zeros(len(X))
            for train, test in splits:
                inner = _fit_linear([items[i] for i in train], fit.names, l2, em_rounds, label_rule)
                mine = np.isin(owner, test)
                Xi, _, _ = _claims(items, inner.names)
                oof[mine] = inner.logits(Xi[mine])
            a, b = _platt(oof, fit.weights)
            calibration = f"platt on out-of-fold logits ({len(splits)} folds grouped by item)"
    summary = {
        **(training or {}),
        "items": len(items),
        "claims": sum(len(it.features) for it in items),
        "consistent_items": sum(it.label for it in items),
        "l2": l2,
        "em_rounds": em_rounds if label_rule == "noisy_or" else None,
        "calibration": calibration,
        "dropped_features": fit.dropped,
        "label_rule": {"name": label_rule, "rule": LABEL_RULES.get(label_rule, "")},
    }
    return FusedModel(
        features=fit.names,
        mean=tuple(float(v) for v in fit.mean),
        scale=tuple(float(v) for v in fit.scale),
        lo=tuple(float(v) for v in fit.lo),
        hi=tuple(float(v) for v in fit.hi),
        coef=tuple(float(v) for v in fit.coef),
        intercept=fit.intercept,
        calibration_a=a,
        calibration_b=b,
        training=summary,
    )


# --- item scores ------------------------------------------------------------------------------------------------


def item_scores(model: FusedModel, items: Sequence[ItemClaims]) -> list[float | None]:
    """Each item's score as a check with the fused verifier gives it: the mean fused P(supported) of the claims
    the judge scored (a model without the judge's features: of every claim); None when there is none."""
    needs_judge = any(n in JUDGE_FEATURES for n in model.features)
    out: list[float | None] = []
    for item in items:
        claims = [f for f in item.features if f.judge_p is not None or not needs_judge]
        out.append(float(np.mean(model.predict(claims))) if claims else None)
    return out


def _auc(labels: Sequence[int], scores: Sequence[float | None]) -> float | None:
    return M.roc_auc(list(labels), list(M.worst_case_scores(list(scores), list(labels))))


@dataclass
class FitCheck:
    """The out-of-fold comparison ``fit-verifier`` decides on."""

    folds: int
    n: int
    fused_auc: float | None
    judge_auc: float | None
    diff: dict[str, Any]
    fused_scores: list[float | None]
    judge_scores: list[float | None]

    @property
    def refusal(self) -> str | None:
        if self.fused_auc is None or self.judge_auc is None:
            return "the out-of-fold AUC is undefined (one class only?)"
        if self.fused_auc <= self.judge_auc:
            return (
                f"out of fold the fused verifier's item AUC {self.fused_auc:.3f} does not beat the judge alone "
                f"({self.judge_auc:.3f})"
            )
        return None


def check_fit(
    items: Sequence[ItemClaims],
    names: Sequence[str] = FEATURE_NAMES,
    *,
    folds: int = 5,
    l2: float = 1.0,
    em_rounds: int = 5,
    label_rule: str = "noisy_or",
    seed: int = 0,
    n_bootstrap: int = 1000,
) -> FitCheck:
    """Out-of-fold item AUC of the fused verifier and of the judge alone on the same folds (grouped by item)."""
    splits = item_folds(items, folds, seed)
    fused: list[float | None] = [None] * len(items)
    for train, test in splits:
        model = fit_model(
            [items[i] for i in train], names, l2=l2, em_rounds=em_rounds, label_rule=label_rule, folds=folds, seed=seed
        )
        for i, s in zip(test, item_scores(model, [items[i] for i in test])):
            fused[i] = s
    judge = [it.judge_score() for it in items]
    labels = [it.label for it in items]
    diff = _paired(labels, fused, judge, [it.group for it in items], n_bootstrap, seed)
    return FitCheck(len(splits), len(items), _auc(labels, fused), _auc(labels, judge), diff, fused, judge)


def _paired(
    labels: Sequence[int],
    a: Sequence[float | None],
    b: Sequence[float | None],
    groups: Sequence[str],
    n_bootstrap: int,
    seed: int,
) -> dict[str, Any]:
    """AUC(a) - AUC(b) with a bootstrap CI over the same resamples (whole groups resampled)."""
    y = np.asarray(labels)
    fa = M.worst_case_scores(list(a), list(labels))
    fb = M.worst_case_scores(list(b), list(labels))

    def stat(idx: np.ndarray) -> float | None:
        x, z = M.roc_auc(list(y[idx]), list(fa[idx])), M.roc_auc(list(y[idx]), list(fb[idx]))
        return None if x is None or z is None else x - z

    return M.bootstrap_ci(stat, len(y), n_resamples=n_bootstrap, seed=seed, clusters=list(groups))


def _ci(labels: Sequence[int], scores: Sequence[float | None], groups: Sequence[str], n: int, seed: int) -> Any:
    y = np.asarray(labels)
    s = M.worst_case_scores(list(scores), list(labels))
    return M.bootstrap_ci(
        lambda idx: M.roc_auc(list(y[idx]), list(s[idx])), len(y), n_resamples=n, seed=seed, clusters=list(groups)
    )


# --- leave one dataset out ------------------------------------------------------------------------------------

SINGLE = ("rouge", "gate", "default")
"""The single signals each held-out fold is compared with: ROUGE, the no-LLM gate, the current default."""
COLUMNS = (*SINGLE, *FEATURE_SETS)


async def _baseline_scores(items: Sequence[ItemClaims]) -> dict[str, dict[str, float | None]]:
    """ROUGE's and the gate method's item scores (no LLM)."""
    from halluscope.methods import get_method

    rouge, gate = get_method("rouge"), get_method("gate")
    out: dict[str, dict[str, float | None]] = {}
    for item in items:
        r = await rouge.run(item.source, item.target)
        g = await gate.run(item.source, item.target)
        out[item.item_id] = {"rouge": r.score, "gate": g.score}
    return out


@dataclass
class FoldResult:
    """One held-out fold (or the pooled folds): per column its item scores and AUC with CI, the paired difference
    of the fused verifier against the best single signal, Brier and ECE of the fused score."""

    name: str
    n: int
    consistent: int
    auc: dict[str, dict[str, Any]]
    best_single: str | None
    diff_vs_best: dict[str, Any] | None
    diffs: dict[str, dict[str, Any]]
    brier: float | None
    ece: float | None
    spearman: dict[str, float | None] = field(default_factory=dict)


def _fold_result(
    name: str,
    items: Sequence[ItemClaims],
    scores: dict[str, list[float | None]],
    n_bootstrap: int,
    seed: int,
    best_single: str | None = None,
) -> FoldResult:
    labels = [it.label for it in items]
    groups = [it.group for it in items]
    auc = {c: _ci(labels, scores[c], groups, n_bootstrap, seed) for c in COLUMNS}
    if best_single is None:
        ranked = [c for c in SINGLE if auc[c].get("value") is not None]
        best_single = max(ranked, key=lambda c: auc[c]["value"]) if ranked else None
    diffs = {c: _paired(labels, scores["fused"], scores[c], groups, n_bootstrap, seed) for c in SINGLE}
    fused = [s for s in scores["fused"]]
    scored = [(y, s) for y, s in zip(labels, fused) if s is not None]
    brier = M.brier_score([y for y, _ in scored], [s for _, s in scored]) if scored else None
    ece = M.expected_calibration_error([y for y, _ in scored], [s for _, s in scored]) if scored else None
    spearman: dict[str, float | None] = {}
    if items and all(it.human is not None for it in items):
        human = [float(it.human) for it in items if it.human is not None]
        for c in COLUMNS:
            pairs = [(s, h) for s, h in zip(scores[c], human) if s is not None]
            spearman[c] = M.correlations([s for s, _ in pairs], [h for _, h in pairs])["spearman"] if pairs else None
    return FoldResult(
        name=name,
        n=len(items),
        consistent=sum(labels),
        auc=auc,
        best_single=best_single,
        diff_vs_best=diffs.get(best_single) if best_single else None,
        diffs=diffs,
        brier=brier,
        ece=ece,
        spearman=spearman,
    )


@dataclass
class LodoTable:
    folds: list[FoldResult]
    pooled: FoldResult
    weights: dict[str, dict[str, float]]  # held-out fold -> the fused model's coefficients fitted without it
    settings: dict[str, Any]


def lodo_table(
    items: Sequence[ItemClaims],
    *,
    l2: float = 1.0,
    em_rounds: int = 5,
    label_rule: str = "noisy_or",
    n_bootstrap: int = 1000,
    seed: int = 0,
    baselines: dict[str, dict[str, float | None]] | None = None,
) -> LodoTable:
    """Hold out each dataset fold in turn: fit the fused verifier and its ablations on the other folds, score the
    held-out items; per fold and pooled over the folds, beside ROUGE, the gate and the current default."""
    folds = list(dict.fromkeys(it.fold for it in items))
    if len(folds) < 2:
        raise FusedFitError(f"leave-one-dataset-out needs at least two dataset folds; got {', '.join(folds) or 'none'}")
    base = baselines if baselines is not None else asyncio.run(_baseline_scores(items))
    scores: dict[str, dict[str, float | None]] = {
        it.item_id: {"rouge": base[it.item_id]["rouge"], "gate": base[it.item_id]["gate"], "default": it.default_score}
        for it in items
    }
    weights: dict[str, dict[str, float]] = {}
    for held in folds:
        train = [it for it in items if it.fold != held]
        test = [it for it in items if it.fold == held]
        for column, names in FEATURE_SETS.items():
            model = fit_model(train, names, l2=l2, em_rounds=em_rounds, label_rule=label_rule, seed=seed)
            if column == "fused":
                weights[held] = model.weights()
            for it, s in zip(test, item_scores(model, test)):
                scores[it.item_id][column] = s
    results = []
    for held in folds:
        test = [it for it in items if it.fold == held]
        per = {c: [scores[it.item_id][c] for it in test] for c in COLUMNS}
        results.append(_fold_result(held, test, per, n_bootstrap, seed))
    pooled_scores = {c: [scores[it.item_id][c] for it in items] for c in COLUMNS}
    pooled = _fold_result("pooled", items, pooled_scores, n_bootstrap, seed)
    settings = {
        "l2": l2,
        "em_rounds": em_rounds,
        "label_rule": label_rule,
        "bootstrap": n_bootstrap,
        "seed": seed,
        "folds": folds,
    }
    return LodoTable(results, pooled, weights, settings)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def lodo_markdown(t: LodoTable) -> str:
    """The table: per held-out fold and pooled, each column's item AUC [95% CI], the fused verifier's paired
    difference against the fold's best single signal, Brier and ECE of the fused score."""
    head = (
        "| held out | n (consistent) | ROUGE | gate | default | fused | fused, no lexical | fused, no judge "
        "| fused - best single [95% CI] | Brier | ECE |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in [*t.folds, t.pooled]:
        best = f"{r.best_single}: {M.format_ci(r.diff_vs_best)}" if r.best_single else "-"
        cells = [M.format_ci(r.auc[c]) for c in COLUMNS]
        lines.append(
            f"| {r.name} | {r.n} ({r.consistent}) | {' | '.join(cells)} | {best} | {_fmt(r.brier)} | {_fmt(r.ece)} |"
        )
    pooled = t.pooled
    lines.append("")
    lines.append(
        "Pooled paired differences (fused - each single signal, item AUC): "
        + "; ".join(f"{c} {M.format_ci(pooled.diffs[c])}" for c in SINGLE)
    )
    rho = [r for r in [*t.folds, t.pooled] if r.spearman]
    if rho:
        lines.append("")
        lines.append(
            "Spearman with the human score: "
            + "; ".join(f"{r.name}: " + ", ".join(f"{c} {_fmt(r.spearman.get(c))}" for c in COLUMNS) for r in rho)
        )
    return "\n".join(lines)


def lodo_json(t: LodoTable) -> dict[str, Any]:
    def one(r: FoldResult) -> dict[str, Any]:
        return {
            "name": r.name,
            "n": r.n,
            "consistent": r.consistent,
            "auc": r.auc,
            "best_single": r.best_single,
            "fused_minus_best_single": r.diff_vs_best,
            "fused_minus": r.diffs,
            "brier_fused": r.brier,
            "ece_fused": r.ece,
            "spearman": r.spearman,
        }

    return {
        "settings": t.settings,
        "folds": [one(r) for r in t.folds],
        "pooled": one(t.pooled),
        "weights_by_held_out_fold": t.weights,
    }
