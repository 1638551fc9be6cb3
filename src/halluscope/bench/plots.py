"""PNG plots for benchmark reports (matplotlib, Agg canvas; no pyplot global state, so suites can draw
concurrently). Each function writes one file and returns its path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from halluscope._optional import require

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure(width: float = 6.4, height: float = 4.2) -> Figure:
    require("matplotlib", "bench", "benchmark plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def violin_plot(groups: Mapping[str, Sequence[float]], path: Path, *, title: str, ylabel: str = "score") -> Path:
    """One violin per named group of scores (groups with no scores are shown empty, with n=0)."""
    fig = _figure(max(4.0, 1.3 * len(groups) + 2))
    ax = fig.add_subplot()
    names = list(groups)
    positions = [i + 1 for i, n in enumerate(names) if len(groups[n]) > 0]
    data = [list(groups[n]) for n in names if len(groups[n]) > 0]
    if data:
        # a violin needs spread; a constant group is drawn as its points only
        spread = [(p, d) for p, d in zip(positions, data) if len(set(d)) > 1]
        if spread:
            ax.violinplot([d for _, d in spread], positions=[p for p, _ in spread], showmedians=True)
        for p, d in zip(positions, data):
            if len(d) <= 200:  # individual points only where they stay readable
                ax.scatter([p] * len(d), d, s=6, alpha=0.35, color="k")
    ax.set_xticks(range(1, len(names) + 1), [f"{n}\n(n={len(groups[n])})" for n in names])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path


def roc_plot(curves: Mapping[str, tuple[Sequence[int], Sequence[float]]], path: Path, *, title: str) -> Path:
    """ROC curves (consistent = positive class), one per named (labels, scores); skips one-class sets."""
    require("sklearn", "bench", "ROC plots")
    from sklearn.metrics import roc_auc_score, roc_curve

    fig = _figure(5.2, 5.0)
    ax = fig.add_subplot()
    for name, (labels, scores) in curves.items():
        if len(set(labels)) < 2:
            continue
        fpr, tpr, _ = roc_curve(labels, scores)
        ax.plot(fpr, tpr, label=f"{name} (AUC {roc_auc_score(labels, scores):.3f})")
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=0.8)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    return path


def scatter_plot(x: Sequence[float], y: Sequence[float], path: Path, *, title: str, xlabel: str, ylabel: str) -> Path:
    fig = _figure(5.2, 4.6)
    ax = fig.add_subplot()
    ax.scatter(x, y, s=10, alpha=0.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path
