"""The "Add a stage" example (docs/add_a_stage.md) runs as written: its module and its entry point, installed as a tiny
distribution on sys.path, give a verifier every claim method takes with its own options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope import plugins
from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method

SECTION = (Path(__file__).resolve().parents[1] / "docs" / "add_a_stage.md").read_text(encoding="utf-8")
SOURCE = "The museum opens at nine. The cafe sells tea."
TARGET = "The museum opens at nine. The cafe sells coffee and tea."


@pytest.fixture
def installed(tmp_path, monkeypatch):
    (module,) = re.findall(r"```python\n(.*?)```", SECTION, re.S)
    (toml,) = re.findall(r"```toml\n(.*?)```", SECTION, re.S)
    package = tmp_path / "my_checks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "overlap.py").write_text(module)
    info = tmp_path / "my_checks-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-checks\nVersion: 0.1\n")
    entry = toml.split('[project.entry-points."halluscope.stages"]', 1)[1].strip()
    (info / "entry_points.txt").write_text(f"[halluscope.stages]\n{entry.replace(chr(34), '')}\n")  # TOML -> INI
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.reset()
    yield
    plugins.reset()


@pytest.mark.parametrize("name", ["dcr", "factscore", "probe", "dove"])
def test_the_readme_verifier_runs_on_every_claim_method_with_its_own_option(installed, name):
    extra = {"dove": {"sorter": "position", "decomposer": "sentences"}}.get(name, {})

    def labels(min_overlap: float) -> list[str]:
        method = get_method(name, llm=LLM(FakeModel(), cache=None), verifier="overlap",
                            **{"verifier.min_overlap": min_overlap}, **extra)
        method.make_decomposer = lambda: method.build_stage("decomposer", "sentences")  # no LLM call
        report = method.check(SOURCE, TARGET)
        assert report.usage.calls == 0
        return [v.label for v in report.verdicts]

    assert labels(0.8) == ["supported", "unsupported"]  # "coffee" and "and": 4 of 6 words
    assert labels(0.6) == ["supported", "supported"]
    with pytest.raises(OptionsError, match="verifier stage 'overlap'.*min_overlap"):
        labels(1.5)


def test_the_readme_verifier_is_listed_with_its_options(installed):
    result = CliRunner().invoke(app, ["stages", "verifier", "overlap"])
    assert result.exit_code == 0
    assert "min_overlap : float = 0.8" in result.output
