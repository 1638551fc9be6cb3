"""Every test module imports without the optional extras: one that needs an extra skips with the reason (as the
README says), it never fails to import. The suite is collected in a fresh process with every extra hidden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_test_module_is_collected_without_the_extras():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.without_extras", "-p", "no:cacheprovider"]
        + ["-p", "no:xdist", str(REPO / "tests")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERROR")]
    assert run.returncode == 0 and not errors, "\n".join(errors) or run.stdout[-3000:] + run.stderr[-2000:]


def test_the_plugin_hides_the_extras():
    code = (
        "import importlib.util, tests.without_extras\n"
        "print(importlib.util.find_spec('sklearn'), importlib.util.find_spec('json') is not None)\n"
        "try:\n    import fastapi\nexcept ModuleNotFoundError as exc:\n    print(exc.name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.split()
    assert out == ["None", "True", "fastapi"]
