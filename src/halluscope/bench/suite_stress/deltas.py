"""Rows of a stress set and how scores move under perturbations: mean score per perturbation, and the score change
of each perturbed row against its original (long-document stress-test paper App. B tables, Fig. 2)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from halluscope.bench.metrics import bootstrap_ci, coverage
from halluscope.bench.suites import SuiteContext
from halluscope.records import Example, Report

ORIGINAL = "original"
KNOWN_ORDER = (
    "paraphrased",
    "simplified",
    "synonym_replaced",
    "less_diverse",
    "negated",
    "compressed",
    "added_source_sentence",
)


def is_stress_set(examples: Sequence[Example]) -> bool:
    return any(e.group is not None and e.difficulty == ORIGINAL for e in examples)


def perturbation_order(names) -> list[str]:
    names = set(names) - {ORIGINAL}
    return [n for n in KNOWN_ORDER if n in names] + sorted(names - set(KNOWN_ORDER))


# ------------------------------------------------------------------------------------------- deltas


@dataclass(frozen=True)
class Pair:
    group: str
    perturbation: str
    original: float
    perturbed: float
    flipped: bool | None  # thresholded labels differ (None when either report has no label)

    @property
    def delta(self) -> float:
        return self.perturbed - self.original


def perturbation_pairs(examples: Sequence[Example], reports: Sequence[Report]) -> tuple[list[Pair], dict[str, int]]:
    """(original, perturbed) score pairs, and per perturbation how many rows could not be paired because
    either report is unscored or the group has no original row."""
    originals: dict[str, Report] = {}
    for ex, rep in zip(examples, reports):
        if ex.group is not None and ex.difficulty == ORIGINAL:
            originals[ex.group] = rep
    pairs: list[Pair] = []
    unpaired: dict[str, int] = defaultdict(int)
    for ex, rep in zip(examples, reports):
        if ex.group is None or ex.difficulty in (None, ORIGINAL):
            continue
        orig = originals.get(ex.group)
        if orig is None or orig.score is None or rep.score is None:
            unpaired[ex.difficulty] += 1
            continue
        flipped = None if orig.label is None or rep.label is None else orig.label != rep.label
        pairs.append(Pair(ex.group, ex.difficulty, orig.score, rep.score, flipped))
    return pairs, dict(unpaired)


def _mean_ci(values: Sequence[float], ctx: SuiteContext, clusters: Sequence[Any] | None = None) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    return bootstrap_ci(
        lambda idx: float(arr[idx].mean()) if len(idx) else None,
        len(arr),
        n_resamples=ctx.n_bootstrap,
        seed=ctx.seed,
        clusters=clusters,
    )


def score_range(reports: Sequence[Report]) -> tuple[float, float] | None:
    """(lowest, highest) score of the scored reports; None when none was scored."""
    seen = [float(r.score) for r in reports if r.score is not None]
    return (min(seen), max(seen)) if seen else None


def delta_stats(
    pairs: Sequence[Pair],
    ctx: SuiteContext,
    unpaired: dict[str, int] | None = None,
    scale: tuple[float, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per perturbation: the score change of its pairs (``mean_delta`` etc., over the scored pairs, with their
    ``coverage``) and, with ``unpaired`` and ``scale`` (the run's lowest and highest score), the values
    counting every row: ``mean_delta_all``, ``mean_abs_delta_all`` and ``label_flip_rate_all``, where a row
    that could not be paired (either report unscored) counts as the worst change a meaning-preserving edit can
    cause, from the highest score seen to the lowest (delta = lowest - highest), and as a label flip."""
    unpaired = unpaired or {}
    by_name: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        by_name[p.perturbation].append(p)
    lo, hi = scale if scale is not None else (math.nan, math.nan)  # nothing scored: no value counting every row
    out: dict[str, dict[str, Any]] = {}
    for name in perturbation_order(set(by_name) | set(unpaired)):
        deltas = np.asarray([p.delta for p in by_name.get(name, [])], dtype=float)
        flips = [p.flipped for p in by_name.get(name, []) if p.flipped is not None]
        missing = int(unpaired.get(name, 0))
        cov = coverage(len(deltas), len(deltas) + missing)
        every = np.concatenate([deltas, np.full(missing, lo - hi)]) if scale is not None or not missing else deltas[:0]
        entry: dict[str, Any] = {
            "n_pairs": len(deltas),
            "n_unpaired": missing,
            "coverage": cov,
            "mean_delta": {**_mean_ci(deltas, ctx), "coverage": cov},
            "mean_delta_all": {**_mean_ci(every, ctx), "coverage": cov},
            "median_delta": float(np.median(deltas)) if len(deltas) else None,
            "min_delta": float(deltas.min()) if len(deltas) else None,
            "max_delta": float(deltas.max()) if len(deltas) else None,
            "mean_abs_delta": float(np.abs(deltas).mean()) if len(deltas) else None,
            "mean_abs_delta_all": float(np.abs(every).mean()) if len(every) else None,
            "label_flip_rate": (sum(flips) / len(flips)) if flips else None,
            "label_flip_rate_all": ((sum(flips) + missing) / (len(flips) + missing)) if flips or missing else None,
        }
        out[name] = entry
    return out


def mean_scores(examples: Sequence[Example], reports: Sequence[Report], ctx: SuiteContext) -> dict[str, Any]:
    """Per row kind (original, then each perturbation): the mean score over its scored rows (``value`` with its
    CI, ``unscored`` and ``coverage``) and ``all``: the mean counting every row, an unscored one at the lowest
    score any row of the run got (its worst outcome: every row is a faithful summary or a meaning-preserving
    edit of one)."""
    by_name: dict[str, list[float]] = defaultdict(list)
    unscored: dict[str, int] = defaultdict(int)
    for ex, rep in zip(examples, reports):
        if ex.group is None or ex.difficulty is None:
            continue
        if rep.score is None:
            unscored[ex.difficulty] += 1
        else:
            by_name[ex.difficulty].append(rep.score)
    scale = score_range([r for e, r in zip(examples, reports) if e.group is not None and e.difficulty is not None])
    names = ([ORIGINAL] if ORIGINAL in by_name or ORIGINAL in unscored else []) + perturbation_order(
        set(by_name) | set(unscored)
    )
    out: dict[str, Any] = {}
    for n in names:
        values, missing = by_name.get(n, []), unscored.get(n, 0)
        cov = coverage(len(values), len(values) + missing)
        # no row of the run scored: no lowest score to count the unscored at, so no value (like the scored one)
        every = [*values, *[scale[0]] * missing] if scale is not None else []
        out[n] = {
            **_mean_ci(values, ctx),
            "unscored": missing,
            "coverage": cov,
            "all": {**_mean_ci(every, ctx), "coverage": cov},
        }
    return out
