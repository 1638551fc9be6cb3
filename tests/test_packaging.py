"""Packaging conventions: one version (from package metadata), --version, python -m halluscope, py.typed, the
license, the core install without the bench-only libraries, one spelling per flag, shell completion, and the
optional Finding.confidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.cli.main import app

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SRC = REPO / "src"


def run_python(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120, **kwargs)


def test_version_comes_from_package_metadata_only():
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("halluscope")
    except PackageNotFoundError:
        installed = "0+unknown"
    assert halluscope.__version__ == installed
    hard_coded = [p for p in SRC.rglob("*.py") if f'"{PYPROJECT["project"]["version"]}"' in p.read_text("utf-8")]
    assert hard_coded == []  # pyproject.toml is the one place the version is written


def test_version_flag_and_module_entry_point(tmp_path):
    out = run_python("-m", "halluscope", "--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"halluscope {halluscope.__version__}"
    listed = run_python("-m", "halluscope", "methods", cwd=tmp_path)
    assert listed.returncode == 0 and "rouge" in listed.stdout
    assert CliRunner().invoke(app, ["-V"]).output.strip() == f"halluscope {halluscope.__version__}"


def test_typed_marker_and_license():
    assert (SRC / "halluscope" / "py.typed").is_file()
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert (REPO / "CHANGELOG.md").is_file()


def test_dev_and_peers_are_dependency_groups_not_extras():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "dev" not in extras and "peers" not in extras
    assert {"dev", "peers"} <= set(PYPROJECT["dependency-groups"])
    for command in ((REPO / ".ci" / "run").read_text(), (REPO / "README.md").read_text()):
        assert "--group dev" in command and "pip>=25.1" in command  # pip reads groups from 25.1 on


BENCH_ONLY = ("sklearn", "matplotlib", "rouge_score")


def test_core_install_has_no_bench_only_library():
    core = " ".join(PYPROJECT["project"]["dependencies"]).lower()
    for dist in ("scikit-learn", "matplotlib", "rouge-score", "pandas", "torch"):
        assert dist not in core
    assert {"scikit-learn", "matplotlib", "rouge-score"} <= {
        d.split(">")[0].split("=")[0] for d in PYPROJECT["project"]["optional-dependencies"]["bench"]
    }


BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_check_rouge_runs_without_the_bench_libraries(tmp_path):
    """As after `pip install halluscope` (no extras): the bench-only libraries cannot be imported, and the CLI's
    `check --method rouge` still works, with the same score as with them."""
    (tmp_path / "s.txt").write_text("The cat sat on the mat. It was a warm day in June.", encoding="utf-8")
    (tmp_path / "t.txt").write_text("The cat sat on the mat in June.", encoding="utf-8")
    code = BLOCKER.format(blocked=BENCH_ONLY) + (
        "from halluscope.cli.main import app\n"
        "app(['check', '--method', 'rouge', '-s', 's.txt', '-t', 't.txt', '--json'])\n"
    )
    blocked = run_python("-c", code, cwd=tmp_path)
    assert blocked.returncode == 0, blocked.stderr[-2000:]
    free = run_python(
        "-m", "halluscope", "check", "--method", "rouge", "-s", "s.txt", "-t", "t.txt", "--json", cwd=tmp_path
    )
    assert json.loads(blocked.stdout)["score"] == json.loads(free.stdout)["score"] > 0.5


def test_bench_code_without_its_extra_names_the_extra(tmp_path):
    code = BLOCKER.format(blocked=BENCH_ONLY) + (
        "import numpy as np\nfrom halluscope.bench.combiner import cv_folds\n"
        "try:\n    cv_folds(np.array([0, 1, 0, 1]), 'binary', None, 2, 0)\n"
        "except ImportError as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = run_python("-c", code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "MissingExtraError" in out.stdout and "pip install 'halluscope[bench]'" in out.stdout


def _options(command: list[str]) -> dict[str, bool]:
    """Every option spelling of a subcommand -> hidden?"""
    import typer

    cmd = typer.main.get_command(app)
    for name in command:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return {opt: bool(getattr(p, "hidden", False)) for p in cmd.params for opt in getattr(p, "opts", [])}


@pytest.mark.parametrize(
    "command",
    [
        ["bench"],
        ["bench-sweep"],
        ["reproduce"],
        ["generate", "perturb"],
        ["generate", "inject"],
        ["generate", "montage"],
        ["improve"],
    ],
)
def test_one_visible_spelling_for_the_output_flag(command):
    options = _options(command)
    assert options.get("--output") is False and options.get("-O") is False
    assert options.get("--out", True) is True  # the old spelling, where it existed, is hidden


def test_short_d_means_dataset_wherever_it_is_visible():
    for command in (["bench"], ["bench-sweep"], ["reproduce"], ["generate", "montage"], ["generate", "perturb"]):
        options = _options(command)
        if options.get("-d") is False:
            assert options.get("--dataset") is False, command
    assert _options(["generate", "montage"])["-d"] is True  # montage's old -d (= --difficulty) is hidden
    perturb = _options(["generate", "perturb"])
    assert perturb["-d"] is False and perturb["--input"] is True and perturb["-i"] is True  # old spelling, hidden


def test_old_out_spelling_and_new_one_agree_or_fail(tmp_path):
    clash = CliRunner().invoke(app, ["generate", "perturb", "-i", "x.jsonl", "--output", "a.jsonl", "--out", "b.jsonl"])
    assert clash.exit_code == 2 and "disagree" in clash.output
    missing = CliRunner().invoke(app, ["generate", "perturb", "-i", "x.jsonl"])
    assert missing.exit_code == 2 and "--output is required" in missing.output
    no_data = CliRunner().invoke(app, ["generate", "perturb", "-O", "a.jsonl"])
    assert no_data.exit_code == 2 and "--dataset is required" in no_data.output


def test_cache_flag_has_both_spellings_and_overrides_the_environment(monkeypatch):
    from halluscope.cli.common import make_config

    monkeypatch.setenv("HALLUSCOPE_CACHE", "false")
    assert make_config(no_cache=None).cache is False  # neither flag: the environment decides
    assert make_config(no_cache=False).cache is True  # --cache
    monkeypatch.delenv("HALLUSCOPE_CACHE")
    assert make_config(no_cache=True).cache is False  # --no-cache
    assert {"--cache", "--no-cache"} <= set(_options(["check"])) | {
        o
        for p in __import__("typer").main.get_command(app).commands["check"].params  # type: ignore[attr-defined]
        for o in getattr(p, "secondary_opts", [])
    }


def test_shell_completion_is_on():
    out = CliRunner().invoke(app, ["--help"]).output
    assert "--install-completion" in out and "--show-completion" in out


def test_finding_confidence_is_optional_and_round_trips():
    from halluscope.records import Finding, Report, Span

    plain = Finding(description="x")
    assert plain.confidence is None
    report = Report(
        method="m",
        score=0.5,
        findings=[plain, Finding(description="y", target_spans=[Span(start=0, end=1)], confidence=0.75)],
    )
    again = Report.model_validate_json(report.model_dump_json())
    assert again == report and again.findings[1].confidence == 0.75
    with pytest.raises(ValueError):
        Finding(description="z", confidence=1.5)


def test_probe_findings_carry_the_judges_confidence():
    from halluscope.methods.probe import probe_finding
    from halluscope.records import Claim, Verdict

    claim = Claim(text="c", id="c1")
    half = probe_finding(Verdict(claim=claim, label="unsupported", score=0.25, reason="r"))
    assert half.confidence == pytest.approx(0.75)  # 3 of 4 judge votes against the best passage
    none_found = probe_finding(Verdict(claim=claim, label="unsupported", score=0.0, reason="no evidence"))
    assert none_found.confidence == 1.0
