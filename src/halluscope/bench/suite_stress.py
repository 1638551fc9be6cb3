"""The stress report (seed 003 §5.1, §5.3, App. B): how a method's scores move under meaning-preserving
perturbations, and how they depend on claim information density.

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

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from halluscope._optional import require
from halluscope.bench.metrics import bootstrap_ci
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report
from halluscope.text import split_sentences

ORIGINAL = "original"
KNOWN_ORDER = ("paraphrased", "simplified", "synonym_replaced", "less_diverse", "negated", "compressed",
               "added_source_sentence")

# (source, claim texts) -> one density per text (None when it cannot be computed)
DensityFn = Callable[[str, Sequence[str]], list[float | None]]


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


# ------------------------------------------------------------------------------------------ density


class EmbeddingDensity:
    """Seed 003 Eq. 3 through the shared retrieval stage, one index per distinct source. When sentence
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
    score: float


def _claim_score(verdict) -> float | None:
    if verdict.label == "unscored":
        return None
    if verdict.score is not None and 0.0 <= verdict.score <= 1.0:
        return float(verdict.score)
    return 1.0 if verdict.label == "supported" else 0.0


def density_points(examples: Sequence[Example], reports: Sequence[Report], density: DensityFn,
                   ) -> tuple[list[DensityPoint], str]:
    """Density/score points on the original rows: per claim when the reports carry claim verdicts, else per
    target. Returns the points and the unit used ("claim" or "target")."""
    rows = [(e, r) for e, r in zip(examples, reports) if e.difficulty == ORIGINAL and r.score is not None]
    claim_level = any(any(_claim_score(v) is not None for v in r.verdicts) for _, r in rows)
    points: list[DensityPoint] = []
    for ex, rep in rows:
        if claim_level:
            scored = [(v.claim.text, _claim_score(v)) for v in rep.verdicts]
            scored = [(t, s) for t, s in scored if s is not None and t.strip()]
            values = density(ex.source, [t for t, _ in scored])
            points += [DensityPoint(ex.id, t, d, s) for (t, s), d in zip(scored, values) if d is not None]
        else:
            sentences = [s.text for s in split_sentences(ex.target)] or [ex.target]
            values = [d for d in density(ex.source, sentences) if d is not None]
            if values:
                points.append(DensityPoint(ex.id, ex.target, float(np.mean(values)), float(rep.score)))
    return points, "claim" if claim_level else "target"


def density_bins(points: Sequence[DensityPoint], ctx: SuiteContext, n_bins: int = 5) -> list[dict[str, Any]]:
    """Quantile bins over density (Eq. 4): each bin's range, size, mean density and mean score with a CI
    that resamples whole examples (claims of one target are not independent)."""
    if not points:
        return []
    dens = np.asarray([p.density for p in points])
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
        out.append({
            "low": float(edges[k]),
            "high": float(edges[k + 1]),
            "n": len(members),
            "n_examples": len({p.example_id for p in members}),
            "mean_density": float(np.mean([p.density for p in members])),
            "score": _mean_ci([p.score for p in members], ctx, clusters=[p.example_id for p in members]),
        })
    return out


def density_correlation(points: Sequence[DensityPoint]) -> float | None:
    from scipy import stats

    if len(points) < 3 or len({p.density for p in points}) < 2 or len({p.score for p in points}) < 2:
        return None
    rho = stats.spearmanr([p.density for p in points], [p.score for p in points]).statistic
    return None if np.isnan(rho) else float(rho)


# -------------------------------------------------------------------------------------------- plots


def _figure(width: float, height: float):
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
    ax.set_xticks(range(len(names)), [f"{n}\n(n={stats[n]['n_pairs']})" for n in names], rotation=30,
                  ha="right", fontsize="small")
    ax.set_ylabel("score change (perturbed - original)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_density(points: Sequence[DensityPoint], bins: Sequence[dict[str, Any]], path: Path, title: str,
                 xlabel: str) -> Path:
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


# ------------------------------------------------------------------------------------------- tables


