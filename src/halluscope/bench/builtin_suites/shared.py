"""What the built-in suites share: Markdown cells and tables, CIs with their coverage, where a plot goes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluscope.bench import metrics as M
from halluscope.bench.suites import SuiteContext

# --- formatting helpers shared by the suites -------------------------------------------------------


def fmt(value: Any, digits: int = 3) -> str:
    """A metric for a Markdown cell: ``0.712 [0.650, 0.770]`` for a CI dict, ``-`` when undefined."""
    if isinstance(value, dict) and "value" in value:
        if value["value"] is None:
            return "-"
        text = f"{value['value']:.{digits}f}"
        if value.get("low") is not None:
            text += f" [{value['low']:.{digits}f}, {value['high']:.{digits}f}]"
        if value.get("bound"):
            text += " (bound: the exact minimum is no lower)"
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
    return (
        f"{fmt(all_items, digits)} all {cov['total']} · {fmt(scored, digits)} on {cov['scored']}/{cov['total']} scored"
    )


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


def _ci(
    ctx: SuiteContext, statistic: Callable[[np.ndarray], float | None], n: int, clusters: Sequence[Any] | None = None
) -> dict[str, Any]:
    return M.bootstrap_ci(statistic, n, n_resamples=ctx.n_bootstrap, seed=ctx.seed, clusters=clusters)


def _ci_pair(
    ctx: SuiteContext,
    statistic: Callable[[np.ndarray], float | None],
    positions: np.ndarray,
    scored: np.ndarray,
    clusters: Sequence[Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
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
