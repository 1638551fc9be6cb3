"""Information density (long-document stress-test paper Eq. 3-4, Fig. 3): a claim's (or target's) mean cosine to the
source sentences, with sentence embeddings or a TF-IDF fallback, and the mean score per density bin."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from halluscope._optional import require
from halluscope.bench.metrics import coverage
from halluscope.bench.suite_stress.deltas import ORIGINAL, _mean_ci
from halluscope.bench.suites import SuiteContext
from halluscope.records import Example, Report
from halluscope.text import split_sentences

# (source, claim texts) -> one density per text (None when it cannot be computed)
DensityFn = Callable[[str, Sequence[str]], list[float | None]]


# ------------------------------------------------------------------------------------------ density


class EmbeddingDensity:
    """The long-document paper's Eq. 3 through the shared retrieval stage, one index per distinct source. When sentence
    embeddings are not available (first call decides, so one report never mixes measures) it uses a
    TF-IDF cosine instead and says so in ``measure``."""

    def __init__(self) -> None:
        self._indexes: dict[str, Any] = {}
        self._tfidf: dict[str, Any] = {}
        self.measure: str | None = None  # "embedding" | "tfidf", set by the first call

    def __call__(self, source: str, texts: Sequence[str]) -> list[float | None]:
        if self.measure != "tfidf":
            values = self._embedding(source, texts)
            if values is not None:
                self.measure = "embedding"
                return values
            if self.measure is None:
                self.measure = "tfidf"
            else:  # embeddings worked for earlier sources: do not switch measure mid-report
                return [None] * len(texts)
        return tfidf_density(source, texts, cache=self._tfidf)

    def _embedding(self, source: str, texts: Sequence[str]) -> list[float | None] | None:
        try:
            from halluscope.retrieval import RetrievalConfig, SourceIndex
        except ImportError:
            return None
        index = self._indexes.get(source)
        if index is None:
            try:
                index = SourceIndex.build(source, RetrievalConfig(retriever="embedding", embed_all_up_to=None))
            except (ImportError, RuntimeError, ValueError, OSError):
                return None
            self._indexes[source] = index
        values = [index.density(t) for t in texts]
        if texts and all(v is None for v in values):
            return None
        return [None if v is None else float(v) for v in values]


def tfidf_density(source: str, texts: Sequence[str], cache: dict | None = None) -> list[float | None]:
    """Mean TF-IDF cosine similarity of each text to all source sentences (a lexical stand-in for Eq. 3)."""
    require("sklearn", "bench", "the stress suite's lexical similarity")
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    fitted = cache.get(source) if cache is not None else None
    if fitted is None:
        sentences = [s.text for s in split_sentences(source)] or [source]
        vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
        try:
            matrix = vectorizer.fit_transform(sentences)
        except ValueError:  # empty vocabulary
            return [None] * len(texts)
        fitted = (vectorizer, matrix)
        if cache is not None:
            cache[source] = fitted
    vectorizer, matrix = fitted
    if not texts:
        return []
    sims = cosine_similarity(vectorizer.transform(list(texts)), matrix)
    return [float(row.mean()) for row in sims]


@dataclass(frozen=True)
class DensityPoint:
    example_id: str
    text: str
    density: float
    score: float | None  # None: the unit was not scored (counted in a bin's value over every unit)


def _claim_score(verdict) -> float | None:
    if verdict.label == "unscored":
        return None
    if verdict.score is not None and 0.0 <= verdict.score <= 1.0:
        return float(verdict.score)
    return 1.0 if verdict.label == "supported" else 0.0


def density_points(
    examples: Sequence[Example], reports: Sequence[Report], density: DensityFn, *, with_unscored: bool = False
) -> tuple[list[DensityPoint], str]:
    """Density/score points on the original rows: per claim when the reports carry claim verdicts, else per
    target. Returns the points and the unit used ("claim" or "target").

    ``with_unscored``: also the units that were not scored, with ``score=None`` (their density needs no score):
    an unscored claim of a scored report, every claim of an unscored report, and an unscored report that has no
    claim as one target unit, so a bin's value counting every unit leaves nothing out."""
    originals = [(e, r) for e, r in zip(examples, reports) if e.difficulty == ORIGINAL]
    rows = [(e, r) for e, r in originals if r.score is not None or with_unscored]
    claim_level = any(any(_claim_score(v) is not None for v in r.verdicts) for _, r in originals if r.score is not None)
    points: list[DensityPoint] = []

    def target_point(ex: Example, score: float | None) -> None:
        sentences = [s.text for s in split_sentences(ex.target)] or [ex.target]
        values = [d for d in density(ex.source, sentences) if d is not None]
        if values:
            points.append(DensityPoint(ex.id, ex.target, float(np.mean(values)), score))

    for ex, rep in rows:
        if claim_level:
            scored = [(v.claim.text, None if rep.score is None else _claim_score(v)) for v in rep.verdicts]
            scored = [(t, s) for t, s in scored if (s is not None or with_unscored) and t.strip()]
            if not scored and rep.score is None:
                target_point(ex, None)
                continue
            values = density(ex.source, [t for t, _ in scored])
            points += [DensityPoint(ex.id, t, d, s) for (t, s), d in zip(scored, values) if d is not None]
        else:
            target_point(ex, None if rep.score is None else float(rep.score))
    return points, "claim" if claim_level else "target"


