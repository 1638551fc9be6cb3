"""``run_bench``: score every example of a dataset with a method, resumably, then compute every applicable
metric suite and write ``results.json``, ``results.md`` and plots.

Resuming: each finished item is appended to ``items.jsonl`` (example id + full Report) and flushed at
once. A re-run skips the ids already there, so finished items cost nothing; an item that was in flight
when the run stopped is redone, and the LLM response cache makes the calls it had already completed
free. ``run.json`` pins what the folder holds (dataset, subsample, method, options, model, prompts), so
a different configuration is refused instead of being mixed into the same results.

Engines: *how* the pending items get scored is an :class:`~halluscope.bench.engines.Engine` (``LocalEngine``: one
asyncio loop in this process; ``halluscope.bench.ray_engine.RayEngine``: actors on a Ray cluster). Everything else - the
item selection, ``run.json`` identity, resume from ``items.jsonl``, the single writer of ``items.jsonl`` and the
metrics - is this module's and the same for every engine, so a folder started by one engine can be resumed
by another, and the same items with the same cache give the same reports. The folder's files are read and written
by :mod:`halluscope.bench.folder`.
"""

from __future__ import annotations

import datetime as dt
import inspect
import sys
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halluscope.bench.calibration import holdout_split, selection_items
from halluscope.bench.datasets import Dataset, sample_examples
from halluscope.bench.engines import Engine, LocalEngine
from halluscope.bench.folder import (
    ITEMS_FILE,
    RUN_FILE,
    ItemStore,
    default_out_dir,
    folder_identity_clash,
    write_results,
)
from halluscope.bench.progress import progress_bar
from halluscope.bench.suites import SuiteContext, SuiteResult, load_suite_modules
from halluscope.methods.base import Method
from halluscope.methods.calibration import Calibration, CalibrationBench
from halluscope.records import Example, Report, Usage

if TYPE_CHECKING:
    from rich.progress import Progress


class BenchError(RuntimeError):
    """A benchmark run that cannot go ahead (e.g. an output folder holding a different configuration)."""


def select_examples(
    dataset: Dataset, *, sample: int | None = None, seed: int = 0, limit: int | None = None
) -> list[Example]:
    """The items a run covers: the seeded stratified subsample (if any), then the first ``limit``."""
    examples = list(dataset.examples)
    if sample:
        examples = sample_examples(examples, sample, seed)
    if limit is not None:
        examples = examples[: max(0, limit)]
    return examples


def _identity(dataset: Dataset, method: Method, model: str | None, sample: int | None, seed: int) -> dict[str, Any]:
    return {
        "dataset": dataset.spec,
        "sample_per_stratum": sample,
        "sample_seed": seed if sample else None,
        "method": method.name,
        "method_options": method.options(),
        "model": model,
        "prompt_version": method.prompt_version,
    }


def _check_identity(out_dir: Path, identity: dict[str, Any]) -> None:
    detail = folder_identity_clash(out_dir / RUN_FILE, identity)
    if detail:
        raise BenchError(f"{out_dir} holds a different run ({detail}); use another --output or delete the folder")


def _progress(enabled: bool) -> Progress:
    return progress_bar(enabled)


async def _score_pending(
    method: Method,
    pending: Sequence[Example],
    store: ItemStore,
    done: dict[str, Report],
    concurrency: int,
    progress: bool,
    description: str,
    engine: Engine | None = None,
) -> None:
    engine = engine or LocalEngine()
    async with aclosing(engine.results(method, pending, concurrency)) as results:
        with store.open() as fh, _progress(progress) as bar:
            task_id = bar.add_task(description, total=len(pending))
            async for example_id, report in results:
                ItemStore.write(fh, example_id, report)  # one coroutine writes: lines never interleave
                done[example_id] = report
                bar.advance(task_id)


