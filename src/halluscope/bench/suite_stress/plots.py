"""The stress report's plots: score change per perturbation, score against information density."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluscope._optional import require
from halluscope.bench.suite_stress.deltas import Pair
from halluscope.bench.suite_stress.density import DensityPoint

# -------------------------------------------------------------------------------------------- plots


def _figure(width: float, height: float) -> Any:
    require("matplotlib", "bench", "the stress suite's plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _err(ci: dict[str, Any]) -> tuple[float, float]:
    value, low, high = ci.get("value"), ci.get("low"), ci.get("high")
    if value is None or low is None or high is None:
        return 0.0, 0.0
    return max(0.0, value - low), max(0.0, high - value)


def plot_deltas(pairs: Sequence[Pair], stats: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    """Bars: mean delta per perturbation with its 95% CI; dots: every pair's delta (min..max visible)."""
    names = list(stats)
    fig = _figure(max(5.0, 1.1 * len(names) + 2.5), 4.4)
    ax = fig.add_subplot()
    means = [stats[n]["mean_delta"]["value"] or 0.0 for n in names]
    errs = np.array([_err(stats[n]["mean_delta"]) for n in names]).T if names else None
    ax.bar(range(len(names)), means, yerr=errs, capsize=4, color="tab:blue", alpha=0.55)
    rng = np.random.default_rng(0)
    for i, n in enumerate(names):
        ds = [p.delta for p in pairs if p.perturbation == n]
        ax.scatter(i + rng.uniform(-0.18, 0.18, len(ds)), ds, s=9, color="k", alpha=0.5, zorder=3)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(
        range(len(names)), [f"{n}\n(n={stats[n]['n_pairs']})" for n in names], rotation=30, ha="right", fontsize="small"
    )
    ax.set_ylabel("score change (perturbed - original)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_density(
    points: Sequence[DensityPoint], bins: Sequence[dict[str, Any]], path: Path, title: str, xlabel: str
) -> Path:
    """Score against claim density: every unit as a faint dot, bin means with 95% CIs as a line."""
    fig = _figure(5.6, 4.4)
    ax = fig.add_subplot()
    ax.scatter([p.density for p in points], [p.score for p in points], s=8, alpha=0.25, color="grey")
    if bins:
        xs = [b["mean_density"] for b in bins]
        ys = [b["score"]["value"] for b in bins]
        errs = np.array([_err(b["score"]) for b in bins]).T
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=4, color="tab:red", label="bin mean (95% CI)")
        ax.legend(loc="best", fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("score")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path
