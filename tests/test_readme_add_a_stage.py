"""The "Add a stage" example (docs/add_a_stage.md) works as written: its module and its entry point, built into a
distribution and installed with pip (offline: no index, no build isolation, no dependencies), give a verifier that
the real CLI (`python -m halluscope`, a subprocess) takes on every claim method, with its own options, and with no
model: the model configured cannot even be built."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import halluscope

DOC = (Path(__file__).resolve().parents[1] / "docs" / "add_a_stage.md").read_text(encoding="utf-8")
SOURCE = "The museum opens at nine. The cafe sells tea."
TARGET = "The museum opens at nine. The cafe sells coffee and tea."
UNBUILDABLE = "fake:/nonexistent/halluscope-no-such-script.json"  # a model that fails if anything builds it
CLAIM_METHODS = {"dcr", "factscore", "probe", "dove"}


def block(language: str) -> str:
    (code,) = re.findall(rf"```{language}\n(.*?)```", DOC, re.S)
    return code


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The my-checks distribution of the doc, built from a pyproject and pip-installed into a target folder."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed: pip cannot build the plugin without network")
    root = tmp_path_factory.mktemp("plugin")
    package = root / "my-checks" / "src" / "my_checks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "overlap.py").write_text(block("python"))
    entry_points = block("toml").split("\n", 1)[1]  # after the doc's comment line
    (root / "my-checks" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "my-checks"\nversion = "0.1"\n\n{entry_points}'
    )
    target = root / "site"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(root / "my-checks"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (target / "my_checks" / "overlap.py").is_file()
    assert "halluscope.stages" in next(target.glob("my_checks-0.1.dist-info")).joinpath("entry_points.txt").read_text()
    return target


def run_cli(installed: Path, workdir: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` from the doc, run as ``python -m halluscope ...`` with the plugin on the path and an
    unbuildable model configured (no config file in ``workdir``)."""
    args = shlex.split(command)
    assert args[0] == "halluscope"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HALLUSCOPE_")}
    src = Path(halluscope.__file__).resolve().parents[1]
    env.update(
        PYTHONPATH=os.pathsep.join([str(installed), str(src)]), HALLUSCOPE_MODEL=UNBUILDABLE, HALLUSCOPE_CACHE="false"
    )
    return subprocess.run(
        [sys.executable, "-m", "halluscope", *args[1:]],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def doc_commands() -> list[str]:
    return [line.strip() for line in block("bash").splitlines() if line.strip()]


def test_the_doc_runs_the_plugin_on_every_claim_method():
    methods = {re.search(r"--method (\w+)", c).group(1) for c in doc_commands() if " check " in f" {c} "}
    assert methods == CLAIM_METHODS


@pytest.mark.parametrize("command", [c for c in doc_commands() if c.startswith("halluscope check")])
def test_the_installed_plugin_runs_from_the_cli_with_no_model(installed, tmp_path, command):
    (tmp_path / "source.txt").write_text(SOURCE)
    (tmp_path / "summary.txt").write_text(TARGET)
    # bm25: dove's position sorter would otherwise load the embedding model where it is installed (slow)
    done = run_cli(installed, tmp_path, f"{command} -o retriever=bm25 --format json --no-progress")
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == (0 if report["label"] == "consistent" else 1), done.stderr  # 2: a set-up error
    assert report["unscored_reason"] is None and report["model"] is None and report["usage"]["calls"] == 0
    assert report["details"]["stages"]["verifier"] == "overlap"
    assert [c["text"] for c in report["claims"]] == ["The museum opens at nine.", "The cafe sells coffee and tea."]
    reasons = [v["reason"] for v in report["verdicts"]]
    assert reasons == ["100% of its words occur", "67% of its words occur"]  # the plugin's own wording
    labels = [v["label"] for v in report["verdicts"]]
    if "verifier.min_overlap=0.6" in command:  # the plugin's option reaches it: 67% now suffices
        assert labels == ["supported", "supported"] and report["score"] == 1.0
    else:
        assert labels == ["supported", "unsupported"] and report["score"] == 0.5


def test_the_installed_plugin_is_listed_with_its_options(installed, tmp_path):
    (command,) = [c for c in doc_commands() if c.startswith("halluscope stages")]
    done = run_cli(installed, tmp_path, command)
    assert done.returncode == 0, done.stderr
    assert "overlap" in done.stdout and "min_overlap : float = 0.8" in done.stdout
    assert "(no LLM)" in done.stdout.splitlines()[0]  # its uses_llm = False