async def run_bench(
    method: Method,
    dataset: Dataset,
    out_dir: Path | None = None,
    *,
    judge: Any = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    n_bootstrap: int = 1000,
    retry_unscored: bool = False,
    concurrency: int | None = None,
    progress: bool = True,
    suite_names: Sequence[str] | None = None,
    engine: Engine | None = None,
    select_on: Dataset | None = None,
    select_holdout: float | None = None,
) -> dict[str, Any]:
    """Run (or resume) a benchmark and write its results; returns the ``results.json`` content.

    ``engine`` scores the pending items (default :class:`LocalEngine`; ``RayEngine`` for a Ray cluster).
    A method that leaves choices to dev items (``method.needs_calibration()``, e.g. FINAL's ``localize``: prompt
    variant, 2-step threshold) is calibrated first (``method.calibrate``, see :mod:`halluscope.methods.calibration`)
    and the run scores the calibrated method. ``select_on``: the dev items for those choices, default the run's dev
    split or its own items. ``select_holdout``: hold out that seeded share of the run's items for those choices
    instead, and score only the rest."""
    started = time.perf_counter()
    model = method.model_name
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(dataset.spec, method.name, model, sample, seed)
    examples = select_examples(dataset, sample=sample, seed=seed, limit=limit)
    if not examples:
        raise BenchError(f"dataset {dataset.spec} has no items to run (after --sample/--limit)")
    protocol: dict[str, Any] | None = None  # the calibration record (results.json key "final_protocol", see below)
    calibration: Calibration | None = None
    if method.needs_calibration():
        if select_holdout and select_on is None:
            items, examples, name = holdout_split(dataset, examples, select_holdout, seed)
        else:
            items, name = selection_items(dataset, examples, select_on)
        bench = CalibrationBench(
            out_dir=out_dir,
            selection_name=name,
            judge=judge,
            evaluated_ids=[e.id for e in examples],
            score=_scorer(concurrency=concurrency, progress=progress, engine=engine, retry_unscored=retry_unscored),
        )
        method, calibration = await method.calibrate(items, bench)
        protocol = calibration.model_dump(mode="json") if calibration is not None else None
    identity = _identity(dataset, method, model, sample, seed)
    if calibration is not None:
        # "final_protocol": the key keeps the name of its first user (FINAL's dev-split protocol), so the run.json
        # and results.json of existing folders still match
        identity["final_protocol"] = calibration.choices()
        if select_holdout and select_on is None:
            identity["select_holdout"] = select_holdout
    _check_identity(out_dir, identity)

    store = ItemStore(out_dir / ITEMS_FILE)
    done = store.load()
    pending = [e for e in examples if e.id not in done or (retry_unscored and done[e.id].score is None)]
    before = {e.id for e in pending}
    if pending:
        await _score_pending(
            method,
            pending,
            store,
            done,
            concurrency or method.config.max_concurrency,
            progress,
            f"{method.name} on {dataset.spec}",
            engine,
        )
    reports = [done[e.id] for e in examples]

    run_usage = sum((done[i].usage for i in before), Usage())
    total_usage = sum((r.usage for r in reports), Usage())
    n = len(examples)
    unscored = [r for r in reports if r.score is None]
    results: dict[str, Any] = {
        "dataset": dataset.spec,
        "dataset_name": dataset.name,
        "split": dataset.subset,
        "splits": dict(Counter(e.split or "-" for e in examples)),
        "data_files": [str(p) for p in dataset.files],
        "n": n,
        "n_dataset": len(dataset.examples),
        "sample_per_stratum": sample,
        "seed": seed,
        "limit": limit,
        "n_scored": n - len(unscored),
        "n_unscored": len(unscored),
        "unscored_reasons": dict(Counter(_reason_kind(r.unscored_reason) for r in unscored).most_common(10)),
        "method": method.name,
        "method_options": method.options(),
        "prompt_version": method.prompt_version,
        "model": model,
        "judge_model": getattr(judge, "name", None),
        "final_protocol": protocol,
        "engine": (engine or LocalEngine()).name,
        "usage": {**total_usage.model_dump(), "per_item": _per_item(total_usage, n)},
        "usage_this_run": {**run_usage.model_dump(), "items_run": len(before)},
        "item_time_s": {
            "total": round(sum(r.elapsed_s for r in reports), 3),
            "mean": round(sum(r.elapsed_s for r in reports) / n, 4),
        },
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "metrics": {},
        "suite_errors": {},
        "tables": [],
        "plots": [],
    }
    ctx = SuiteContext(
        out_dir=out_dir,
        method=method.name,
        model=model,
        dataset=dataset.spec,
        judge=judge,
        seed=seed,
        n_bootstrap=n_bootstrap,
        prompts_dir=method.config.prompts_dir,
        extra={"retry_unscored": retry_unscored, "progress": progress},
    )
    for name, suite in load_suite_modules().items():
        if suite_names is not None and name not in suite_names:
            continue
        if not suite.applies(examples):
            continue
        try:
            outcome = suite.fn(examples, reports, ctx)
            if inspect.isawaitable(outcome):
                outcome = await outcome
        except Exception as exc:  # one broken suite must not lose the others' metrics; it is reported
            results["suite_errors"][name] = f"{type(exc).__name__}: {exc}"
            print(f"error: suite {name!r} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if outcome.metrics or outcome.tables or outcome.plots:
            _merge(results, name, outcome, out_dir)
    results["wall_time_s"] = round(time.perf_counter() - started, 3)
    write_results(out_dir, results, calibration.markdown() if calibration is not None else ())
    return results


def _scorer(**bench_kwargs: Any) -> Any:
    """A calibration's way to score a method on dev items: a bench run of its own (resumable, no bootstrap)."""

    async def score(
        method: Method, items: list[Example], name: str, out: Path, *, judge: Any, suites: Sequence[str]
    ) -> tuple[dict[str, Any], list[Report]]:
        dataset = Dataset(name=name, subset=None, examples=items)
        results = await run_bench(
            method, dataset, out, judge=judge, n_bootstrap=0, suite_names=list(suites), **bench_kwargs
        )
        done = ItemStore(out / ITEMS_FILE).load()
        return results, [done[e.id] for e in items]

    return score


def _per_item(usage: Usage, n: int) -> dict[str, float]:
    return {
        "calls": round(usage.calls / n, 3),
        "tokens": round(usage.total_tokens / n, 1),
        "cache_hits": round(usage.cache_hits / n, 3),
        "cached_prompt_tokens": round(usage.cached_prompt_tokens / n, 1),
    }


def _reason_kind(reason: str | None) -> str:
    """A short bucket for an unscored reason (the full text stays in items.jsonl)."""
    text = (reason or "unknown").split(":")[0].strip()
    return text[:80] or "unknown"


def _merge(results: dict[str, Any], name: str, outcome: SuiteResult, out_dir: Path) -> None:
    results["metrics"][name] = outcome.metrics
    results["tables"] += [{"suite": name, "title": t, "markdown": md} for t, md in outcome.tables]
    for p in outcome.plots:
        p = Path(p)
        results["plots"].append(str(p.relative_to(out_dir)) if p.is_relative_to(out_dir) else str(p))
