"""The whole stress report and the ``stress`` bench suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from halluscope.bench import metrics as M
from halluscope.bench.suite_stress.deltas import (
    ORIGINAL,
    delta_stats,
    is_stress_set,
    mean_scores,
    perturbation_pairs,
    score_range,
)
from halluscope.bench.suite_stress.density import (
    DensityFn,
    EmbeddingDensity,
    density_bins,
    density_correlation,
    density_points,
)
from halluscope.bench.suite_stress.plots import plot_deltas, plot_density
from halluscope.bench.suite_stress.tables import bins_table, delta_table, mean_table
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report

# -------------------------------------------------------------------------------------------- suite

WORST_CASE = (
    "an unscored row counts at the lowest score of the run (every row is a faithful summary or a "
    "meaning-preserving edit of one); an unpaired row as the largest fall, lowest minus highest score, and "
    "a label flip; an unscored density unit at the lowest score of any unit"
)


def stress_report(
    examples: list[Example],
    reports: list[Report],
    ctx: SuiteContext,
    density: DensityFn | None = None,
    *,
    n_bins: int | None = None,
) -> SuiteResult:
    """The whole stress report. ``density`` defaults to :class:`EmbeddingDensity`; density bins are skipped
    when ``ctx.extra["stress_density"]`` is false. ``n_bins`` defaults to ``ctx.extra["density_bins"]`` or 5."""
    if len(examples) != len(reports):
        raise ValueError(f"{len(examples)} examples but {len(reports)} reports")
    n_bins = n_bins or int(ctx.extra.get("density_bins", 5))
    result = SuiteResult()
    label = f"{ctx.method} ({ctx.model or 'no LLM'})"

    means = mean_scores(examples, reports, ctx)
    pairs, unpaired = perturbation_pairs(examples, reports)
    stress_rows = [r for e, r in zip(examples, reports) if e.group is not None and e.difficulty is not None]
    stats = delta_stats(pairs, ctx, unpaired, score_range(stress_rows))
    metrics: dict[str, Any] = {
        "mean_score": means,
        "delta": stats,
        "unpaired": unpaired,
        "worst_case": WORST_CASE,
        "n_groups": len({e.group for e in examples if e.difficulty == ORIGINAL}),
    }
    result.tables.append(("Stress test: mean score per perturbation", mean_table(means)))
    if stats:
        result.tables.append(
            ("Stress test: score change vs the original (perturbed - original)", delta_table(stats, unpaired))
        )
    if pairs:
        result.plots.append(
            plot_deltas(
                pairs,
                stats,
                Path(ctx.out_dir) / "stress_deltas.png",
                f"Score change under meaning-preserving edits: {label}",
            )
        )

    if ctx.extra.get("stress_density", True):
        density_fn = density or EmbeddingDensity()
        points, unit = density_points(examples, reports, density_fn, with_unscored=True)
        measure = getattr(density_fn, "measure", None) or "custom"
        bins = density_bins(points, ctx, n_bins)
        scored_points = [p for p in points if p.score is not None]
        metrics["density"] = {
            "measure": measure,
            "unit": unit,
            "n": len(scored_points),
            "n_units": len(points),
            "coverage": M.coverage(len(scored_points), len(points)),
            "spearman": density_correlation(points),
            "bins": bins,
        }
        if bins:
            result.tables.append(
                (
                    f"Stress test: mean {unit} score by information density ({measure}; 'all' counts "
                    "an unscored unit at the lowest score seen)",
                    bins_table(bins),
                )
            )
        plotted = [b for b in bins if b["score"]["value"] is not None]
        if plotted:
            result.plots.append(
                plot_density(
                    scored_points,
                    plotted,
                    Path(ctx.out_dir) / "stress_density.png",
                    f"Score vs information density: {label}",
                    f"{unit} information density ({measure} cosine, Eq. 3)",
                )
            )
    result.metrics = metrics
    return result


@register_suite("stress", applies=is_stress_set)
def stress_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    return stress_report(examples, reports, ctx)
