"""``halluscope bench-sweep``: ``halluscope bench`` once per value of one method option, plus a combined table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from halluscope.cli.common import (
    NO_FLAGS,
    OLD_OUT_HELP,
    BootstrapOpt,
    ModelFlags,
    OptionOpt,
    either,
    fail,
    model_options,
    parse_options,
)

if TYPE_CHECKING:
    from halluscope.methods.base import Method


@model_options()
def bench_sweep_command(
    dataset: Annotated[
        str, typer.Option("--dataset", "-d", help="Dataset name or Example .jsonl (as for `halluscope bench`).")
    ],
    method: Annotated[str, typer.Option("--method", help="Method name (ignored when sweeping `method`).")],
    sweep: Annotated[
        str,
        typer.Option("--sweep", help="KEY=V1,V2,... e.g. window=0,1,2 (with -o retrieval=always) or method=rouge,dcr."),
    ],
    flags: ModelFlags = NO_FLAGS,
    option: OptionOpt = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N items (after --sample).")
    ] = None,
    sample: Annotated[
        int | None, typer.Option("--sample", min=1, help="Seeded stratified subsample (as for `halluscope bench`).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --sample and the bootstrap.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-O",
            help="Output folder (default runs/sweep-<dataset>-<method>-<key>/); one sub-folder per value.",
        ),
    ] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help=OLD_OUT_HELP)] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder.", envvar="HALLUSCOPE_DATA_DIR")
    ] = None,
    bootstrap: BootstrapOpt = 1000,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="Hide the progress bars.")] = False,
) -> None:
    """Benchmark METHOD once per value of one option (e.g. the retrieval window) and compare the runs.

    Sweeping window, top_k, retriever or merge_windows needs -o retrieval=always (else exit 2): with the
    default retrieval=auto a source that fits the model's context is sent whole and every row is the same."""
    out = either("--output", out, "--out", old_out)
    import asyncio
    import re

    from halluscope.bench.datasets import DatasetError, load_dataset
    from halluscope.bench.runner import BenchError
    from halluscope.bench.sweep import (
        SWEEP_MD,
        SweepError,
        check_retrieval_sweep,
        parse_sweep,
        render_markdown,
        run_sweep,
    )
    from halluscope.llm import LLMError, get_llm
    from halluscope.methods import get_method

    options = parse_options(option)
    try:
        key, values = parse_sweep(sweep)
        check_retrieval_sweep(key, options)  # before loading anything: a sweep that would measure nothing
        data = load_dataset(dataset, data_dir)
    except (SweepError, DatasetError) as exc:
        raise fail(str(exc)) from exc
    config, concurrency = flags.config(), flags.concurrency
    try:  # one judge for every run (only suites that need a judge use it)
        judge = get_llm(config)
    except (ValueError, LLMError):
        judge = None
    if out is None:
        name = "-".join(re.sub(r"[^A-Za-z0-9._+]+", "-", p).strip("-") for p in (data.spec, method, key))
        out = Path("runs") / f"sweep-{name}"

    def make_method(name: str, opts: dict[str, Any]) -> Method:
        return get_method(name, config=config, **opts)

    try:
        summary = asyncio.run(
            run_sweep(
                method,
                key,
                values,
                data,
                out,
                make_method=make_method,
                options=options,
                judge=judge,
                sample=sample,
                seed=seed,
                limit=limit,
                n_bootstrap=bootstrap,
                concurrency=concurrency,
                progress=not no_progress,
            )
        )
    except (SweepError, BenchError, ValueError) as exc:
        raise fail(str(exc)) from exc
    typer.echo(render_markdown(summary))
    typer.echo(f"wrote {out}/{SWEEP_MD}, sweep.json, sweep.png and one run folder per value")
