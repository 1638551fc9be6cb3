"""Option sweeps: bench one method once per value of one option and compare the runs side by side.

The window-size table of the long-document stress-test paper (Table 1: scores of a retrieval-based verifier for ``w = 0,
1, 2``) is ``halluscope bench-sweep --dataset D --method dcr -o retrieval=always --sweep window=0,1,2``. Any constructor
option works (``top_k=1,3,5``, ``level=sentence,paragraph``), and ``method=rouge,dcr,probe`` sweeps over
methods with the same options.

A sweep of a retrieval setting (``window``, ``top_k``, ``retriever``, ``merge_windows``) is refused unless the
fixed options say ``retrieval=always``: with ``auto`` every source that fits the model's context is sent
whole, so the rows would be identical and the sweep would silently measure nothing.

Each value is an ordinary, resumable :func:`~halluscope.bench.runner.run_bench` run in its own sub-folder
(``<out>/<key>=<value>/``), so every suite applies as usual. The sweep then writes ``sweep.json``,
``sweep.md`` and ``sweep.png`` in ``<out>``:

- the main table: per value, items, unscored, mean score [95% CI] over all scored items, and -- on stress
  sets (rows with difficulty ``original``) -- the mean score of the originals (the paper's table is on the
  original summaries) and the mean score change per perturbation;
- every other scalar metric the suites produced that changes with the value, one row per metric, one
  column per value (all of them are in ``sweep.json``);
- cost: LLM calls and tokens per item, wall time.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from halluscope._optional import require
from halluscope.bench.datasets import Dataset
from halluscope.bench.folder import ITEMS_FILE, ItemStore
from halluscope.bench.metrics import bootstrap_ci, format_ci
from halluscope.bench.runner import run_bench, select_examples
from halluscope.methods.base import Method
from halluscope.records import Example

SWEEP_JSON = "sweep.json"
SWEEP_MD = "sweep.md"
SWEEP_PNG = "sweep.png"
ORIGINAL = "original"


class SweepError(ValueError):
    """A sweep specification that cannot be run."""


def parse_sweep(spec: str) -> tuple[str, list[Any]]:
    """``"window=0,1,2"`` -> ``("window", [0, 1, 2])``; values parse as JSON when they can, else strings."""
    key, sep, raw = spec.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key or not raw.strip():
        raise SweepError(f"--sweep expects KEY=V1,V2,..., got {spec!r}")
    values: list[Any] = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            values.append(json.loads(item))
        except ValueError:
            values.append(item)
    if len(values) < 2:
        raise SweepError(f"a sweep needs at least two values, got {values}")
    if len({json.dumps(v) for v in values}) != len(values):
        raise SweepError(f"repeated values in {spec!r}")
    return key, values


def value_folder(key: str, value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._+=-]+", "-", f"{key}={value}").strip("-")


@dataclass
class SweepPoint:
    value: Any
    out_dir: Path
    results: dict[str, Any]
    scores: list[float]  # scored items, in run order
    original_scores: list[float]  # scored rows with difficulty "original" (stress sets)


MethodFactory = Callable[[str, dict[str, Any]], Method]

RETRIEVAL_SETTINGS = ("window", "top_k", "retriever", "merge_windows")
"""Options that only matter when retrieval runs (the shared retrieval protocol of the claim methods)."""


def check_retrieval_sweep(key: str, options: dict[str, Any]) -> None:
    """Refuse a sweep of a retrieval setting unless retrieval runs on every item (``retrieval=always``)."""
    if key not in RETRIEVAL_SETTINGS:
        return
    mode = options.get("retrieval", "auto")
    if mode == "always":
        return
    if mode == "auto":
        why = (
            "with retrieval=auto (the default) a source that fits the model's context is sent whole, so "
            "every row would be the same"
        )
    elif mode == "never":
        why = "retrieval=never never retrieves"
    else:
        why = f"retrieval={json.dumps(mode)} is not 'always'"
    raise SweepError(
        f"sweeping {key} measures nothing unless retrieval runs on every item: {why}. Add -o retrieval=always"
    )


async def run_sweep(
    method_name: str,
    key: str,
    values: Sequence[Any],
    dataset: Dataset,
    out_dir: Path,
    *,
    make_method: MethodFactory,
    options: dict[str, Any] | None = None,
    judge: Any = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    n_bootstrap: int = 1000,
    concurrency: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Bench ``method_name`` once per value of option ``key`` (or per method when ``key == "method"``) and
    write the combined table and plot. ``make_method(name, options)`` builds each method."""
    options = dict(options or {})
    if key in options:
        raise SweepError(f"{key!r} is both swept and fixed with -o; drop one")
    check_retrieval_sweep(key, options)
    out_dir = Path(out_dir)
    examples = select_examples(dataset, sample=sample, seed=seed, limit=limit)
    points: list[SweepPoint] = []
    for value in values:
        name, opts = (str(value), options) if key == "method" else (method_name, {**options, key: value})
        try:
            method = make_method(name, opts)
        except (KeyError, TypeError, ValueError) as exc:
            raise SweepError(f"{key}={value!r}: {str(exc).strip(chr(39))}") from exc
        sub = out_dir / value_folder(key, value)
        results = await run_bench(
            method,
            dataset,
            sub,
            judge=judge,
            sample=sample,
            seed=seed,
            limit=limit,
            n_bootstrap=n_bootstrap,
            concurrency=concurrency,
            progress=progress,
        )
        reports = ItemStore(sub / ITEMS_FILE).load()
        scored = cast(
            list[tuple[Example, float]],  # the unscored are filtered out
            [(e, reports[e.id].score) for e in examples if e.id in reports and reports[e.id].score is not None],
        )
        points.append(
            SweepPoint(value, sub, results, [s for _, s in scored], [s for e, s in scored if e.difficulty == ORIGINAL])
        )
    summary = summarize(key, points, method_name=method_name, dataset=dataset.spec, seed=seed, n_bootstrap=n_bootstrap)
    write_sweep(out_dir, summary, points)
    return summary


