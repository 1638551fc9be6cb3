"""Inputs are read with a byte cap while they are read, and an input that holds nothing visible is refused.

On 22b0ee2 ``halluscope check -s /dev/zero`` or ``-s -`` from an endless pipe grew until killed (a MemoryError
traceback under ``ulimit -v``), and a target of zero-width characters only was scored."""

from __future__ import annotations

import io
import os

import pytest
from typer.testing import CliRunner

import halluscope.cli.common as common
from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.methods import InputError, get_method
from halluscope.text.blank import is_blank

SOURCE = "The council approved the budget on Tuesday."
INVISIBLE = [
    "\u200b\u200b\u2060\ufeff",
    " \u200b\n\u200d\t",
    "\u2060",
    "\ufeff \ufeff",
    "\u00ad\u200e\u200f",
    "\u3164\u115f",
    "\ufe0f\u200c",
]


class _Endless(io.RawIOBase):
    """An endless pipe: every read returns as much as was asked; a read of everything can never end."""

    def __init__(self, fill: bytes = b"word ") -> None:
        self.fill = fill
        self.given = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise MemoryError("read everything from an endless pipe")
        self.given += size
        return (self.fill * (size // len(self.fill) + 1))[:size]


class _Stdin:
    def __init__(self, buffer) -> None:
        self.buffer = buffer


def test_an_endless_pipe_is_refused_at_the_cap(monkeypatch):
    pipe = _Endless()
    monkeypatch.setattr(common.sys, "stdin", _Stdin(pipe))
    with pytest.raises(common.InputFileError, match="larger than the 1 MiB input limit.*HALLUSCOPE_MAX_INPUT_MB"):
        common.read_text_input("-", "source", max_bytes=2**20)
    assert pipe.given <= 2**20 + 1  # read no further than the cap


def test_the_cap_comes_from_the_environment(monkeypatch, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("word " * 50_000)  # 250 KB
    monkeypatch.setenv("HALLUSCOPE_MAX_INPUT_MB", "0.1")
    with pytest.raises(common.InputFileError, match="0.1 MiB"):
        common.read_text_input(str(big), "source")
    monkeypatch.setenv("HALLUSCOPE_MAX_INPUT_MB", "1")
    assert len(common.read_text_input(str(big), "source")) == 250_000
    monkeypatch.setenv("HALLUSCOPE_MAX_INPUT_MB", "lots")
    with pytest.raises(common.InputFileError, match="positive number"):
        common.read_text_input(str(big), "source")


def test_the_default_cap_is_64_mib(monkeypatch):
    monkeypatch.delenv("HALLUSCOPE_MAX_INPUT_MB", raising=False)
    assert common.max_input_bytes() == int(common.DEFAULT_MAX_INPUT_MB * 2**20) == 64 * 2**20


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_dev_zero_is_refused_with_exit_2(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("A summary.")
    result = CliRunner().invoke(app, ["check", "-s", "/dev/zero", "-t", str(target), "--method", "rouge"])
    assert result.exit_code == 2
    assert "binary" in result.output and "Traceback" not in result.output


def test_an_endless_stdin_is_refused_with_exit_2(monkeypatch, tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("A summary.")
    monkeypatch.setenv("HALLUSCOPE_MAX_INPUT_MB", "0.5")
    result = CliRunner().invoke(
        app, ["check", "-s", "-", "-t", str(target), "--method", "rouge"], input="word " * 200_000
    )  # 1 MB through the pipe
    assert result.exit_code == 2, result.output
    assert "input limit" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("text", INVISIBLE)
def test_invisible_only_text_is_blank(text):
    assert is_blank(text)


@pytest.mark.parametrize("text", ["a", "\u200bA", "x\u2060", "٣", "\u00a0.", "🙂"])
def test_visible_text_is_not_blank(text):
    assert not is_blank(text)


@pytest.mark.parametrize("text", INVISIBLE)
def test_the_api_refuses_an_invisible_target_and_source(text):
    method = get_method("geval", llm=LLM(FakeModel(default='{"reason": "x", "score": 5}'), cache=None))
    with pytest.raises(InputError, match="target is empty"):
        method.check(SOURCE, text)
    with pytest.raises(InputError, match="source is empty"):
        method.check(text, SOURCE)


@pytest.mark.parametrize("text", INVISIBLE[:2])
def test_the_cli_refuses_an_invisible_target(tmp_path, text):
    source, target = tmp_path / "s.txt", tmp_path / "t.txt"
    source.write_text(SOURCE)
    target.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge"])
    assert result.exit_code == 2 and "target" in result.output and "empty" in result.output
