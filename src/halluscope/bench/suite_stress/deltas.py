"""Rows of a stress set and how scores move under perturbations: mean score per perturbation, and the score change
of each perturbed row against its original (seed 003 App. B tables, Fig. 2)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from halluscope.bench.metrics import bootstrap_ci
from halluscope.bench.suites import SuiteContext
from halluscope.records import Example, Report

ORIGINAL = "original"
KNOWN_ORDER = ("paraphrased", "simplified", "synonym_replaced", "less_diverse", "negated", "compressed",
               "added_source_sentence")


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
    return bootstrap_ci(lambda idx: float(arr[idx].mean()) if len(idx) else None, len(arr),
                        n_resamples=ctx.n_bootstrap, seed=ctx.seed, clusters=clusters)


def delta_stats(pairs: Sequence[Pair], ctx: SuiteContext) -> dict[str, dict[str, Any]]:
    by_name: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        by_name[p.perturbation].append(p)
    out: dict[str, dict[str, Any]] = {}
    for name in perturbation_order(by_name):
        deltas = np.asarray([p.delta for p in by_name[name]])
        flips = [p.flipped for p in by_name[name] if p.flipped is not None]
        out[name] = {
            "n_pairs": len(deltas),
            "mean_delta": _mean_ci(deltas, ctx),
            "median_delta": float(np.median(deltas)),
            "min_delta": float(deltas.min()),
            "max_delta": float(deltas.max()),
            "mean_abs_delta": float(np.abs(deltas).mean()),
            "label_flip_rate": (sum(flips) / len(flips)) if flips else None,
        }
    return out


def mean_scores(examples: Sequence[Example], reports: Sequence[Report], ctx: SuiteContext) -> dict[str, Any]:
    by_name: dict[str, list[float]] = defaultdict(list)
    unscored: dict[str, int] = defaultdict(int)
    for ex, rep in zip(examples, reports):
        if ex.group is None or ex.difficulty is None:
            continue
        if rep.score is None:
            unscored[ex.difficulty] += 1
        else:
            by_name[ex.difficulty].append(rep.score)
    names = ([ORIGINAL] if ORIGINAL in by_name or ORIGINAL in unscored else []) + perturbation_order(
        set(by_name) | set(unscored))
    return {n: {**_mean_ci(by_name.get(n, []), ctx), "unscored": unscored.get(n, 0)} for n in names}
