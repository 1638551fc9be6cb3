"""``benchmarks/compare_bench_runs.py``, the before/after proof for a refactor: two roots of ``halluscope bench``
folders (here a ``--methods`` run, one sub-folder per method) compare "identical" when every item's Report and
every result is the same, wall-clock fields aside; a changed score is a difference (exit 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from halluscope.cli.main import app

REPO = Path(__file__).resolve().parents[1]


def compare(old: Path, new: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "compare_bench_runs.py"), str(old), str(new)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_two_runs_of_the_same_command_are_identical_and_a_changed_score_is_not(tmp_path) -> None:
    data = tmp_path / "items.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "source": "The cat sat on the mat near the door.",
                    "target": "The cat sat on the mat" + " quietly" * i + ".",
                    "human_score": i % 2,
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    for root in ("old", "new"):
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "-d",
                str(data),
                "--methods",
                "rouge,gate",
                "--bootstrap",
                "50",
                "--no-progress",
                "-O",
                str(tmp_path / root / "qags"),
            ],
        )
        assert result.exit_code == 0, result.output

    same = compare(tmp_path / "old", tmp_path / "new")
    assert same.returncode == 0 and same.stdout.startswith("identical"), same.stdout + same.stderr

    items = tmp_path / "new" / "qags" / "rouge" / "items.jsonl"
    lines = items.read_text().splitlines()
    first = json.loads(lines[0])
    first["report"]["score"] = round(1.0 - first["report"]["score"], 6)
    items.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    changed = compare(tmp_path / "old", tmp_path / "new")
    assert changed.returncode == 1 and "score" in changed.stdout, changed.stdout + changed.stderr
