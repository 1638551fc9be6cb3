"""Running a protocol: build the data (resumably), one resumable bench run per row (in ``<out>/rows/<row>/``),
then the table's cells, written as ``reproduce.json`` and ``reproduce.md``."""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from halluscope.bench.reproduce.builders import BuildError, BuiltSet
from halluscope.bench.reproduce.checkpoints import locate
from halluscope.bench.reproduce.render import write_reproduce
from halluscope.bench.reproduce.spec import Protocol, ReproduceContext, ReproduceError, Row, is_embedded, select_rows
from halluscope.bench.reproduce.table import _all_unscored, _cost, _coverage, _metric_value, _number_json, _paper_cell
from halluscope.config import Config

PAPER_ORDER: dict[str, Any] = {"order": "reason_first", "score": "label"}
"""What every reproduced row runs with, whatever other options are given: the papers' verdict order (reason
first) and their discrete score (from the labels), so a row measures the paper's algorithm."""


async def run_row(
    protocol: Protocol,
    row: Row,
    built: BuiltSet,
    ctx: ReproduceContext,
    *,
    judge: Any,
    options: dict[str, Any],
    n_bootstrap: int,
    concurrency: int | None,
) -> dict[str, Any]:
    """Run one row's bench (resumable) and map its metrics; every failure becomes a reason, never an exception."""
    from halluscope.bench.runner import BenchError, run_bench
    from halluscope.methods import get_method, method_class

    record: dict[str, Any] = {
        "id": row.id,
        "paper_row": row.paper_row,
        "method": row.method,
        "options": dict(row.options),
        "analogue": row.analogue,
        "note": row.note,
        "status": "ok",
        "reason": None,
        "metrics": [],
    }
    started = time.perf_counter()
    if row.checkpoint is not None:  # an encoder baseline: runs only where its checkpoint is on this machine
        location, missing = locate(row.id, row.checkpoint)
        if location is None:
            record.update(
                status="not installed",
                reason=missing,
                checkpoint=row.checkpoint.model,
                metrics=[
                    {"key": m.key, "label": m.label, "paper": None, "ours": None, "reason": missing}
                    for m in row.metrics
                ],
                wall_time_s=round(time.perf_counter() - started, 3),
            )
            return record
        record.update(checkpoint=row.checkpoint.model, checkpoint_location=location)
        row = replace(row, options={**row.options, row.checkpoint.option: row.checkpoint.stage(location)})
    try:
        cls = method_class(row.method)  # type: ignore[arg-type]
        extra = {k: v for k, v in options.items() if k in cls.Options.option_names() and k not in row.options}
        # the papers' protocol: each verdict's reasoning before its label, the score from the labels
        pinned = {k: v for k, v in PAPER_ORDER.items() if k in cls.Options.model_fields and k not in row.options}
        record["options"] = {**extra, **pinned, **row.options}
        method = get_method(
            row.method,  # type: ignore[arg-type]
            llm=ctx.get_llm() if cls.uses_llm else None,
            config=paper_config(ctx.config),
            **record["options"],
        )
        record["model"] = method.model_name
        dataset = built.datasets.get(row.dataset)
        if dataset is None:
            raise ReproduceError(f"the protocol built no {row.dataset!r} dataset")
        if not dataset.examples:
            raise ReproduceError(
                f"the {dataset.spec} set is empty: the builder produced no item "
                f"({'; '.join(f'{w}: {r} x{n}' for (w, r), n in built.skipped.most_common(3))})"
            )
        on_items = protocol.sample_applies_to == "items" or built.builder in ("shared", "given")  # else: at build
        bench_sample, bench_limit = (ctx.sample, ctx.limit) if on_items else (None, None)
        suites = sorted({m.suite for m in row.metrics})
        results = await run_bench(
            method,
            dataset,
            ctx.out_dir / "rows" / row.id,
            judge=judge if "final_matching" in suites else None,
            sample=bench_sample,
            seed=ctx.seed,
            limit=bench_limit,
            n_bootstrap=n_bootstrap,
            concurrency=concurrency,
            progress=ctx.progress,
            suite_names=suites,
            select_on=ctx.select_on,
            select_holdout=ctx.select_holdout,
        )
    except (BenchError, ReproduceError, BuildError, ValueError, KeyError, RuntimeError) as exc:
        record.update(status="failed", reason=f"{type(exc).__name__}: {str(exc).strip(chr(39))}")
        record["metrics"] = [
            {"key": m.key, "label": m.label, "paper": None, "ours": None, "reason": record["reason"]}
            for m in row.metrics
        ]
        record["wall_time_s"] = round(time.perf_counter() - started, 3)
        return record
    record.update(
        n=results["n"],
        n_unscored=results["n_unscored"],
        unscored_reasons=results["unscored_reasons"],
        dataset=results["dataset"],
        prompt_version=results["prompt_version"],
        judge_model=results.get("judge_model"),
        cost=_cost(results),
        selection=results.get("final_protocol"),  # FINAL's dev-split choices, when the bench made them
        run_dir=str(ctx.out_dir / "rows" / row.id),
    )
    if protocol.name == "probe":  # every PROBE row names its claim matching, and who built the gold it uses
        steps = results.get("metrics", {}).get("probe_steps") or {}
        record["claim_matching"] = (
            steps.get("claim_matching") if "probe_steps" in suites else "none (character spans of the injected facts)"
        )
        if "probe_steps" in suites:
            record["gold"] = built.gold or {"built_by": "given" if built.builder == "given" else "none"}
    for metric in row.metrics:
        ours, reason = _metric_value(results, metric)
        if ours is None and protocol.explain_missing is not None:
            reason = protocol.explain_missing(row, metric, built) or reason
        record["metrics"].append(
            {
                "key": metric.key,
                "label": metric.label,
                "paper": None,
                "ours": ours,
                "reason": reason,
                "note": _coverage(results, metric, ours),
            }
        )
    if results["n_unscored"] == results["n"]:
        record["status"] = "unscored"
        record["reason"] = _all_unscored(results)
    record["wall_time_s"] = round(time.perf_counter() - started, 3)
    return record


