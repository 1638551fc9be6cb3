"""The ``halluscope`` command: one group, one module per subcommand."""

from __future__ import annotations

import typer

from halluscope.cli.bench import bench_command
from halluscope.cli.bench_sweep import bench_sweep_command
from halluscope.cli.check import check_command
from halluscope.cli.improve import improve_command
from halluscope.cli.serve import serve_command
from halluscope.cli.generate_inject import inject_command
from halluscope.cli.generate_montage import montage_command
from halluscope.cli.generate_perturb import perturb_command

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
app.command("improve")(improve_command)
app.command("serve")(serve_command)
app.command("bench")(bench_command)
app.command("bench-sweep")(bench_sweep_command)
generate_app.command("montage")(montage_command)
generate_app.command("perturb")(perturb_command)
generate_app.command("inject")(inject_command)


if __name__ == "__main__":
    app()
