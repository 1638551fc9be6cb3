"""``halluscope bench-citations``: build the seeded citation set from the shared dev data (once; saved) and run the
citation check and the guard on it (resumable), printing the summary (docs/citations.md, "Benchmark")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, fail, model_options


@model_options()
def bench_citations_command(
    citation_set: Annotated[
        Path, typer.Option("--set", help="The citation set (.jsonl): built here first when it does not exist.")
    ] = Path("citation_set.jsonl"),
    results: Annotated[
        Path, typer.Option("--results", help="Per-answer results (.jsonl); a rerun skips the answers in it.")
    ] = Path("citation_results.jsonl"),
    scorer: Annotated[
        str, typer.Option("--scorer", help="verdict-first (the configured model) or gate (no model).")
    ] = "verdict-first",
    items: Annotated[int, typer.Option("--items", min=1, help="Answers in a newly built set.")] = 40,
    seed: Annotated[int, typer.Option("--seed", help="The seed of a newly built set.")] = 13,
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help="The shared dev data folder (default: ../shared/data).")
    ] = None,
    threshold: Annotated[float, typer.Option("--threshold", min=0.0, max=1.0)] = 0.5,
    stream: Annotated[
        bool, typer.Option("--stream", help="Also measure the streaming guard's release latency.")
    ] = False,
    token_interval: Annotated[
        float,
        typer.Option(
            "--token-interval",
            min=0.0,
            help="With --stream: seconds between the words fed to the streaming guard (0.02: 50 words a second).",
        ),
    ] = 0.02,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Run only the first N answers of the set (after --sample).")
    ] = None,
    sample: Annotated[
        int | None, typer.Option("--sample", min=1, help="Run a seeded random sample of N answers of the set.")
    ] = None,
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Build (or read) the citation set and report wrong-citation detection, citation recall/precision against the
    gold, guard outcomes, cost and (--stream) release latency per sentence. The response cache is off unless
    --cache is given: the seconds, calls and latencies measured are those of real calls."""
    from halluscope.bench.citation_set import (
        CitationSetConfig,
        GateScorer,
        ResultsError,
        build_citation_set,
        load_citation_set,
        read_articles,
        run_citation_bench,
        save_citation_set,
        select_items,
    )
    from halluscope.bench.datasets import resolve_data_dir
    from halluscope.sync import run_sync

    if scorer not in ("verdict-first", "gate"):
        raise fail(f"--scorer must be verdict-first or gate, got {scorer!r}")
    if not citation_set.exists():
        try:
            articles = read_articles(resolve_data_dir(data_dir))
        except (FileNotFoundError, ValueError) as exc:
            raise fail(str(exc)) from exc
        config = CitationSetConfig(seed=seed, items=items)
        save_citation_set(citation_set, build_citation_set(articles, config), config)
        typer.echo(f"built {citation_set}", err=True)
    try:
        _, rows = load_citation_set(citation_set)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    chosen_rows = select_items(rows, limit=limit, sample=sample, seed=seed)
    owned = None
    chosen: GateScorer | VerdictFirst
    run: dict[str, Any] = {"model": None}
    if scorer == "gate":
        chosen = GateScorer(threshold)
    else:
        from halluscope.llm import get_llm
        from halluscope.methods.verdict_first import VerdictFirst

        model_config = flags.config()
        if flags.no_cache is None:
            model_config = model_config.with_overrides(cache=False)
        owned = get_llm(model_config)
        run["model"] = owned.name
        chosen = VerdictFirst(owned, VerdictFirst.Options(explain=False))
    try:
        summary = run_sync(
            run_citation_bench(
                chosen_rows,
                chosen,
                results,
                threshold=threshold,
                stream=stream,
                token_interval=token_interval,
                run=run,
            )
        )
    except ResultsError as exc:
        raise fail(str(exc)) from exc
    finally:
        if owned is not None:
            owned.close()
    shown = {"scorer": scorer, "model": run["model"], "set": str(citation_set), "items_in_set": len(rows)}
    typer.echo(json.dumps({**shown, **summary}, indent=2))
