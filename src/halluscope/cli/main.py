"""The ``halluscope`` command: one group, one module per subcommand."""

from __future__ import annotations

import typer

from halluscope.cli.check import check_command

app = typer.Typer(
    name="halluscope",
    help="Find, locate, explain and fix hallucinations in generated text against its source.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
generate_app = typer.Typer(help="Build benchmarks and stress tests (montage lies, perturbations, injections).",
                           no_args_is_help=True)
app.add_typer(generate_app, name="generate")


@app.command("methods")
def methods_command() -> None:
    """List the registered methods."""
    from halluscope.methods import list_methods, method_class

    for name in list_methods():
        cls = method_class(name)
        llm = "LLM" if cls.uses_llm else "no LLM"
        typer.echo(f"{name:12s} [{llm}] {cls.description}")


app.command("check")(check_command)


if __name__ == "__main__":
    app()
