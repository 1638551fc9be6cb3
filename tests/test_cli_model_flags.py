"""The model/endpoint flags are declared once (``halluscope.cli.common.MODEL_FLAGS`` through ``model_options``) and
every command that talks to a model takes the same block: same spellings, help, defaults and environment
variables, side by side in ``--help``."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from halluscope.cli.common import MODEL_FLAGS, NO_FLAGS, ModelFlags, model_options
from halluscope.cli.main import app

MODEL_COMMANDS = [
    ["check"],
    ["improve"],
    ["bench"],
    ["bench-sweep"],
    ["reproduce"],
    ["fit-combiner"],
    ["fit-verifier"],
    ["bench-fused"],
    ["serve"],
    ["generate", "inject"],
    ["generate", "montage"],
    ["generate", "perturb"],
]


def _command(path: list[str]):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return cmd


def _declared() -> dict[str, typer.models.OptionInfo]:
    return {name: alias.__metadata__[0] for name, alias in MODEL_FLAGS.items()}


@pytest.mark.parametrize("path", MODEL_COMMANDS, ids=" ".join)
def test_every_model_command_takes_the_one_block(path):
    params = [p for p in _command(path).params if not getattr(p, "hidden", False)]
    names = [p.name for p in params]
    expected = [n for n in MODEL_FLAGS if path != ["serve"] or n != "no_cache"]  # serve: every flag has a variable
    at = names.index("model")
    assert names[at : at + len(expected)] == expected  # side by side, in the declared order
    declared = _declared()
    for param in params[at : at + len(expected)]:
        info = declared[param.name]
        assert param.help == info.help and param.envvar == info.envvar and param.default is None
        assert param.opts[0] == info.default.split("/")[0]  # the long spelling (Annotated keeps it in `default`)


def test_a_command_gets_the_flags_as_one_record_and_its_own_options_as_before(monkeypatch):
    seen: dict = {}
    toy = typer.Typer()

    @toy.command()
    @model_options()
    def run(
        name: Annotated[str, typer.Option()] = "x",
        flags: ModelFlags = NO_FLAGS,
        last: Annotated[int, typer.Option()] = 0,
    ) -> None:
        seen.update(name=name, flags=flags, last=last)

    monkeypatch.setenv("HALLUSCOPE_BASE_URL", "http://127.0.0.1:9/v1")
    result = CliRunner().invoke(toy, ["--name", "y", "-m", "stub", "--no-cache", "--concurrency", "3", "--last", "2"])
    assert result.exit_code == 0, result.output
    assert seen == {
        "name": "y",
        "last": 2,
        "flags": ModelFlags(model="stub", base_url="http://127.0.0.1:9/v1", no_cache=True, concurrency=3),
    }
    config = seen["flags"].config()
    assert (config.model, config.base_url, config.cache, config.max_concurrency) == (
        "stub",
        "http://127.0.0.1:9/v1",
        False,
        3,
    )
    refused = CliRunner().invoke(toy, ["--concurrency", "0"])
    assert refused.exit_code == 2 and "--concurrency" in refused.output


def test_without_cache_the_block_has_no_cache_flag():
    toy = typer.Typer()

    @toy.command()
    @model_options(cache=False)
    def run(flags: ModelFlags = NO_FLAGS) -> None:
        typer.echo(repr(flags))

    names = [p.name for p in typer.main.get_command(toy).params if "completion" not in p.name]
    assert names == [n for n in MODEL_FLAGS if n != "no_cache"]
    assert CliRunner().invoke(toy, ["--no-cache"]).exit_code == 2
