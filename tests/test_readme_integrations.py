"""The README's "Any provider, tables in and out, pytest" snippets, run as written (hosts and files swapped for
loopback stubs and temporary files), so the docs cannot drift from the code."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
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


def section_blocks() -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Any provider, tables in and out, pytest")
    end = text.index("\n## ", start + 3)
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S)


def blocks(language: str) -> list[str]:
    return [code for lang, code in section_blocks() if lang == language]


def cli_args(line: str) -> list[str]:
    words = shlex.split(line.split("#")[0])
    while "=" in words[0]:  # leading VAR=value assignments
        words.pop(0)
    assert words[0] == "halluscope"
    return [sys.executable, "-m", "halluscope.cli.main", *words[1:]]


def test_the_section_has_its_snippets():
    assert [lang for lang, _ in section_blocks()] == ["bash", "python", "bash", "python"]


def test_the_provider_snippet_routes_each_model_to_litellm(tmp_path):
    lines = [line for line in blocks("bash")[0].splitlines() if line.strip()]
    for line in lines:
        args = cli_args(line)[3:]  # after "python -m halluscope.cli.main"
        model = args[args.index("--model") + 1] if "--model" in args else args[args.index("-m") + 1]
        base_url = args[args.index("--base-url") + 1] if "--base-url" in args else None
        assert litellm_model_name(model, base_url) is not None, line
    pytest.importorskip("litellm", reason="litellm extra not installed")
    from tests.test_cache_backends import StubEndpoint

    (tmp_path / "src.txt").write_text("Source 1: the cat sat on the mat.")
    (tmp_path / "out.txt").write_text("Claim number 1.")
    with StubEndpoint() as stub:
        args = [stub.base_url if a == "http://localhost:11434/v1" else a for a in cli_args(lines[1])]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "XDG_CACHE_HOME": str(tmp_path / "cache")}
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        assert "score 1.000" in done.stdout and len(stub.arrived) == 1


def test_the_dataframe_snippet_runs():
    pytest.importorskip("pandas")
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks("python")[0], "README.md", "exec"), scope)
    results = scope["results"]
    assert list(results["label"]) == ["consistent", "inconsistent"]
    assert results.loc[0, "score"] == 1.0 and results.loc[1, "score"] < 0.5
    assert "n_findings" in printed.getvalue()


def test_the_file_snippet_runs(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame({"source": ["The cat sat on the mat."] * 3, "target": ["The cat sat.", "A dog.", "The mat."]}).to_csv(
        tmp_path / "pairs.csv", index=False)
    args = cli_args(blocks("bash")[1].strip())
    for _ in range(2):  # "same command again resumes": the second run finds nothing left and rewrites the file
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    out = pd.read_parquet(tmp_path / "results.parquet")
    assert list(out["target"]) == ["The cat sat.", "A dog.", "The mat."] and out["score"].notna().all()


def test_the_pytest_snippet_passes_under_pytest(pytester):
    pytester.makepyfile(test_answers=blocks("python")[1])
    installed = any(ep.value == "halluscope.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    result = pytester.runpytest(*([] if installed else ["-p", "halluscope.pytest_plugin"]))
    result.assert_outcomes(passed=1)
