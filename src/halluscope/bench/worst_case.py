"""The headline rule for unscored items, stated once for every metric the harness reports.

:data:`HEADLINE_RULE`: the headline value of a metric is the **minimum over every outcome the unscored items
could have had**, reported beside the value over the scored items alone and the coverage. A method therefore
never reports a better headline by leaving the hard items unscored.

How each kind of metric reaches that minimum:

- Set metrics (precision, recall, F1, accuracy, AUC): each unscored item is counted with the outcome that lowers
  the metric most, which for these metrics is one outcome for all of them at once (:data:`SET_RULE`):
  the wrong side of every threshold and every pair for AUC and balanced accuracy, no true positive and every
  wrong prediction it could have made for precision/recall/F1 (:func:`worst_span_counts`,
  :func:`worst_description_counts`).
- Correlations (Pearson, Spearman, Kendall tau-b), pooled or per document: :func:`worst_correlation` and
  :func:`worst_per_document` find the exact minimum over every placement of the unscored items' scores
  (:data:`CORRELATION_RULE`); where the exact minimum would cost too much they return a value that is provably
  no higher, flagged ``exact=False`` and named a bound wherever it is printed.

Every search is exact by an argument written beside it; ``tests/test_worst_case_property.py`` checks, over
hundreds of seeded random small inputs, that no concrete completion of the unscored items gives a lower value.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HEADLINE_RULE = (
    "the headline value is the minimum over every outcome the unscored items could have had "
    "(shown beside the value over the scored items and the coverage)"
)
SET_RULE = (
    "an unscored item counts with the outcome that lowers the metric most: the wrong side of every threshold and "
    "every pair (AUC, balanced accuracy), no true positive and every wrong prediction it could have made "
    "(precision, recall, F1)"
)
CORRELATION_RULE = (
    "the exact minimum over every placement of the unscored items' scores (per document where the correlation is "
    "per document; Pearson: scores within [min(0, lowest score), max(1, highest score)]; Spearman and Kendall: any "
    "order, also below the lowest or above the highest scored item); where that search would be too costly, a "
    "value provably no higher, marked as a bound"
)
DESCRIPTIONS_RULE = (
    "an unscored item counts as matching no gold description and giving as many wrong descriptions as the method "
    "gave on any one scored item (at least one)"
)
SPANS_RULE = "an unscored item counts as flagging every character of its target outside the gold spans, and none inside"

CORRELATIONS = ("pearson", "spearman", "kendall")
_EXHAUSTIVE_LIMIT = 20_000  # completions a rank search enumerates at most
_FACE_LIMIT = 200  # distinct human scores among unscored items for the exact Pearson search
_VERTEX_LIMIT = 14  # unscored items for enumerating every corner of the score box


@dataclass(frozen=True)
class WorstCase:
    """A headline value: ``value`` (None when undefined for every completion), whether it is ``exact`` (a
    completion attains it) or a bound (provably no higher than any completion), ``filled`` (a completion of the
    unscored items attaining ``value`` when exact, the lowest one found when a bound) and ``how`` it was found."""

    value: float | None
    exact: bool
    filled: np.ndarray
    how: str


# --- set metrics ------------------------------------------------------------------------------------


def worst_span_counts(target_length: int, gold_chars: int) -> tuple[int, int, int]:
    """(overlap, predicted, gold) characters for an unscored item (:data:`SPANS_RULE`). Adding predicted
    characters never raises P = tp/pred or F1 = 2 tp/(pred + gold), adding overlap never lowers them, so this one
    outcome is the minimum of precision, recall and F1 at once."""
    return 0, max(0, target_length - gold_chars), gold_chars


def worst_description_counts(n_gold: int, n_wrong: int) -> tuple[int, int, int]:
    """(gold matched, predictions, gold) for an unscored item of FINAL matching (:data:`DESCRIPTIONS_RULE`):
    ``n_wrong`` predictions, none matching."""
    return 0, max(1, n_wrong), n_gold


def score_interval(values: Sequence[float]) -> tuple[float, float]:
    """The scores an unscored item could have had: [0, 1] widened to every scored value."""
    vals = [float(v) for v in values]
    return (min([0.0, *vals]), max([1.0, *vals]))


# --- correlations: vectorized values over rows of completions ----------------------------------------


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean()
    den = np.sqrt((xc**2).sum(axis=-1)) * math.sqrt(float((yc**2).sum()))
    num = xc @ yc
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 1e-300, num / np.where(den > 1e-300, den, 1.0), np.nan)
    # a constant row: undefined, even when rounding leaves it a hair away from constant
    return np.where(np.ptp(x, axis=-1) > 0, out, np.nan)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return _pearson_rows(rankdata(x, axis=-1), rankdata(y))


def _kendall_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    n = y.shape[0]
    sy = np.sign(y[:, None] - y[None, :])
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    out = np.empty(x.shape[0])
    n2 = float((sy[upper] == 0).sum())
    n0 = n * (n - 1) / 2
    for start in range(0, x.shape[0], 512):
        chunk = x[start : start + 512]
        sx = np.sign(chunk[:, :, None] - chunk[:, None, :])
        num = (sx * sy)[:, upper].sum(axis=-1)
        n1 = (sx[:, upper] == 0).sum(axis=-1)
        den = np.sqrt((n0 - n1) * (n0 - n2))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + 512] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out


_ROWS = {"pearson": _pearson_rows, "spearman": _spearman_rows, "kendall": _kendall_rows}


def correlation_value(name: str, x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """One correlation of a complete pair of vectors (None when undefined: fewer than 3 items, a constant side)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(y) == 0:
        return None
    v = float(_ROWS[name](x[None, :], y)[0])
    return None if math.isnan(v) else max(-1.0, min(1.0, v))


