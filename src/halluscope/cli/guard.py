"""``halluscope guard``: check a RAG answer against its chunks and print the text to ship (docs/guard.md).

The shipped text goes to standard output, the summary of what the guard did to standard error, and the full
Report (JSON) to ``--report FILE`` when given. Exit codes: 0 every sentence passed (the answer ships unchanged),
1 the guard acted (a sentence removed, fixed, re-cited or marked; with ``--on-fail raise``: refused, nothing on
standard output), 2 a usage error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from halluscope.cli.citations import CitationsOpt, UncitedOpt, check_uncited
from halluscope.cli.common import (
    NO_FLAGS,
    InputFileError,
    ModelFlags,
    check_output_file,
    fail,
    model_options,
    read_text_input,
)


def _summary(result: object) -> list[str]:
    from halluscope.methods.guard import GuardResult

    assert isinstance(result, GuardResult)
    subs = result.report.subscores
    recall, precision = subs.get("citation_recall"), subs.get("citation_precision")

    def shown(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = [f"guard ({result.policy}): citation recall {shown(recall)}, citation precision {shown(precision)}"]
    for s in result.sentences:
        if s.action != "kept":
            lines.append(f"  sentence {s.index + 1} {s.action} ({s.status}): {s.reason}")
    u = result.report.usage
    lines.append(f"  {u.calls} LLM calls, {u.prompt_tokens}+{u.completion_tokens} tokens")
    return lines


@model_options()
def guard_command(
    context: Annotated[
        list[str],
        typer.Option(
            "--context", "-c", help="A retrieved chunk's file (repeat for each chunk), or a .json list of chunks."
        ),
    ],
    target: Annotated[str, typer.Option("--target", "-t", help="The answer to guard ('-' for stdin).")],
    on_fail: Annotated[
        str, typer.Option("--on-fail", help="filter, fix, raise or annotate (docs/guard.md).")
    ] = "filter",
    citations: CitationsOpt = None,
    uncited: UncitedOpt = "check",
    threshold: Annotated[
        float, typer.Option("--threshold", min=0.0, max=1.0, help="P(supported) a sentence needs to pass.")
    ] = 0.5,
    report_file: Annotated[
        Path | None, typer.Option("--report", help="Write the full Report (JSON) to this file.")
    ] = None,
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Check every sentence of TARGET against the --context chunks it cites and print the text to ship: failing
    sentences removed (filter), replaced by a re-verified fix (fix), marked (annotate), or the answer refused
    (raise). Wrong citations are pointed at the chunk that supports the sentence."""
    from halluscope.cli.check import read_contexts
    from halluscope.llm import LLMError
    from halluscope.methods.guard import POLICIES, GuardError, aguard
    from halluscope.sync import run_sync
    from halluscope.text.citations import CitationStyleError

    if on_fail not in POLICIES:
        raise fail(f"--on-fail must be one of {', '.join(POLICIES)}, got {on_fail!r}")
    check_uncited(uncited)
    check_output_file(report_file, "--report")
    try:
        chunks, _ = read_contexts(context)
        answer = read_text_input(target, "target")
    except InputFileError as exc:
        raise fail(str(exc)) from exc
    config = flags.config()
    try:
        result = run_sync(
            aguard(chunks, answer, on_fail, style=citations, uncited=uncited, threshold=threshold, config=config)  # type: ignore[arg-type]
        )
    except GuardError as exc:
        typer.echo(f"refused: {exc}", err=True)
        if report_file is not None and exc.report is not None:
            report_file.write_text(exc.report.model_dump_json(indent=2), encoding="utf-8")
        raise typer.Exit(1) from exc
    except (CitationStyleError, LLMError, ValueError) as exc:
        raise fail(str(exc)) from exc
    if report_file is not None:
        try:
            report_file.write_text(result.report.model_dump_json(indent=2), encoding="utf-8")
        except OSError as exc:
            raise fail(f"--report {report_file}: cannot write: {exc.strerror or exc}") from exc
    typer.echo(result.text)
    for line in _summary(result):
        typer.echo(line, err=True)
    raise typer.Exit(1 if result.changed else 0)