def _mean_ci(values: Sequence[float], seed: int, n_bootstrap: int) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    return bootstrap_ci(
        lambda idx: float(arr[idx].mean()) if len(idx) else None, len(arr), n_resamples=n_bootstrap, seed=seed
    )


def scalar_metrics(metrics: dict[str, Any], prefix: str = "", depth: int = 4) -> dict[str, float]:
    """Flatten a results' metrics into ``"suite.key.sub": number`` (CI dicts give their ``value``); lists
    and deeper nesting are left out."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        name = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            out[name] = float(v)
        elif isinstance(v, dict):
            if "value" in v and ("low" in v or "high" in v):
                if isinstance(v["value"], (int, float)):
                    out[name] = float(v["value"])
            elif depth > 1:
                out.update(scalar_metrics(v, f"{name}.", depth - 1))
    return out


def summarize(
    key: str, points: Sequence[SweepPoint], *, method_name: str, dataset: str, seed: int = 0, n_bootstrap: int = 1000
) -> dict[str, Any]:
    rows = []
    for p in points:
        res = p.results
        stress = res.get("metrics", {}).get("stress", {})
        deltas = {name: d["mean_delta"] for name, d in stress.get("delta", {}).items()}
        rows.append(
            {
                "value": p.value,
                "folder": str(p.out_dir),
                "method": res.get("method"),
                "method_options": res.get("method_options"),
                "model": res.get("model"),
                "n": res.get("n"),
                "n_unscored": res.get("n_unscored"),
                "mean_score": _mean_ci(p.scores, seed, n_bootstrap),
                "mean_score_original": _mean_ci(p.original_scores, seed, n_bootstrap) if p.original_scores else None,
                "mean_delta": deltas,
                "usage_per_item": res.get("usage", {}).get("per_item"),
                "usage": {k: v for k, v in res.get("usage", {}).items() if k != "per_item"},
                "wall_time_s": res.get("wall_time_s"),
                "metrics": scalar_metrics(res.get("metrics", {})),
            }
        )
    return {"key": key, "values": [p.value for p in points], "method": method_name, "dataset": dataset, "rows": rows}


def render_markdown(summary: dict[str, Any]) -> str:
    key, rows = summary["key"], summary["rows"]
    has_orig = any(r["mean_score_original"] for r in rows)
    perturbations = list(dict.fromkeys(name for r in rows for name in r["mean_delta"]))
    head = (
        [key, "items", "unscored", "coverage", "mean score [95% CI] (scored items)"]
        + (["originals: mean score"] if has_orig else [])
        + [f"delta {p}" for p in perturbations]
        + ["LLM calls/item", "tokens/item", "cache hits/item", "wall s"]
    )
    lines = [
        f"# Sweep of `{key}`: {summary['method']} on {summary['dataset']}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        per_item = r["usage_per_item"] or {}
        cells = [
            f"`{json.dumps(r['value'])}`",
            str(r["n"]),
            str(r["n_unscored"]),
            f"{(r['n'] or 0) - (r['n_unscored'] or 0)}/{r['n']}",
            format_ci(r["mean_score"]),
        ]
        if has_orig:
            cells.append(format_ci(r["mean_score_original"]))
        cells += [format_ci(r["mean_delta"].get(p)) for p in perturbations]
        cells += [str(per_item.get(k, "-")) for k in ("calls", "tokens", "cache_hits")] + [str(r["wall_time_s"])]
        lines.append("| " + " | ".join(cells) + " |")
    warning = fewer_items_warning(rows)
    if warning:
        lines += ["", f"**{warning}**"]
    names = sorted({m for r in rows for m in r["metrics"]})
    varying = [m for m in names if len({r["metrics"].get(m) for r in rows}) > 1 and not _is_cost(m)]
    if varying:
        lines += [
            "",
            "## Metrics that change with the swept value",
            "",
            "| metric | " + " | ".join(f"`{json.dumps(r['value'])}`" for r in rows) + " |",
            "|---|" + "---|" * len(rows),
        ]
        for m in varying:
            cells = ["-" if m not in r["metrics"] else f"{r['metrics'][m]:.4g}" for r in rows]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if len(varying) < len(names):
        lines += ["", f"{len(names) - len(varying)} metrics that do not change (or count cost) are in {SWEEP_JSON}."]
    lines += [
        "",
        "Runs: " + ", ".join(f"[{json.dumps(r['value'])}]({Path(r['folder']).name}/results.md)" for r in rows),
        "",
        f"![sweep]({SWEEP_PNG})",
        "",
    ]
    return "\n".join(lines)


def fewer_items_warning(rows: Sequence[dict[str, Any]]) -> str | None:
    """What the table must say when its runs rest on different numbers of scored items (None when they agree):
    a value over fewer items is no evidence that a setting is better."""
    covered = {(r["n"] or 0) - (r["n_unscored"] or 0) for r in rows}
    if len(covered) < 2:
        return None
    detail = ", ".join(f"{json.dumps(r['value'])}: {(r['n'] or 0) - (r['n_unscored'] or 0)}/{r['n']}" for r in rows)
    return (
        f"Not like for like: the runs scored different numbers of items ({detail}). Compare the metrics "
        "ending in _all, which count every item (an unscored one as the worst outcome), not the mean score "
        "over scored items."
    )


def _is_cost(metric: str) -> bool:
    return any(part in metric for part in ("usage", "calls", "tokens", "cache_hits"))


def plot_sweep(summary: dict[str, Any], path: Path) -> Path:
    """Mean score (and the originals' mean score on stress sets) against the swept value, with 95% CIs."""
    require("matplotlib", "bench", "the sweep plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = summary["rows"]
    fig = Figure(figsize=(5.6, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = list(range(len(rows)))
    # the originals' line only adds something when the set also holds perturbed rows
    distinct = any(r["mean_score_original"] and r["mean_score_original"] != r["mean_score"] for r in rows)
    series = [("all items", "mean_score")] + ([("originals", "mean_score_original")] if distinct else [])
    for label, field in series:
        points = [(x, r[field]) for x, r in zip(xs, rows) if r[field] and r[field].get("value") is not None]
        if not points:
            continue
        ys = [ci["value"] for _, ci in points]
        errs = np.array(
            [
                [
                    max(0.0, ci["value"] - (ci["low"] if ci["low"] is not None else ci["value"])),
                    max(0.0, (ci["high"] if ci["high"] is not None else ci["value"]) - ci["value"]),
                ]
                for _, ci in points
            ]
        ).T
        ax.errorbar([x for x, _ in points], ys, yerr=errs, marker="o", capsize=4, label=label)
    ax.set_xticks(xs, [str(r["value"]) for r in rows])
    ax.set_xlabel(summary["key"])
    ax.set_ylabel("mean score")
    ax.set_title(f"{summary['method']} on {summary['dataset']}: sweep of {summary['key']}", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    return path


def write_sweep(out_dir: Path, summary: dict[str, Any], points: Sequence[SweepPoint]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_sweep(summary, out_dir / SWEEP_PNG)
    (out_dir / SWEEP_JSON).write_text(
        json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
    )
    (out_dir / SWEEP_MD).write_text(render_markdown(summary), encoding="utf-8")
