"""``benchmarks/repeat_tests.sh`` runs the README's test command RUNS times on a fresh clone and exits with the
number of failed runs: here on a throw-away repository whose README's command is a quick pip + pytest call."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def repo_with_command(path: Path, command: str) -> Path:
    path.mkdir()
    (path / "README.md").write_text(f"# x\n\nRun the tests:\n\n{command}\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "readme"], check=True)
    return path


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize(
    "command, failed",
    [
        ("pip install --help > /dev/null && python -m pytest --version", 0),
        ("pip install --help > /dev/null && python -m pytest --no-such-option", 2),
    ],
)
def test_each_run_is_logged_and_the_exit_status_counts_the_failed_ones(tmp_path, command, failed) -> None:
    repo = repo_with_command(tmp_path / "repo", command)
    logs = tmp_path / "logs"
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "repeat_tests.sh"), "2", "0", str(logs)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == failed, done.stdout + done.stderr
    summary = (logs / "summary.txt").read_text()
    assert f"cmd: {command}" in summary and f"failed runs: {failed} of 2" in summary
    assert sorted(p.name for p in logs.glob("run*.log")) == ["run1.log", "run2.log"]
