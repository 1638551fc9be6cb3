"""The README's config snippet, exactly as written, works as ``halluscope.toml`` and inside ``pyproject.toml``:
the settings it states are the settings a check gets, and its method options are valid options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]


def readme_config_snippet() -> str:
    """The one ```toml block of the README's "Configuration file" section, as written."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configuration file\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```toml\n(.*?)^```$", section, flags=re.S | re.M)
    assert len(blocks) == 1, blocks
    return blocks[0]


SNIPPET = readme_config_snippet()
FORMS = {
    "halluscope.toml": ("halluscope.toml", SNIPPET),
    "pyproject.toml alone": ("pyproject.toml", SNIPPET),
    "pyproject.toml of a project": ("pyproject.toml", '[project]\nname = "mine"\nversion = "0.1"\n\n' + SNIPPET),
}


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("HALLUSCOPE_CONFIG", "HALLUSCOPE_MODEL", "HALLUSCOPE_METHOD", "HALLUSCOPE_THRESHOLD"):
        monkeypatch.delenv(key, raising=False)
    return tmp_path


@pytest.mark.parametrize("form", list(FORMS))
def test_the_readme_config_snippet_gives_the_settings_it_states(here, form):
    from halluscope.cli.main import app
    from halluscope.config import Config, config_file
    from halluscope.methods import get_method
    from halluscope.records import Report

    name, text = FORMS[form]
    (here / name).write_text(text, encoding="utf-8")
    assert config_file() is not None and config_file()[0] == here / name
    config = Config()
    assert (config.method, config.threshold, config.model) == ("probe", 0.6, "qwen2.5:7b")
    assert config.options == {"probe": {"judges": ["qwen2.5:7b", "llama3.1:8b"]}}
    probe = get_method("probe", config=config)  # where "judges = 1" failed: bad option(s) for probe
    assert probe.opts.judges == ["qwen2.5:7b", "llama3.1:8b"] and probe.threshold == 0.6
    (here / "s.txt").write_text("The cat sat on the mat.", encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "--method", "rouge", "-s", "s.txt", "-t", "s.txt", "--format", "json"])
    assert result.exit_code == 0, result.output  # where the table in halluscope.toml failed: key 'tool'
    assert Report.model_validate_json(result.output).threshold == 0.6


def test_halluscope_toml_takes_its_keys_at_the_top_level_or_in_the_table_but_not_both(here):
    from halluscope.config import Config, ConfigFileError

    (here / "halluscope.toml").write_text('method = "gate"\n', encoding="utf-8")
    assert Config().method == "gate"
    (here / "halluscope.toml").write_text('threshold = 0.5\n\n[tool.halluscope]\nmethod = "gate"\n', encoding="utf-8")
    with pytest.raises(ConfigFileError, match=r"top level or in one \[tool.halluscope\] table"):
        Config()
    (here / "halluscope.toml").write_text("[tool.other]\nx = 1\n", encoding="utf-8")
    with pytest.raises(ConfigFileError, match=r"top level or in one \[tool.halluscope\] table"):
        Config()
