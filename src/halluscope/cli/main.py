"""The ``halluscope`` command: one group, one module per subcommand."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from halluscope.cli.bench import bench_command
from halluscope.cli.bench_citations import bench_citations_command
from halluscope.cli.bench_explain import build_command as bench_explain_build
from halluscope.cli.bench_explain import run_command as bench_explain_run
from halluscope.cli.bench_explain import score_command as bench_explain_score
from halluscope.cli.bench_fused import bench_fused_command
from halluscope.cli.bench_sweep import bench_sweep_command
from halluscope.cli.check import check_command
from halluscope.cli.fit_combiner import fit_combiner_command
from halluscope.cli.fit_verifier import fit_verifier_command
from halluscope.cli.generate_inject import inject_command
from halluscope.cli.generate_montage import montage_command
from halluscope.cli.generate_perturb import perturb_command
from halluscope.cli.guard import guard_command
from halluscope.cli.improve import improve_command
from halluscope.cli.reproduce import reproduce_command
from halluscope.cli.serve import serve_command
from halluscope.cli.train_verifier import train_verifier_command
from halluscope.cli.verbosity import verbosity_options

if TYPE_CHECKING:
    from halluscope.methods.base import Method


def _help_width() -> None:
    """Help uses the terminal's width; in a pipe (no terminal, no COLUMNS), 100 columns instead of rich's 80."""
    import os
    import sys

    import typer.rich_utils

    if not sys.stdout.isatty() and not os.environ.get("COLUMNS") and not os.environ.get("TERMINAL_WIDTH"):
        typer.rich_utils.MAX_WIDTH = 100


_help_width()
app = typer.Typer(
    name="halluscope",
    help="Find, locate, explain and fix hallucinations in generated text against its source.",
    no_args_is_help=True,
    context_settings={"max_content_width": 100},
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
)
generate_app = typer.Typer(
    help="Build benchmarks and stress tests (montage lies, perturbations, injections).", no_args_is_help=True
)
app.add_typer(generate_app, name="generate")
bench_explain_app = typer.Typer(
    help="The explanation benchmark: build the seeded set once, score reports of any version, or run a method.",
    no_args_is_help=True,
)
app.add_typer(bench_explain_app, name="bench-explain")


def _print_version(value: bool) -> None:
    if value:
        from halluscope._version import package_version

        typer.echo(f"halluscope {package_version()}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """Find, locate, explain and fix hallucinations in generated text against its source."""


def default_threshold(cls: type[Method]) -> str:
    """A method's default threshold, shown: its ``threshold`` option's default where it has one, else the one
    :meth:`Method.default_threshold_for` decides for its default options (and, where ``score=label`` gives
    another, that one); ``from its file`` where the option has none of its own (``ensemble``: the fitted
    combiner's)."""
    field = cls.Options.model_fields.get("threshold")
    if field is not None:
        return "from its file" if field.default is None else f"{float(field.default):g}"
    try:
        value = cls.default_threshold_for(cls.Options())
    except ValueError:  # options without a default (a required one)
        value = cls.default_threshold
    if value != cls.default_threshold:
        return f"{value:g} (score=label: {cls.default_threshold:g})"
    return f"{value:g}"


def default_composition() -> str:
    """What ``halluscope check`` runs when no method is named, as the options that name it (``dcr -o
    order=verdict_first``): the same composition as giving them."""
    from halluscope.config import resolve_method

    name, options = resolve_method(None, {})
    return " ".join([name, *(f"-o {k}={v}" for k, v in options.items())])


def default_method() -> tuple[str, dict[str, object]]:
    """The method (and options) ``check`` uses when --method is not given: the config file's ``method``, else
    :data:`halluscope.config.DEFAULT_METHOD` with its options."""
    from halluscope.config import Config, resolve_method

    try:
        configured = Config().method
    except ValueError:  # a broken config file is reported by the commands that use it
        configured = None
    return resolve_method(configured, {})


@verbosity_options
def methods_command(name: str | None = typer.Argument(None, help="Show this method's options.")) -> None:
    """List the registered methods (the default one marked), or one method's typed options."""
    from halluscope.methods import list_methods, method_class

    if name is None:
        default, default_options = default_method()
        with_options = " ".join(f"-o {k}={v}" for k, v in default_options.items())
        for method in list_methods():
            cls = method_class(method)
            llm = "LLM" if cls.uses_llm else "no LLM"
            mark = f"[default{', ' + with_options if with_options else ''}] " if method == default else ""
            typer.echo(f"{method:12s} [{llm}] threshold {default_threshold(cls):<4} {mark}{cls.description}")
        typer.echo(f"\nThe default method (check with no --method): {default} {with_options}".rstrip() + ".")
        typer.echo(
            "\nA report is consistent when its score is at least the threshold and it has no finding; "
            "set it with --threshold, `threshold` in the config file, or threshold= in Python."
        )
        typer.echo(f"Without --method (and no `method` in the config file), check runs: {default_composition()}")
        return
    try:
        cls = method_class(name)
    except KeyError as exc:
        typer.secho(f"error: {exc.args[0]}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from exc
    typer.echo(f"{name}: {cls.description}\n")
    typer.echo(f"default threshold: {default_threshold(cls)} (consistent: score >= threshold and no finding)\n")
    rows = cls.Options.option_rows()
    if not rows:
        typer.echo("(no options)")
    for row in rows:
        typer.echo(f"  {row['name']} : {row['type']} = {row['default']}")
        if row["doc"]:
            typer.echo(f"      {row['doc']}")
    if rows:
        typer.echo("\nSet with -o NAME=VALUE (CLI), or as keyword arguments in Python.")
    for option, alias in cls.Options.stage_aliases.items():
        typer.echo(
            f"Alias: {option}={'|'.join(alias.stages)} is {alias.kind}={'|'.join(alias.stages.values())} "
            "(the paper's name, translated when the options are parsed)."
        )
    details = cls.Details
    keys = details.keys_doc()
    if keys or details.model_config.get("extra") != "allow":
        typer.echo(f"\nReport.details keys ({details.__module__}.{details.__name__}; each optional):")
        if not keys:
            typer.echo("  (none)")
    for key, doc in keys:
        typer.echo(f"  {key}" + (f" : {doc}" if doc else ""))


@verbosity_options
def stages_command(
    protocol: str | None = typer.Argument(None, help="Only stages of this protocol (kind)."),
    name: str | None = typer.Argument(None, help="Only this stage."),
) -> None:
    """List the registered pipeline stages with their protocol and their options."""
    from halluscope.stages import PROTOCOLS, stages

    found = stages(protocol)
    if protocol is not None and not found:
        typer.secho(
            f"error: no stages for protocol {protocol!r}; protocols: {', '.join(PROTOCOLS)}",
            err=True,
            fg=typer.colors.RED,
        )
        raise typer.Exit(2)
    if name is not None:
        found = [s for s in found if name in (s.name, s.label)]
        if not found:
            typer.secho(f"error: no {protocol} stage named {name!r}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2)
    for spec in found:
        no_llm = "  (no LLM)" if getattr(spec.factory, "uses_llm", True) is False else ""
        typer.echo(f"{spec.protocol:17s} {spec.label:22s} {spec.description}{no_llm}  [{spec.module}]")
        for row in spec.options_model.option_rows():
            typer.echo(f"    {row['name']} : {row['type']} = {row['default']}")
            if row["doc"]:
                typer.echo(f"        {row['doc']}")
    kinds = (
        "decomposer",
        "context_selector",
        "verifier",
        "aggregator",
        "localizer",
        "gate",
        "sorter",
        "evidence_finder",
        "deduplicator",
    )
    if any(s.protocol in kinds for s in found):
        typer.echo(
            "\nOn a claim method: -o KIND=NAME -o KIND.OPTION=VALUE, KIND one of decomposer, context_selector, "
            "verifier, aggregator, localizer, gate (dove: sorter; probe: evidence_finder; factscore: "
            "deduplicator). A stage marked (no LLM) calls no model; a check whose stages all are needs none."
        )


app.command("methods")(methods_command)
app.command("stages")(stages_command)
app.command("check")(verbosity_options(check_command))
app.command("guard")(verbosity_options(guard_command))
app.command("improve")(verbosity_options(improve_command))
app.command("serve")(verbosity_options(serve_command))
app.command("bench")(verbosity_options(bench_command))
app.command("bench-sweep")(verbosity_options(bench_sweep_command))
app.command("bench-citations")(verbosity_options(bench_citations_command))
app.command("reproduce")(verbosity_options(reproduce_command))
app.command("train-verifier")(verbosity_options(train_verifier_command))
app.command("fit-combiner")(verbosity_options(fit_combiner_command))
bench_explain_app.command("build")(verbosity_options(bench_explain_build))
bench_explain_app.command("score")(verbosity_options(bench_explain_score))
bench_explain_app.command("run")(verbosity_options(bench_explain_run))
app.command("fit-verifier")(verbosity_options(fit_verifier_command))
app.command("bench-fused")(verbosity_options(bench_fused_command))
generate_app.command("montage")(verbosity_options(montage_command))
generate_app.command("perturb")(verbosity_options(perturb_command))
generate_app.command("inject")(verbosity_options(inject_command))


if __name__ == "__main__":
    app()