def density_bins(points: Sequence[DensityPoint], ctx: SuiteContext, n_bins: int = 5) -> list[dict[str, Any]]:
    """Quantile bins over density (Eq. 4): each bin's range, size, mean density and mean score with a CI
    that resamples whole examples (claims of one target are not independent).

    ``score`` is over the bin's scored units, with its ``coverage``; ``score_all`` counts every unit of the bin,
    an unscored one (``score=None``) at the lowest score of any scored unit (its worst outcome: these are
    faithful originals). The bin edges are quantiles over every unit, so both values are over the same bins."""
    if not points:
        return []
    dens = np.asarray([p.density for p in points])
    seen = [p.score for p in points if p.score is not None]
    worst = min(seen) if seen else 0.0
    edges = np.unique(np.quantile(dens, np.linspace(0.0, 1.0, max(1, n_bins) + 1)))
    if len(edges) < 2:
        edges = np.array([dens.min(), dens.max()])
    # bin k holds edges[k] <= d < edges[k+1]; the last bin is closed on the right
    which = np.clip(np.searchsorted(edges, dens, side="right") - 1, 0, len(edges) - 2)
    out = []
    for k in range(len(edges) - 1):
        members = [p for p, w in zip(points, which) if w == k]
        if not members:
            continue
        scored = [p for p in members if p.score is not None]
        cov = coverage(len(scored), len(members))
        out.append(
            {
                "low": float(edges[k]),
                "high": float(edges[k + 1]),
                "n": len(members),
                "n_scored": len(scored),
                "n_examples": len({p.example_id for p in members}),
                "mean_density": float(np.mean([p.density for p in members])),
                "score": {
                    **_mean_ci([p.score for p in scored], ctx, clusters=[p.example_id for p in scored]),
                    "coverage": cov,
                },
                "score_all": {
                    **_mean_ci(
                        [worst if p.score is None else p.score for p in members],
                        ctx,
                        clusters=[p.example_id for p in members],
                    ),
                    "coverage": cov,
                },
            }
        )
    return out


def density_correlation(points: Sequence[DensityPoint]) -> float | None:
    """Spearman between density and score over the scored units."""
    from scipy import stats

    points = [p for p in points if p.score is not None]
    if len(points) < 3 or len({p.density for p in points}) < 2 or len({p.score for p in points}) < 2:
        return None
    rho = stats.spearmanr([p.density for p in points], [p.score for p in points]).statistic
    return None if np.isnan(rho) else float(rho)
