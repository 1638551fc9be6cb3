"""``halluscope improve``: the ``improve`` method (DCR evaluation + reason-assisted rewriting, every rewrite
re-verified), the one way to run RAI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from halluscope.cli.common import (
    NO_FLAGS,
    InputFileError,
    ModelFlags,
    OptionOpt,
    check_output_file,
    fail,
    model_options,
    parse_options,
    read_text_input,
)
from halluscope.records import Report


def print_improvement(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    details = report.details
    rounds = details.get("rounds", [])
    if report.unscored_reason:
        console.print(f"[yellow]could not score the target:[/yellow] {report.unscored_reason}")
    table = Table("round", "score", "consistent", "flagged sentences", "changed sentences", title="Rounds")
    for r in rounds:
        score = "unscored" if r["score"] is None else f"{r['score']:.3f}"
        table.add_row(
            str(r["round"]),
            score,
            "yes" if r["consistent"] else "no",
            ", ".join(map(str, r["inconsistent_sentences"])) or "-",
            ", ".join(str(c["sentence"]) for c in r["changes"]) or "-",
        )
    console.print(table)
    for r in rounds:
        for c in r["changes"]:
            console.print(f"[bold]round {r['round']}, sentence {c['sentence']}[/bold] ({c['reason']})")
            console.print(f"  [red]- {c['before']}[/red]")
            console.print(f"  [green]+ {c['after'] or '(deleted)'}[/green]")
        if r.get("rewrite_error"):
            console.print(f"[yellow]round {r['round'] + 1} rewrite not used:[/yellow] {r['rewrite_error']}")
    console.print(f"stopped: {details.get('stop_reason', '-')}")
    if details.get("improved"):
        console.print(
            f"[bold]verified improvement[/bold] (round {details['best_round']}): "
            f"{report.subscores.get('initial_score'):.3f} -> {report.subscores.get('final_score'):.3f}"
        )
        console.print(details["diff"], markup=False, highlight=False)
        console.print("[bold]improved text:[/bold]")
        console.print(details["improved_target"], markup=False, highlight=False)
    else:
        console.print("no verified improvement: the original text is kept")
    from rich.markup import escape

    from halluscope.cli.check import usage_words

    console.print(f"[dim]{escape(usage_words(report.usage, report.elapsed_s))}[/dim]")


@model_options()
def improve_command(
    source: Annotated[str, typer.Option("--source", "-s", help="Source text file ('-' for stdin).")],
    target: Annotated[str, typer.Option("--target", "-t", help="Target text file to improve ('-' for stdin).")],
    rounds: Annotated[int, typer.Option("--rounds", "-n", min=1, max=10, help="Maximum rewrite rounds.")] = 2,
    level: Annotated[
        str, typer.Option(help="'sentence' (rewrite flagged sentences) or 'paragraph' (whole text).")
    ] = "sentence",
    evaluator: Annotated[
        str | None,
        typer.Option(
            "--method",
            help=(
                "The evaluator that flags sentences and re-verifies each rewrite: dcr (default, the paper's) or any "
                "method that yields findings (probe, factscore, dove, localize, ...); -o options then go to it. Same "
                "as -o evaluator=NAME."
            ),
        ),
    ] = None,
    flags: ModelFlags = NO_FLAGS,
    option: OptionOpt = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-O", help="Write the verified improved text here.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the full Report as JSON.")] = False,
) -> None:
    """Evaluate TARGET against SOURCE with DCR (or --method), rewrite the inconsistent sentences, re-verify, repeat.

    Only a rewrite whose re-evaluation by the same evaluator scores strictly higher than the original is reported
    as an improvement; otherwise the original text is kept. With DCR every DCR option works here too with -o (amc,
    retrieval, top_k, window, retriever, verifier): `halluscope methods improve` lists them; with --method NAME
    the -o options are that method's."""
    from halluscope.llm import LLMError
    from halluscope.methods import InputError, get_method

    if source == "-" and target == "-":
        raise fail("only one of --source/--target can read standard input")
    check_output_file(output, "--output")
    try:
        src = read_text_input(source, "source")
        tgt = read_text_input(target, "target")
    except InputFileError as exc:
        raise fail(str(exc)) from exc
    config = flags.config()
    options = parse_options(option)
    if evaluator is not None:
        options["evaluator"] = evaluator
    options.setdefault("rounds", rounds)
    options.setdefault("level", level)
    try:
        method = get_method("improve", config=config, **options)
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from exc
    try:
        report = method.check(src, tgt)
    except (InputError, LLMError, ValueError) as exc:
        raise fail(str(exc)) from exc
    if output is not None:
        try:
            output.write_text(report.details.get("improved_target", tgt), encoding="utf-8")
        except OSError as exc:
            raise fail(f"--output {output}: cannot write: {exc.strerror or exc}") from exc
    if json_out:
        typer.echo(report.model_dump_json(indent=2))
    else:
        print_improvement(report)