def correlation_rows(name: str, rows: np.ndarray, y: Sequence[float] | np.ndarray) -> np.ndarray:
    """Correlation ``name`` of every row of ``rows`` (one completion each) with ``y``; NaN where undefined."""
    y = np.asarray(y, dtype=float)
    rows = np.atleast_2d(np.asarray(rows, dtype=float))
    if len(y) < 3 or np.ptp(y) == 0:
        return np.full(len(rows), np.nan)
    out: np.ndarray = np.clip(_ROWS[name](rows, y), -1.0, 1.0)
    return out


def _best(name: str, rows: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray] | None:
    values = np.clip(_ROWS[name](rows, y), -1.0, 1.0)
    if np.all(np.isnan(values)):
        return None
    i = int(np.nanargmin(values))
    return float(values[i]), rows[i]


# --- correlations: the minimum over placements ------------------------------------------------------


def worst_correlation(
    name: str,
    scores: Sequence[float | None],
    human: Sequence[float] | np.ndarray,
    interval: tuple[float, float] | None = None,
) -> WorstCase:
    """The minimum of correlation ``name`` over every score the unscored items (None) could have had
    (:data:`CORRELATION_RULE`). ``interval`` bounds the scores (Pearson depends on values; Spearman and Kendall
    on order only); by default :func:`score_interval` of the scored values. An undefined correlation (constant
    scores) never counts as the minimum while a defined one exists."""
    y = np.asarray(human, dtype=float)
    miss = np.array([s is None for s in scores], dtype=bool)
    observed = [float(s) for s in scores if s is not None]
    lo, hi = interval if interval is not None else score_interval(observed)
    x = np.array([lo if s is None else float(s) for s in scores], dtype=float)
    if len(y) < 3 or np.ptp(y) == 0:
        return WorstCase(None, True, x, "undefined: fewer than 3 items or constant human scores")
    if not miss.any():
        return WorstCase(correlation_value(name, x, y), True, x, "every item scored")
    if name == "pearson":
        return _pearson_min(x, y, miss, lo, hi)
    return _rank_min(name, x, y, miss, lo, hi)


