"""The stress report's Markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from halluscope.bench.metrics import format_ci
from halluscope.bench.suite_stress.deltas import perturbation_order

# ------------------------------------------------------------------------------------------- tables


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cov(cov: dict[str, Any] | None) -> str:
    return "-" if not cov else f"{cov['scored']}/{cov['total']}"


def mean_table(means: dict[str, Any]) -> str:
    lines = [
        "| rows | n | unscored | mean score, every row [95% CI] | mean score, scored rows [95% CI] | coverage |",
        "|---|---|---|---|---|---|",
    ]
    for name, ci in means.items():
        every = ci.get("all")
        lines.append(
            f"| {name} | {ci['n'] + ci['unscored']} | {ci['unscored']} | {format_ci(every)} | "
            f"{format_ci(ci)} | {_cov(ci.get('coverage'))} |"
        )
    return "\n".join(lines)


def delta_table(stats: dict[str, dict[str, Any]], unpaired: dict[str, int]) -> str:
    lines = [
        "| perturbation | pairs | unpaired | mean delta, every row [95% CI] | mean delta, pairs [95% CI] | median | "
        "min | max | mean abs | label flips |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in perturbation_order(set(stats) | set(unpaired)):
        s = stats.get(name)
        if s is None:
            lines.append(f"| {name} | 0 | {unpaired.get(name, 0)} | - | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {name} | {s['n_pairs']} | {unpaired.get(name, 0)} | {format_ci(s.get('mean_delta_all'))} | "
            f"{format_ci(s['mean_delta'])} | {_num(s['median_delta'])} | {_num(s['min_delta'])} | "
            f"{_num(s['max_delta'])} | {_num(s['mean_abs_delta'])} | {_num(s['label_flip_rate'], 2)} |"
        )
    return "\n".join(lines)


def bins_table(bins: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| density bin | units | scored | examples | mean density | mean score, every unit [95% CI] | "
        "mean score, scored units [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in bins:
        lines.append(
            f"| [{b['low']:.3f}, {b['high']:.3f}] | {b['n']} | {b.get('n_scored', b['n'])} | "
            f"{b['n_examples']} | {b['mean_density']:.3f} | {format_ci(b.get('score_all'))} | "
            f"{format_ci(b['score'])} |"
        )
    return "\n".join(lines)
