"""The README's "Another model" and "Python, DataFrames and pytest" snippets, run as written (hosts and files swapped
for loopback stubs and temporary files), so the docs cannot drift from the code."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from halluscope.llm.litellm_backend import litellm_model_name

REPO = Path(__file__).resolve().parents[1]
pytest_plugins = ("pytester",)


def section_blocks(title: str) -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.index("\n## ", start + 3)
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S)


def blocks(language: str, title: str = "Python, DataFrames and pytest") -> list[str]:
    return [code for lang, code in section_blocks(title) if lang == language]


def cli_args(line: str) -> list[str]:
    words = shlex.split(line.split("#")[0])
    while "=" in words[0]:  # leading VAR=value assignments
        words.pop(0)
    assert words[0] == "halluscope"
    return [sys.executable, "-m", "halluscope.cli.main", *words[1:]]


def test_the_sections_have_their_snippets():
    assert [lang for lang, _ in section_blocks("Another model")] == ["bash"]
    assert [lang for lang, _ in section_blocks("Python, DataFrames and pytest")] == ["python", "python", "python"]
    assert [lang for lang, _ in section_blocks("RAG contexts: a list of chunks")] == ["python", "bash"]


def test_the_provider_snippet_routes_each_model(tmp_path):
    lines = [line for line in blocks("bash", "Another model")[0].splitlines() if line.strip()]
    routes = {}
    for line in lines:
        args = cli_args(line)[3:]  # after "python -m halluscope.cli.main"
        model = args[args.index("--model") + 1] if "--model" in args else args[args.index("-m") + 1]
        base_url = args[args.index("--base-url") + 1] if "--base-url" in args else None
        routes[model] = litellm_model_name(model, base_url)
    # a model at a --base-url goes to that OpenAI-compatible endpoint; a provider's model goes through LiteLLM
    assert routes == {
        "gpt-4o-mini": None,
        "qwen2.5:7b": None,
        "anthropic/claude-3-5-haiku-latest": "anthropic/claude-3-5-haiku-latest",
    }
    from tests.test_cache_backends import StubEndpoint

    (tmp_path / "src.txt").write_text("Source 1: the cat sat on the mat.")
    (tmp_path / "out.txt").write_text("Claim number 1.")
    with StubEndpoint() as stub:  # the local-endpoint line, its URL swapped for a loopback stub
        args = [stub.base_url if a == "http://localhost:11434/v1" else a for a in cli_args(lines[1])]
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        assert "score 1" in done.stdout and len(stub.arrived) == 1


def test_the_dataframe_snippet_runs():
    pytest.importorskip("pandas")
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks("python")[1], "README.md", "exec"), scope)
    results = scope["results"]
    assert list(results["label"]) == ["consistent", "inconsistent"]
    assert results.loc[0, "score"] == 1.0 and results.loc[1, "score"] < 0.5
    assert "n_findings" in printed.getvalue()


def test_the_table_snippet_runs_on_a_ragas_file(tmp_path):
    import shutil

    shutil.copytree(REPO / "examples", tmp_path / "examples")
    args = cli_args(blocks("bash", "RAG contexts: a list of chunks")[0].strip())
    for _ in range(2):  # the same command again finds nothing left to do and rewrites the file
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        # the first row's answer says the city pays for the whole ferry; its chunk gives two thirds to a grant
        assert done.returncode == 1, done.stderr
        assert "2 scored, 0 unscored, 1 inconsistent" in done.stdout
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["user_input"] for r in rows][1] == "How often will the ferry run?" and all(r["score"] for r in rows)


def test_the_pytest_snippet_passes_under_pytest(pytester):
    pytester.makepyfile(test_answers=blocks("python")[2])
    installed = any(ep.value == "halluscope.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    # a subprocess: an in-process run would drop the modules first imported inside it (see test_pytest_plugin)
    result = pytester.runpytest_subprocess(*([] if installed else ["-p", "halluscope.pytest_plugin"]))
    result.assert_outcomes(passed=1)