def _pearson_min(x: np.ndarray, y: np.ndarray, miss: np.ndarray, lo: float, hi: float) -> WorstCase:
    """Exact minimum of Pearson's r over the unscored scores in [lo, hi].

    r(x) = <x, y_c> / (|P x| |y_c|) with P the centring map. If some placement gives a negative covariance (the
    covariance is linear in x, so the corner ``x_u = lo if y_u > mean else hi`` decides), the minimum is negative
    and satisfies the KKT conditions of the box: dr/dx_u is proportional to ``y_c,u - b (x_u - mean x)`` with
    ``b = <Px, y_c>/|Px|^2 < 0``, so every unscored score is ``clip(mean x + y_c,u / b, lo, hi)``: the unscored
    items with the highest human scores sit at ``lo``, the lowest at ``hi``, the middle ones on one line
    ``a + c * y_u`` inside. For each such split, the point of that family where r is lowest is where ``P x`` points
    along the projection of ``-y_c`` onto the span of the family (a three-column least squares); every split is
    tried and the lowest feasible point kept: exact. If no placement gives a negative covariance, r >= 0 is
    quasi-concave on the box, so its minimum is at a corner: every corner is tried (exact) up to 2^14 of them;
    beyond, covariance_min / (|y_c| * max |Px|) is a bound."""
    yc = y - y.mean()
    u_idx = np.flatnonzero(miss)
    corner = x.copy()
    corner[u_idx] = np.where(yc[u_idx] > 0, lo, hi)
    rows: list[np.ndarray] = [corner]
    how = "exact"
    k = len(u_idx)
    if float(corner @ yc) < 0:
        levels = sorted({float(v) for v in y[u_idx]}, reverse=True)  # highest human score first
        if len(levels) > _FACE_LIMIT:
            return _pearson_relaxation(x, y, miss, lo, hi)
        groups = [u_idx[y[u_idx] == v] for v in levels]
        g = len(groups)
        for a in range(g + 1):
            for b in range(a, g + 1):
                base = x.copy()
                for grp in groups[:a]:
                    base[grp] = lo
                for grp in groups[b:]:
                    base[grp] = hi
                if a == b:
                    rows.append(base)
                    continue
                free = np.concatenate(groups[a:b])
                base[free] = 0.0
                ones = np.zeros_like(x)
                ones[free] = 1.0
                slope = np.zeros_like(x)
                slope[free] = yc[free]
                cols = np.column_stack([base, ones, slope])
                cols = cols - cols.mean(axis=0)
                theta, *_ = np.linalg.lstsq(cols, -yc, rcond=None)
                if theta[0] <= 1e-12:
                    continue
                values = (theta[1] + theta[2] * yc[free]) / theta[0]
                if np.all(values >= lo - 1e-9) and np.all(values <= hi + 1e-9):
                    point = base.copy()
                    point[free] = np.clip(values, lo, hi)
                    rows.append(point)
        if k <= 10:
            rows.extend(_corners(x, u_idx, lo, hi))
        how = "exact (box KKT search)"
    elif k <= _VERTEX_LIMIT:
        rows.extend(_corners(x, u_idx, lo, hi))
        how = "exact (every corner: r >= 0 is quasi-concave)"
    else:
        found = _best("pearson", np.array(rows), y)
        cov = float(corner @ yc)
        mid = (lo + hi) / 2
        spread = float(((x[~miss] - mid) ** 2).sum()) + k * ((hi - lo) / 2) ** 2
        bound = cov / (math.sqrt(spread) * float(np.linalg.norm(yc))) if spread > 0 else 0.0
        filled = found[1] if found else corner
        return WorstCase(max(-1.0, bound), False, filled, "bound: least covariance over the largest spread")
    found = _best("pearson", np.array(rows), y)
    if found is None:
        return WorstCase(None, True, corner, "undefined for every placement")
    return WorstCase(found[0], True, found[1], how)


