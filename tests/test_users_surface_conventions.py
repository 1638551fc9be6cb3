"""The conventions people type by habit: -v/-q/--log-level on every command, `-o FILE` pointed to --output,
messages naming flags as they are spelled, --html saying where it wrote, `halluscope methods` marking the default,
help as wide as the terminal or 100 columns in a pipe."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from halluscope.cli.main import app

REPO = Path(__file__).resolve().parents[1]
SOURCE = str(REPO / "examples" / "source.txt")
SUMMARY = str(REPO / "examples" / "summary.txt")


def _commands() -> list[list[str]]:
    group = typer.main.get_command(app)
    out = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(command, "commands"):  # a group of its own (generate)
            out += [[name, sub] for sub in command.commands]
        else:
            out.append([name])
    return out


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c))
def test_every_command_takes_verbose_quiet_and_a_log_level(command: list[str]) -> None:
    group = typer.main.get_command(app)
    cmd = group
    for name in command:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    flags = {opt for param in cmd.params for opt in param.opts}
    assert {"-v", "--verbose", "-q", "--quiet", "--log-level"} <= flags, command


@pytest.fixture
def halluscope_logger():
    logger = logging.getLogger("halluscope")
    before = (logger.level, list(logger.handlers), logger.propagate)
    yield logger
    logger.setLevel(before[0])
    logger.handlers[:] = before[1]
    logger.propagate = before[2]


def test_the_flags_set_the_level_and_contradictory_ones_are_refused(halluscope_logger) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["methods", "--log-level", "debug"]).exit_code == 0
    assert halluscope_logger.level == logging.DEBUG
    assert runner.invoke(app, ["methods", "-q"]).exit_code == 0
    assert halluscope_logger.level == logging.ERROR
    assert runner.invoke(app, ["methods", "-v"]).exit_code == 0
    assert halluscope_logger.level == logging.INFO
    refused = runner.invoke(app, ["methods", "-v", "-q"])
    assert refused.exit_code == 2 and "contradict" in refused.output
    assert runner.invoke(app, ["methods", "--log-level", "loud"]).exit_code == 2


def test_o_with_a_file_path_points_to_output() -> None:
    result = CliRunner().invoke(app, ["check", "-i", str(REPO / "examples" / "rag.jsonl"), "-o", "out.jsonl"])
    assert result.exit_code == 2
    assert "use --output out.jsonl" in result.stderr and "go together" not in result.stderr


def test_a_bench_folder_clash_names_the_output_flag_as_spelled(tmp_path) -> None:
    from halluscope.bench.runner import BenchError, _check_identity

    _check_identity(tmp_path, {"method": "gate"})
    with pytest.raises(BenchError, match=r"use another --output or delete the folder"):
        _check_identity(tmp_path, {"method": "rouge"})


def test_html_says_where_it_wrote(tmp_path) -> None:
    page = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["check", "-s", SOURCE, "-t", SUMMARY, "--method", "gate", "--html", str(page)])
    assert page.is_file() and f"wrote the web report to {page}" in result.stderr
    assert "wrote the web report" not in result.stdout


def test_methods_marks_the_default() -> None:
    listed = CliRunner().invoke(app, ["methods"]).stdout
    lines = {line.split()[0]: line for line in listed.splitlines() if line.strip()}
    assert "[default, -o order=verdict_first]" in lines["dcr"]
    assert sum("[default" in line for line in lines.values()) == 1
    assert "The default method (check with no --method): dcr -o order=verdict_first." in listed


def test_help_in_a_pipe_is_100_columns_wide() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "halluscope.cli.main", "check", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    widths = [len(line) for line in done.stdout.splitlines()]
    assert max(widths) == 100
