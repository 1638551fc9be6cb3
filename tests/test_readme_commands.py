"""Every fenced bash command of the README runs as written, except the blocks marked
``<!-- readme-test: skip (reason) -->`` (network, a key or a model download), which are listed with their reason.
Also: the README stays short, cites the five papers, and quotes what the offline example really prints."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
SKIP = re.compile(r"<!-- readme-test: skip \((?P<reason>[^)]+)\) -->\s*$")


def bash_blocks() -> list[tuple[int, str, str | None]]:
    """(line number, code, skip reason or None) for every ```bash block."""
    out = []
    lines = README.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "```bash":
            end = lines.index("```", i + 1)
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip = SKIP.search(before)
            out.append((i + 1, "\n".join(lines[i + 1 : end]), skip.group("reason") if skip else None))
    return out


def commands(code: str) -> list[str]:
    return [line.split(" #")[0].strip() for line in code.splitlines() if line.strip() and not line.startswith("#")]


BLOCKS = bash_blocks()


def test_the_readme_is_short_and_cites_the_five_papers() -> None:
    assert len(README.splitlines()) <= 250
    for title in (
        "Long-Form Information Alignment Evaluation Beyond Atomic Facts",
        "Divide-Conquer-Reasoning for Consistency Evaluation and Automatic Improvement of Large Language Models",
        "Fine-Grained Detection of Context-Grounded Hallucinations Using LLMs",
        "Stress Testing Factual Consistency Metrics for Long-Document Summarization",
        "PROBE: PROcess-Based BEnchmark for Hallucination Detection",
    ):
        assert title in README, title
    for arxiv in ("2505.15792", "2401.02132", "2509.22582", "2511.07689"):
        assert f"arXiv:{arxiv}" in README
    assert not re.search(r"(?i)seed 00\d|\bsession\b|this stop|\bcommit [0-9a-f]{7}", README)
    assert "<!-- quickstart-output -->" in README


def test_every_block_is_run_or_says_why_not() -> None:
    assert len(BLOCKS) >= 4 and sum(reason is None for _, _, reason in BLOCKS) >= 2
    assert all(reason is None or reason.strip() for _, _, reason in BLOCKS)


@pytest.mark.parametrize("line, code, reason", BLOCKS, ids=[f"line{n}" for n, _, _ in BLOCKS])
def test_readme_bash_block_runs(line: int, code: str, reason: str | None, tmp_path) -> None:
    if reason is not None:
        pytest.skip(f"README line {line}: {reason}")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    for command in commands(code):
        words = shlex.split(command)
        assert words[0] == "halluscope", command
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "halluscope.cli.main",
                *words[1:],
                *(["--no-progress"] if "--input" in words else []),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        # it ran and checked: 0 (consistent) or 1 (inconsistent); 2 (usage) and 3 (unscored) mean it did not
        assert done.returncode in (0, 1), f"{command}\n{done.stdout}\n{done.stderr}"


def test_the_offline_example_prints_what_the_readme_shows(tmp_path) -> None:
    shown = (
        README.split("--target examples/answer.txt --method gate\n```", 1)[1].split("```text\n", 1)[1].split("```")[0]
    )
    command = next(c for _, code, reason in BLOCKS if reason is None for c in commands(code) if "answer.txt" in c)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "halluscope.cli.main", *shlex.split(command)[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    timeless = lambda text: re.sub(r", [0-9.]+s$", "", text.strip(), flags=re.M)  # noqa: E731 - elapsed time varies
    assert timeless(done.stdout) == timeless(shown)


def test_the_readme_python_blocks_run(tmp_path) -> None:
    rag = README.split("## RAG contexts: a list of chunks", 1)[1].split("```python\n", 1)[1].split("```")[0]
    first = README.split("## Python, DataFrames and pytest", 1)[1].split("```python\n", 1)[1].split("```")[0]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        "XDG_CACHE_HOME": str(tmp_path),
    }
    for code in (rag, first):
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run(
        [sys.executable, "-c", rag], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.stdout.splitlines()[0] == "inconsistent" and "(1, 'It has 2.1 million inhabitants.')" in done.stdout