def _corners(x: np.ndarray, u_idx: np.ndarray, lo: float, hi: float) -> list[np.ndarray]:
    out = []
    for bits in itertools.product((lo, hi), repeat=len(u_idx)):
        row = x.copy()
        row[u_idx] = bits
        out.append(row)
    return out


def _pearson_relaxation(x: np.ndarray, y: np.ndarray, miss: np.ndarray, lo: float, hi: float) -> WorstCase:
    """A bound for Pearson with too many distinct unscored human scores: with the scores free on the whole line,
    r >= -|projection of -y_c/|y_c| onto span(P x_0, P e_u)|."""
    yc = y - y.mean()
    base = x.copy()
    base[miss] = 0.0
    cols = np.column_stack([base, *(np.eye(len(x))[i] for i in np.flatnonzero(miss))])
    cols = cols - cols.mean(axis=0)
    theta, *_ = np.linalg.lstsq(cols, -yc, rcond=None)
    proj = float(np.linalg.norm(cols @ theta)) / float(np.linalg.norm(yc))
    corner = x.copy()
    corner[miss] = np.where(yc[miss] > 0, lo, hi)
    return WorstCase(-min(1.0, proj), False, corner, "bound: unscored scores free on the whole line")


def _rank_min(name: str, x: np.ndarray, y: np.ndarray, miss: np.ndarray, lo: float, hi: float) -> WorstCase:
    """Exact minimum (or a bound) of Spearman's rho or Kendall's tau-b over the order of the unscored items.

    Swapping the scores of two unscored items so that the higher human score gets the lower score never raises
    either statistic (rearrangement for rho; for tau every pair with a third item changes sign from >= 0 to
    <= 0), and leaves the ties unchanged: so the unscored items can be taken in the reverse order of their human
    scores. Among placements that create no new tie, the numerator (covariance of ranks, concordant minus
    discordant pairs) is a sum over the unscored items of a term depending on the gap each falls in: a dynamic
    programme over non-decreasing gaps finds its minimum exactly. A tie of an unscored item with others gives
    the average of the numerators of the orders it stands between, never below that minimum, and only shrinks
    the denominator. So when the minimum numerator is >= 0 the no-tie minimum is exact; when it is negative,
    small inputs are searched exhaustively (every weak order, :data:`_EXHAUSTIVE_LIMIT`) and larger ones get
    the bound numerator_min / smallest denominator (every unscored item tied into the largest tie group)."""
    n = len(y)
    u_idx = np.flatnonzero(miss)
    u_idx = u_idx[np.argsort(-y[u_idx], kind="stable")]  # highest human score first = lowest score
    s_idx = np.flatnonzero(~miss)
    values = np.unique(x[s_idx])
    k, m = len(u_idx), len(values)
    block_of = np.searchsorted(values, x[s_idx])
    sizes = np.bincount(block_of, minlength=m) if m else np.zeros(0, int)
    if name == "spearman":
        from scipy.stats import rankdata

        ry = rankdata(y)
        big_y = np.bincount(block_of, weights=ry[s_idx], minlength=m) if m else np.zeros(0)
        suffix_y = np.concatenate([np.cumsum(big_y[::-1])[::-1], [0.0]])  # suffix_y[i] = sum over blocks >= i
        below = np.concatenate([[0], np.cumsum(sizes)])  # scored items below gap i
        cost = np.array([[(below[i] + j + 1) * ry[u] + suffix_y[i] for i in range(m + 1)] for j, u in enumerate(u_idx)])
    else:
        sgn = np.sign(y[u_idx][:, None] - y[s_idx][None, :])  # k x n_scored
        per_block = np.stack([sgn[:, block_of == b].sum(axis=1) for b in range(m)], axis=1) if m else np.zeros((k, 0))
        prefix = np.concatenate([np.zeros((k, 1)), np.cumsum(per_block, axis=1)], axis=1)
        cost = 2 * prefix - prefix[:, -1:]
    gaps = _monotone_path(cost)
    filled = _place(x, u_idx, gaps, values, lo, hi)
    achieved = correlation_value(name, filled, y)
    numerator = _rank_numerator(name, filled, y)
    if achieved is not None and numerator >= 0:
        return WorstCase(achieved, True, filled, "exact (order search)")
    exhaustive = _exhaustive_ranks(name, x, y, u_idx, values, lo, hi)
    if exhaustive is not None:
        return WorstCase(exhaustive[0], True, exhaustive[1], "exact (every weak order searched)")
    if name == "spearman":
        from scipy.stats import rankdata

        ry = rankdata(y)
        sy = math.sqrt(float(((ry - ry.mean()) ** 2).sum() / n))
        var_x = (n * n - 1) / 12 - sum(t**3 - t for t in _most_ties(sizes, k)) / (12 * n)
        bound = numerator / n / (math.sqrt(max(var_x, 1e-300)) * sy)
    else:
        n0 = n * (n - 1) / 2
        n1 = sum(t * (t - 1) / 2 for t in _most_ties(sizes, k))
        _, counts_y = np.unique(y, return_counts=True)
        n2 = float(sum(t * (t - 1) / 2 for t in counts_y))
        den = math.sqrt(max(n0 - n1, 0.0) * (n0 - n2))
        bound = numerator / den if den > 0 else -1.0
    return WorstCase(
        max(-1.0, min(bound, achieved if achieved is not None else 1.0)), False, filled, "bound: most ties"
    )


