"""``halluscope check``: score one target against one source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional, cast

import typer

from halluscope.cli.common import (ApiKeyOpt, BaseUrlOpt, ConcurrencyOpt, InputFileError, ModelOpt, NoCacheOpt,
                                   OptionOpt, check_fraction, check_output_file, fail, make_config, parse_options, read_text_input)
from halluscope.records import Report

if TYPE_CHECKING:
    from halluscope.methods.base import Method


def print_report(report: Report, target: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    score = "unscored" if report.score is None else f"{report.score:.3f}"
    console.print(f"[bold]{report.method}[/bold] ({report.model or 'no LLM'}): score [bold]{score}[/bold]"
                  + (f" -> {report.label}" if report.label else ""))
    if report.unscored_reason:
        console.print(f"[yellow]could not score:[/yellow] {report.unscored_reason}")
    if report.subscores:
        console.print("  " + ", ".join(f"{k}={'-' if v is None else f'{v:.3f}'}" for k, v in report.subscores.items()))
    if report.findings:
        table = Table("kind", "where in target", "description", show_lines=True)
        for f in report.findings:
            where = " | ".join(s.of(target) for s in f.target_spans) or "-"
            table.add_row(f.kind, where, f.description)
        console.print(table)
    unscored = sum(v.label == "unscored" for v in report.verdicts)
    if unscored:
        console.print(f"[yellow]{unscored} of {len(report.verdicts)} claims could not be scored[/yellow]")
    u = report.usage
    cost = "" if u.cost_usd is None else f", ${u.cost_usd:.6f}"  # only where the provider's prices are known
    console.print(f"[dim]{u.calls} LLM calls, {u.prompt_tokens}+{u.completion_tokens} tokens{u.cached_note()}, "
                  f"{u.cache_hits} cache hits{cost}, {report.elapsed_s:.2f}s[/dim]")


def check_command(
    source: Annotated[Optional[str], typer.Option("--source", "-s", help="Source text file ('-' for stdin).")] = None,
    target: Annotated[Optional[str], typer.Option("--target", "-t", help="Target text file to check ('-' for stdin).")] = None,
    method: Annotated[Optional[str], typer.Option("--method", help="Method name (see `halluscope methods`).")] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    no_cache: NoCacheOpt = None,
    concurrency: ConcurrencyOpt = None,
    option: OptionOpt = None,
    threshold: Annotated[Optional[float], typer.Option(help="Label consistent when score >= threshold.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the full Report as JSON.")] = False,
    fail_under: Annotated[Optional[float], typer.Option("--fail-under", help="Exit 1 when the score is below this (or unscored).")] = None,
    html: Annotated[Optional[str], typer.Option("--html", help="Also write the web report (side-by-side, highlighted spans) to this file.")] = None,
    input_file: Annotated[Optional[str], typer.Option("--input", "-i", help="Check every row of this table (.jsonl, .csv or .parquet) instead of one pair.")] = None,
    output_file: Annotated[Optional[str], typer.Option("--output", "-O", help="With --input: write one result row per input row here (.jsonl, .csv or .parquet); resumes after a crash.")] = None,
    source_column: Annotated[str, typer.Option("--source-column", help="With --input: the column holding the source.")] = "source",
    target_column: Annotated[str, typer.Option("--target-column", help="With --input: the column holding the target.")] = "target",
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="With --input: show a progress bar.")] = True,
) -> None:
    """Check TARGET against SOURCE (or every row of --input into --output) and print the score, findings and cost."""
    from halluscope.llm import LLMError
    from halluscope.config import resolve_method
    from halluscope.methods import InputError, get_method

    if input_file is not None or output_file is not None:
        if source is not None or target is not None:
            raise fail("use either --source/--target (one pair) or --input/--output (a table), not both")
        if input_file is None or output_file is None:
            raise fail("--input and --output go together")
        if json_out or html or fail_under is not None:
            raise fail("--json, --html and --fail-under check one pair; with --input every row goes to --output")
    elif source is None or target is None:
        raise fail("give --source and --target (one pair), or --input and --output (a table of pairs)")
    if source == "-" and target == "-":
        raise fail("only one of --source/--target can read standard input")
    check_fraction(threshold, "--threshold")
    check_fraction(fail_under, "--fail-under")
    check_output_file(html, "--html")
    if input_file is None:
        try:
            src = read_text_input(cast(str, source), "source")  # both given: checked above
            tgt = read_text_input(cast(str, target), "target")
        except InputFileError as exc:
            raise fail(str(exc))
    config = make_config(model, base_url, api_key, no_cache, concurrency)
    try:
        name, options = resolve_method(method, parse_options(option))
        m = get_method(name, config=config, **options)
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(str(exc.args[0] if isinstance(exc, KeyError) else exc))
    if m.uses_llm:
        try:  # a backend that cannot be built is a set-up error, not an unscored pair
            m.llm  # noqa: B018
        except (LLMError, ValueError) as exc:
            raise fail(str(exc))
    if input_file is not None:
        check_table(m, input_file, cast(str, output_file), source_column, target_column, threshold, concurrency, progress)
        return
    try:
        report = m.check(src, tgt)
    except (InputError, LLMError, ValueError) as exc:
        raise fail(str(exc))
    if threshold is not None:
        report = report.with_threshold(threshold)
    if html:
        from halluscope.report import write_html

        try:
            write_html(report, src, tgt, html)
        except OSError as exc:  # e.g. no permission: a clear refusal, not a traceback
            raise fail(f"--html {html}: cannot write the report: {exc.strerror or exc}")
    if json_out:
        typer.echo(report.model_dump_json(indent=2))
    else:
        print_report(report, tgt)
    if fail_under is not None and (report.score is None or report.score < fail_under):
        raise typer.Exit(1)


def check_table(method: Method, input_file: str, output_file: str, source_column: str, target_column: str,
                threshold: float | None, concurrency: int | None, progress: bool) -> None:
    """``check --input/--output``: every row checked, resumably (see :mod:`halluscope.tabular`)."""
    from halluscope.llm import LLMError
    from halluscope.sync import run_sync
    from halluscope.tabular import TableError, check_file

    try:
        summary = run_sync(check_file(method, input_file, output_file, source=source_column, target=target_column,
                                      threshold=threshold, concurrency=concurrency, progress=progress))
    except (TableError, LLMError) as exc:
        raise fail(str(exc))
    mean = "-" if summary["mean_score"] is None else f"{summary['mean_score']:.3f}"
    cost = "" if summary["cost_usd"] is None else f", ${summary['cost_usd']:.6f}"
    typer.echo(f"wrote {summary['rows']} rows to {summary['output']} ({summary['checked']} checked now, "
               f"{summary['resumed']} resumed): {summary['scored']} scored, {summary['unscored']} unscored, "
               f"mean score {mean}; {summary['calls']} LLM calls, "
               f"{summary['prompt_tokens']}+{summary['completion_tokens']} tokens, {summary['cache_hits']} cache hits{cost}")
