"""The stress report (long-document stress-test paper §5.1, §5.3, App. B): how a method's scores move under
meaning-preserving perturbations, and how they depend on claim information density.

Applies to sets built by ``halluscope generate perturb``: rows share a ``group`` and one row per group has
difficulty ``"original"``; the other rows' difficulty names their perturbation.

- **Mean score per perturbation** (App. B tables): mean over scored rows, with bootstrap 95% CIs.
- **Score change** (Fig. 2): for each perturbed row whose original is also scored, ``delta = perturbed -
  original``; per perturbation the mean delta (bootstrap CI), median, min, max, mean |delta| and the share
  of pairs whose thresholded label flips. A robust detector has deltas near 0 and no flips.
- **Density bins** (Eq. 3-4, Fig. 3), on the original rows: the information density of a claim is its
  mean cosine similarity to all source sentences (``SourceIndex.density`` with sentence embeddings). With
  claim-level verdicts the unit is the claim (score 1 supported / 0 otherwise, or the verdict's own score
  in [0, 1]); for methods without claims (rouge, geval) it is the target (density = mean over its
  sentences, score = the report's score). Units are grouped into quantile bins (equal counts; ties can
  merge bins) and each bin's mean score is reported with a CI clustered by example. Without the
  embeddings extra the density falls back to a TF-IDF cosine -- a lexical proxy, labelled as such.

Unscored reports are counted and left out of every number, never scored as 0.
"""

from halluscope.bench.suite_stress.deltas import (
    KNOWN_ORDER,
    ORIGINAL,
    Pair,
    delta_stats,
    is_stress_set,
    mean_scores,
    perturbation_order,
    perturbation_pairs,
)
from halluscope.bench.suite_stress.density import (
    DensityFn,
    DensityPoint,
    EmbeddingDensity,
    density_bins,
    density_correlation,
    density_points,
    tfidf_density,
)
from halluscope.bench.suite_stress.plots import plot_deltas, plot_density
from halluscope.bench.suite_stress.suite import stress_report, stress_suite  # registers the ``stress`` suite
from halluscope.bench.suite_stress.tables import bins_table, delta_table, mean_table

__all__ = [
    "KNOWN_ORDER",
    "ORIGINAL",
    "DensityFn",
    "DensityPoint",
    "EmbeddingDensity",
    "Pair",
    "bins_table",
    "delta_stats",
    "delta_table",
    "density_bins",
    "density_correlation",
    "density_points",
    "is_stress_set",
    "mean_scores",
    "mean_table",
    "perturbation_order",
    "perturbation_pairs",
    "plot_deltas",
    "plot_density",
    "stress_report",
    "stress_suite",
    "tfidf_density",
]