def _most_ties(sizes: np.ndarray, k: int) -> list[int]:
    """Tie-group sizes of the scores with every unscored item joined to the largest scored tie group."""
    groups = [int(t) for t in sizes]
    if not groups:
        return [k]
    top = int(np.argmax(groups))
    groups[top] += k
    return groups


def _rank_numerator(name: str, x: np.ndarray, y: np.ndarray) -> float:
    """n * covariance of the ranks (Spearman) or concordant minus discordant pairs (Kendall)."""
    if name == "spearman":
        from scipy.stats import rankdata

        rx, ry = rankdata(x), rankdata(y)
        return float(((rx - rx.mean()) * (ry - ry.mean())).sum())
    upper = np.triu(np.ones((len(x), len(x)), dtype=bool), 1)
    return float((np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :]))[upper].sum())


def _monotone_path(cost: np.ndarray) -> list[int]:
    """Non-decreasing gaps g_1 <= ... <= g_k minimizing sum_j cost[j, g_j]."""
    k, width = cost.shape
    best = np.empty_like(cost)
    arg = np.zeros((k, width), dtype=int)
    best[0] = cost[0]
    for j in range(1, k):
        run_min = np.minimum.accumulate(best[j - 1])
        run_arg = np.zeros(width, dtype=int)
        for i in range(1, width):
            run_arg[i] = i if best[j - 1][i] < run_min[i - 1] else run_arg[i - 1]
        best[j] = cost[j] + run_min
        arg[j] = run_arg
    path = [int(np.argmin(best[-1]))]
    for j in range(k - 1, 0, -1):
        path.append(int(arg[j][path[-1]]))
    return path[::-1]


def _gap_points(values: np.ndarray, gap: int, count: int, lo: float, hi: float) -> np.ndarray:
    """``count`` increasing scores strictly inside gap ``gap`` (0: below every scored value; m: above)."""
    m = len(values)
    step = np.arange(1, count + 1) / (count + 1)
    points: np.ndarray
    if m == 0:
        points = lo + (hi - lo) * step
    elif gap == 0:  # below every scored item: inside [lo, hi] when there is room, else just below
        low_end = lo if lo < values[0] else values[0] - 1e-6 * max(1.0, hi - lo)
        points = low_end + (values[0] - low_end) * step
    elif gap == m:
        high_end = hi if hi > values[-1] else values[-1] + 1e-6 * max(1.0, hi - lo)
        points = values[-1] + (high_end - values[-1]) * step
    else:
        points = values[gap - 1] + (values[gap] - values[gap - 1]) * step
    return points