async def run_reproduce(
    protocol: Protocol,
    ctx: ReproduceContext,
    *,
    methods: Sequence[str] | None = None,
    options: dict[str, Any] | None = None,
    judge: Any = None,
    paper_model: str | None = None,
    n_bootstrap: int = 1000,
    concurrency: int | None = None,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) a paper's protocol and write ``reproduce.json`` and ``reproduce.md``; returns the JSON."""
    started = time.perf_counter()
    echo = echo or (lambda text: print(text, file=sys.stderr))
    embedded = ctx.llm is None and is_embedded(ctx.config)
    rows, selection = select_rows(protocol, methods, embedded)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    if options:
        from halluscope.methods import method_class

        accepted = {k for r in rows for k in method_class(r.method).Options.option_names()}  # type: ignore[arg-type]
        unused = sorted(set(options) - accepted)
        if unused:
            raise ReproduceError(
                f"option(s) {', '.join(unused)} belong to none of the selected rows' methods "
                f"({', '.join(sorted({r.method for r in rows if r.method}))})"
            )
    echo(f"{protocol.name}: {selection}")
    built = await protocol.build(ctx)
    echo(f"{protocol.name}: data {', '.join(f'{d.spec} ({len(d.examples)} items)' for d in built.datasets.values())}")
    needs_judge = any(m.suite == "final_matching" for r in rows for m in r.metrics)
    if judge is None and needs_judge:
        judge = ctx.get_llm()
    records = []
    for row in rows:
        echo(f"{protocol.name}: row {row.id} ...")
        record = await run_row(
            protocol,
            row,
            built,
            ctx,
            judge=judge,
            options=options or {},
            n_bootstrap=n_bootstrap,
            concurrency=concurrency,
        )
        for m, metric in zip(record["metrics"], row.metrics):
            m["paper"] = _paper_cell(protocol, row, metric, paper_model)
            if m["paper"] is None:
                m["paper_missing"] = (
                    "not printed for this row" if row.paper_row in protocol.paper.rows() else "row not in the paper"
                )
        records.append(record)
    paper = protocol.paper
    chosen = {r.id for r in rows}
    not_run = [
        {"id": r.id, "paper_row": r.paper_row, "method": r.method, "options": r.options}
        for r in protocol.runnable_rows()
        if r.id not in chosen
    ]
    paper_only = []
    for r in protocol.rows:
        if r.method is None:
            numbers = [
                _number_json(n, False)
                for m in r.metrics
                for n in [paper.lookup(r.paper_row, m.key, paper_model)]
                if n is not None
            ]
            paper_only.append(
                {
                    "id": r.id,
                    "paper_row": r.paper_row,
                    "reason": r.reason,
                    "models": paper.models(r.paper_row),
                    "numbers": numbers,
                }
            )
    from halluscope.methods import method_class

    model_name = next((r["model"] for r in records if r.get("model")), None)
    if model_name is None and any(method_class(r.method).uses_llm for r in rows if r.method):
        model_name = ctx.config.model or "embedded"
    result = {
        "paper": {
            "name": protocol.name,
            "title": paper.title,
            "seed": paper.seed,
            "dataset": paper.dataset,
            "split": paper.split,
            "reference_model": paper_model or paper.reference_model,
            "tables": paper.tables,
            "notes": paper.notes,
        },
        "protocol": {
            "description": protocol.description,
            "notes": list(protocol.protocol_notes),
            "rows_selected": selection,
            "sample": ctx.sample,
            "sample_applies_to": protocol.sample_applies_to,
            "seed": ctx.seed,
            "limit": ctx.limit,
            "base_dataset": ctx.dataset or protocol.base_dataset,
            "builder": ctx.builder,
            "build": built.summary(),
            "options": options or {},
        },
        "model": model_name,
        "judge_model": getattr(judge, "name", None) if needs_judge else None,
        "rows": records,
        "rows_not_run": not_run,
        "paper_only_rows": paper_only,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "wall_time_s": round(time.perf_counter() - started, 3),
    }
    write_reproduce(ctx.out_dir, result)
    return result


def paper_config(config: Config) -> Config:
    """``config`` without what would change a paper row unseen: the config file's ``[options.METHOD]`` tables and
    ``threshold``. A ``reproduce`` row takes its options from the paper plan and the command line alone, all
    printed in the row (``options``); the config file still names the model, its endpoint and the cache."""
    return config.model_copy(update={"options": {}, "threshold": None})
