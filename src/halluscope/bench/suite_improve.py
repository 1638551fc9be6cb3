"""RAI improvement rate (DCR paper §4.3-4.4, Table 3, Fig. 3): of the items DCR judged inconsistent, the
fraction whose rewrite is judged consistent after 1, 2, ... rounds.

Applies to reports that carry improvement rounds (``details["rounds"]``, written by the ``improve`` method,
the one way to run RAI); for any other method it returns no metrics. An item counts as *flagged* when its
original text was scored below 1, DCR's Z < 1 as the paper has it (``rai_flagged="paper"``, the default; the
named option ``rai_flagged="sentences"``: at least one sentence judged inconsistent - they differ when DCE adds
a negative paragraph-level reason); it counts as *fixed by round
r* when one of its rewrites up to round r was re-evaluated as consistent (every sentence judged
consistent; with a probability score, every sentence at or above the threshold: ``Evaluated.consistent``). Each
rate is given over the flagged items (``improvement_rate_after_r``, with its ``coverage``) and counting every
item (``_all``): an item whose original could not be scored counts as flagged and never fixed, its worst
outcome (and ``n_flagged_all`` counts it among the flagged).

Caveat, as in the paper: "consistent" is the verdict of the same DCR evaluator (and model) that flagged the
item, not a human judgment; the breakdown by gold label shows how often flagged items were truly
inconsistent in the first place.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from halluscope.bench.metrics import bootstrap_ci, coverage
from halluscope.bench.suites import SuiteContext, SuiteResult, register_suite
from halluscope.records import Example, Report


def _rounds(report: Report) -> list[dict[str, Any]] | None:
    rounds = report.details.get("rounds")
    return rounds if isinstance(rounds, list) and rounds else None


FLAGGED_RULES = {
    "paper": "the original's score is below 1 (DCR's Z < 1: any negative reason, a paragraph-level one included)",
    "sentences": "at least one sentence of the original was judged inconsistent",
}
"""Which items RAI rewrites and the rate is over (``ctx.extra["rai_flagged"]``; ``paper`` by default)."""


def _flagged(rounds: list[dict[str, Any]], rule: str = "paper") -> bool:
    """Whether the original was flagged under ``rule`` (:data:`FLAGGED_RULES`); an unscored original is not."""
    first = rounds[0]
    if first.get("score") is None:
        return False
    if rule == "sentences":
        return bool(first.get("inconsistent_sentences"))
    return float(first["score"]) < 1.0


def _fixed_by(rounds: list[dict[str, Any]], r: int) -> bool:
    return any(bool(x.get("consistent")) for x in rounds[1 : r + 1])


def _fmt(value: Any) -> str:
    if isinstance(value, dict):
        if value.get("value") is None:
            return "-"
        text = f"{value['value']:.3f}"
        if value.get("low") is not None:
            text += f" [{value['low']:.3f}, {value['high']:.3f}]"
        return text
    return "-" if value is None else str(value)


@register_suite("rai_improvement")
def rai_improvement_suite(examples: list[Example], reports: list[Report], ctx: SuiteContext) -> SuiteResult:
    items = [(e, r, _rounds(r)) for e, r in zip(examples, reports)]
    items = [(e, r, rounds) for e, r, rounds in items if rounds is not None]
    if not items:
        return SuiteResult()
    max_rounds = max(int(r.details.get("max_rounds") or (len(rounds) - 1)) for _, r, rounds in items)
    unscored = sum(rounds[0].get("score") is None for _, _, rounds in items)
    rule = str(ctx.extra.get("rai_flagged") or "paper")
    if rule not in FLAGGED_RULES:
        raise ValueError(f"unknown rai_flagged rule {rule!r}; use {' or '.join(FLAGGED_RULES)}")
    flagged = [(e, r, rounds) for e, r, rounds in items if _flagged(rounds, rule)]
    cov = coverage(len(items) - unscored, len(items))
    m: dict[str, Any] = {
        "n_with_rounds": len(items),
        "n_original_unscored": unscored,
        "n_flagged": len(flagged),
        "n_flagged_all": len(flagged) + unscored,
        "coverage": cov,
        "max_rounds": max_rounds,
        "flagged_rule": rule,
        "flagged_means": FLAGGED_RULES[rule],
        "worst_case": "an item whose original could not be scored counts as flagged and never fixed",
        "judged_by": "the same DCR evaluator that flagged the item (not a human judgment)",
    }
    result = SuiteResult(metrics=m)
    if not flagged and not unscored:
        m["note"] = "no item was judged inconsistent, so there is nothing to improve"
        return result
    fixed = np.array(
        [[_fixed_by(rounds, r) for r in range(1, max_rounds + 1)] for _, _, rounds in flagged], dtype=bool
    ).reshape(len(flagged), max_rounds)
    improved = np.array([bool(r.details.get("improved")) for _, r, _ in flagged])
    gains = np.array(
        [(r.subscores.get("final_score") or 0.0) - (r.subscores.get("initial_score") or 0.0) for _, r, _ in flagged]
    )
    rows = []
    for r in range(1, max_rounds + 1):
        column = fixed[:, r - 1]
        every = np.concatenate([column, np.zeros(unscored, dtype=bool)])
        ci = bootstrap_ci(
            lambda idx, c=column: float(c[idx].mean()), len(column), n_resamples=ctx.n_bootstrap, seed=ctx.seed
        )
        ci_all = bootstrap_ci(
            lambda idx, c=every: float(c[idx].mean()), len(every), n_resamples=ctx.n_bootstrap, seed=ctx.seed
        )
        m[f"improvement_rate_after_{r}"] = {**ci, "coverage": cov}
        m[f"improvement_rate_after_{r}_all"] = {**ci_all, "coverage": cov}
        m[f"fixed_after_{r}"] = int(column.sum())
        m[f"fixed_after_{r}_all"] = int(column.sum())  # an unscored original is never fixed
        rows.append([f"<= {r}", int(column.sum()), len(column), unscored, _fmt(ci_all), _fmt(ci)])
    m["verified_score_gain_rate"] = bootstrap_ci(
        lambda idx: float(improved[idx].mean()) if len(idx) else None,
        len(improved),
        n_resamples=ctx.n_bootstrap,
        seed=ctx.seed,
    )
    m["mean_score_gain"] = bootstrap_ci(
        lambda idx: float(gains[idx].mean()) if len(idx) else None,
        len(gains),
        n_resamples=ctx.n_bootstrap,
        seed=ctx.seed,
    )
    m["stop_reasons"] = dict(
        Counter(str(r.details.get("stop_reason", "-")).split(":")[0][:80] for _, r, _ in flagged).most_common(10)
    )
    by_label: dict[str, Any] = {}
    for label in sorted({e.label for e, _, _ in flagged if e.label is not None}):
        idx = [i for i, (e, _, _) in enumerate(flagged) if e.label == label]
        name = "gold_consistent" if label == 1 else "gold_inconsistent"
        by_label[name] = {
            "n_flagged": len(idx),
            **{f"fixed_after_{r}": int(fixed[idx, r - 1].sum()) for r in range(1, max_rounds + 1)},
        }
    if by_label:
        m["flagged_by_gold_label"] = by_label
    header = (
        "| rounds | fixed | flagged | originals unscored | improvement rate, every item [95% CI] | "
        "improvement rate, flagged items [95% CI] |\n|---|---|---|---|---|---|\n"
    )
    table = header + "\n".join("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    table += (
        f"\n\nverified score gain on {_fmt(m['verified_score_gain_rate'])} of flagged items; mean gain "
        f"{_fmt(m['mean_score_gain'])}; stop reasons {m['stop_reasons']}"
    )
    if by_label:
        table += f"; flagged by gold label {by_label}"
    result.tables.append(
        (
            f"RAI improvement rate ({len(flagged)} of {len(items)} items flagged inconsistent by DCR; "
            f"{unscored} originals unscored; 'consistent' = re-judged by the same evaluator)",
            table,
        )
    )
    result.plots.append(_plot(m, max_rounds, ctx))
    return result


def _plot(m: dict[str, Any], max_rounds: int, ctx: SuiteContext):
    from halluscope.bench.plots import _figure

    fig = _figure()
    ax = fig.add_subplot()
    xs = list(range(0, max_rounds + 1))
    ys = [0.0] + [m[f"improvement_rate_after_{r}"]["value"] or 0.0 for r in range(1, max_rounds + 1)]
    ax.plot(xs, ys, marker="o")
    ax.set_xticks(xs)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("rounds of RAI")
    ax.set_ylabel("fraction of flagged items judged consistent")
    ax.set_title(f"RAI improvement ({ctx.method}, {ctx.dataset})")
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.out_dir / "rai_improvement.png"
    fig.savefig(path)
    return path