def _fmt(ci: dict[str, Any] | None) -> str:
    if not ci or ci.get("value") is None:
        return "-"
    if ci.get("low") is None or ci.get("high") is None:
        return f"{ci['value']:.3f}"
    return f"{ci['value']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mean_table(means: dict[str, Any]) -> str:
    lines = ["| rows | n | unscored | mean score [95% CI] |", "|---|---|---|---|"]
    for name, ci in means.items():
        lines.append(f"| {name} | {ci['n']} | {ci['unscored']} | {_fmt(ci)} |")
    return "\n".join(lines)


def delta_table(stats: dict[str, dict[str, Any]], unpaired: dict[str, int]) -> str:
    lines = ["| perturbation | pairs | unpaired | mean delta [95% CI] | median | min | max | mean abs | label flips |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in perturbation_order(set(stats) | set(unpaired)):
        s = stats.get(name)
        if s is None:
            lines.append(f"| {name} | 0 | {unpaired.get(name, 0)} | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {name} | {s['n_pairs']} | {unpaired.get(name, 0)} | {_fmt(s['mean_delta'])} | "
            f"{_num(s['median_delta'])} | {_num(s['min_delta'])} | {_num(s['max_delta'])} | "
            f"{_num(s['mean_abs_delta'])} | {_num(s['label_flip_rate'], 2)} |")
    return "\n".join(lines)


def bins_table(bins: Sequence[dict[str, Any]]) -> str:
    lines = ["| density bin | units | examples | mean density | mean score [95% CI] |", "|---|---|---|---|---|"]
    for b in bins:
        lines.append(f"| [{b['low']:.3f}, {b['high']:.3f}] | {b['n']} | {b['n_examples']} | "
                     f"{b['mean_density']:.3f} | {_fmt(b['score'])} |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------- suite


def stress_report(examples: list[Example], reports: list[Report], ctx: SuiteContext,
                  density: DensityFn | None = None, *, n_bins: int | None = None) -> SuiteResult:
    """The whole stress report. ``density`` defaults to :class:`EmbeddingDensity`; density bins are skipped
    when ``ctx.extra["stress_density"]`` is false. ``n_bins`` defaults to ``ctx.extra["density_bins"]`` or 5."""
    if len(examples) != len(reports):
        raise ValueError(f"{len(examples)} examples but {len(reports)} reports")
    n_bins = n_bins or int(ctx.extra.get("density_bins", 5))
    result = SuiteResult()
    label = f"{ctx.method} ({ctx.model or 'no LLM'})"

    means = mean_scores(examples, reports, ctx)
    pairs, unpaired = perturbation_pairs(examples, reports)
    stats = delta_stats(pairs, ctx)
    metrics: dict[str, Any] = {"mean_score": means, "delta": stats, "unpaired": unpaired,
                               "n_groups": len({e.group for e in examples if e.difficulty == ORIGINAL})}
    result.tables.append(("Stress test: mean score per perturbation", mean_table(means)))
    if stats or unpaired:
        result.tables.append(("Stress test: score change vs the original (perturbed - original)",
                              delta_table(stats, unpaired)))
    if stats:
        result.plots.append(plot_deltas(pairs, stats, Path(ctx.out_dir) / "stress_deltas.png",
                                        f"Score change under meaning-preserving edits: {label}"))

    if ctx.extra.get("stress_density", True):
        density_fn = density or EmbeddingDensity()
        points, unit = density_points(examples, reports, density_fn)
        measure = getattr(density_fn, "measure", None) or "custom"
        bins = density_bins(points, ctx, n_bins)
        metrics["density"] = {"measure": measure, "unit": unit, "n": len(points),
                              "spearman": density_correlation(points), "bins": bins}
        if bins:
            result.tables.append((f"Stress test: mean {unit} score by information density ({measure})",
                                  bins_table(bins)))
            result.plots.append(plot_density(points, bins, Path(ctx.out_dir) / "stress_density.png",
                                             f"Score vs information density: {label}",
                                             f"{unit} information density ({measure} cosine, Eq. 3)"))
    result.metrics = metrics
    return result


@register_suite("stress", applies=is_stress_set)
def stress_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    return stress_report(examples, reports, ctx)