def _place(x: np.ndarray, u_idx: np.ndarray, gaps: list[int], values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    filled = x.copy()
    for gap in sorted(set(gaps)):
        members = [u for u, g in zip(u_idx, gaps) if g == gap]
        filled[members] = _gap_points(values, gap, len(members), lo, hi)
    return filled


def _exhaustive_ranks(
    name: str, x: np.ndarray, y: np.ndarray, u_idx: np.ndarray, values: np.ndarray, lo: float, hi: float
) -> tuple[float, np.ndarray] | None:
    """Every weak order of the unscored items (highest human score lowest) among the scored values: each takes a
    scored value or one of k points in a gap. None when there are more than :data:`_EXHAUSTIVE_LIMIT` orders."""
    k, m = len(u_idx), len(values)
    grid: list[float] = []
    for gap in range(m + 1):
        grid.extend(_gap_points(values, gap, k, lo, hi).tolist())
        if gap < m:
            grid.append(float(values[gap]))
    size = math.comb(len(grid) + k - 1, k)
    if size > _EXHAUSTIVE_LIMIT or (name == "kendall" and size * len(y) ** 2 > 3e7):
        return None
    picks = np.array(list(itertools.combinations_with_replacement(range(len(grid)), k)), dtype=int)
    rows = np.repeat(x[None, :], len(picks), axis=0)
    rows[:, u_idx] = np.asarray(grid)[picks]
    return _best(name, rows, y)


# --- per document --------------------------------------------------------------------------------------


def worst_per_document(
    name: str,
    scores: Sequence[float | None],
    human: Sequence[float],
    docs: Sequence[str],
    interval: tuple[float, float] | None = None,
) -> WorstCase:
    """The minimum over placements of the mean over documents of correlation ``name`` within each document
    (documents where it is undefined are left out of the mean, as :func:`per_document_correlation` does).
    Placements in one document do not affect another, so each document's minimum is found on its own; a document
    whose scored items all share one score may be left undefined (its unscored items tied to that score) or
    defined: the documents whose minimum lowers the mean are kept, lowest first, which is exact."""
    observed = [float(s) for s in scores if s is not None]
    interval = interval if interval is not None else score_interval(observed)
    y = np.asarray(human, dtype=float)
    filled = np.array([interval[0] if s is None else float(s) for s in scores], dtype=float)
    by_doc: dict[str, list[int]] = {}
    for i, d in enumerate(docs):
        by_doc.setdefault(d, []).append(i)
    forced: list[float] = []
    optional: list[tuple[float, list[int], np.ndarray, np.ndarray]] = []
    exact = True
    for ix in by_doc.values():
        sub = [scores[i] for i in ix]
        if len(ix) < 3 or np.ptp(y[ix]) == 0:
            continue
        wc = worst_correlation(name, sub, y[ix], interval)
        exact = exact and wc.exact
        distinct = {float(s) for s in sub if s is not None}
        if len(distinct) >= 2:
            if wc.value is not None:
                forced.append(wc.value)
                filled[ix] = wc.filled
            continue
        if wc.value is None:
            continue  # every item scored and constant: never defined
        tied = np.array([next(iter(distinct)) if distinct else interval[0]] * len(ix))
        optional.append((wc.value, ix, wc.filled, tied))
    optional.sort(key=lambda t: t[0])
    kept: list[float] = list(forced)
    for value, ix, doc_filled, tied in optional:
        if not kept or value < float(np.mean(kept)):
            kept.append(value)
            filled[ix] = doc_filled
        else:
            filled[ix] = tied
    mean = float(np.mean(kept)) if kept else None
    return WorstCase(mean, exact, filled, "per document: " + ("exact" if exact else "bound"))
