"""The config file ([tool.halluscope] in pyproject.toml, halluscope.toml, or $HALLUSCOPE_CONFIG) read by the typed
Config, and its precedence: code/CLI flags > HALLUSCOPE_* environment > file > defaults."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from halluscope.config import Config, ConfigFileError, config_file


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in (
        "HALLUSCOPE_CONFIG",
        "HALLUSCOPE_MODEL",
        "HALLUSCOPE_MAX_CONCURRENCY",
        "HALLUSCOPE_CACHE",
        "HALLUSCOPE_OTEL",
        "HALLUSCOPE_METHOD",
        "HALLUSCOPE_THRESHOLD",
    ):
        monkeypatch.delenv(key, raising=False)
    return tmp_path


def test_no_file_means_defaults(here):
    assert config_file() is None
    assert Config().max_concurrency == 8


def test_pyproject_table_is_read_and_a_pyproject_without_it_is_ignored(here):
    (here / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    assert config_file() is None
    (here / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.halluscope]\nmodel = "qwen2.5:7b"\nmax_concurrency = 3\notel = true\n',
        encoding="utf-8",
    )
    config = Config()
    assert (config.model, config.max_concurrency, config.otel) == ("qwen2.5:7b", 3, True)


def test_halluscope_toml_comes_before_pyproject(here):
    (here / "pyproject.toml").write_text('[tool.halluscope]\nmodel = "from-pyproject"\n', encoding="utf-8")
    (here / "halluscope.toml").write_text('model = "from-halluscope-toml"\ncache = false\n', encoding="utf-8")
    assert Config().model == "from-halluscope-toml" and Config().cache is False


def test_named_file_comes_first(here, monkeypatch, tmp_path_factory):
    other = tmp_path_factory.mktemp("elsewhere") / "team.toml"
    other.write_text('model = "named"\n', encoding="utf-8")
    (here / "halluscope.toml").write_text('model = "local"\n', encoding="utf-8")
    monkeypatch.setenv("HALLUSCOPE_CONFIG", str(other))
    assert Config().model == "named"
    monkeypatch.setenv("HALLUSCOPE_CONFIG", str(here / "missing.toml"))
    with pytest.raises(ConfigFileError, match="no such file"):
        Config()


def test_precedence_code_over_env_over_file_over_defaults(here, monkeypatch):
    (here / "halluscope.toml").write_text("max_concurrency = 3\ntemperature = 0.5\n", encoding="utf-8")
    assert Config().max_concurrency == 3 and Config().temperature == 0.5 and Config().max_retries == 4
    monkeypatch.setenv("HALLUSCOPE_MAX_CONCURRENCY", "5")
    assert Config().max_concurrency == 5 and Config().temperature == 0.5
    assert Config(max_concurrency=7).max_concurrency == 7
    assert Config().with_overrides(max_concurrency=9).max_concurrency == 9


def test_cli_flags_over_env_over_file(here, monkeypatch):
    from halluscope.cli.common import make_config

    (here / "halluscope.toml").write_text('max_concurrency = 3\nmodel = "file-model"\n', encoding="utf-8")
    assert make_config().max_concurrency == 3 and make_config().model == "file-model"
    monkeypatch.setenv("HALLUSCOPE_MODEL", "env-model")
    assert make_config().model == "env-model"
    assert make_config(model="flag-model", concurrency=2).model == "flag-model"
    assert make_config(concurrency=2).max_concurrency == 2


def test_unknown_key_and_broken_file_are_refused(here):
    (here / "halluscope.toml").write_text('modle = "typo"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="modle"):
        Config()
    (here / "halluscope.toml").write_text('model = "unclosed\n', encoding="utf-8")
    with pytest.raises(ConfigFileError, match="cannot read"):
        Config()


def test_cli_reports_a_bad_config_file(here):
    from halluscope.cli.main import app

    (here / "halluscope.toml").write_text('modle = "typo"\n', encoding="utf-8")
    (here / "s.txt").write_text("The cat sat.", encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "--method", "rouge", "-s", "s.txt", "-t", "s.txt"])
    assert result.exit_code == 2 and "bad configuration" in result.output and "modle" in result.output


SOURCE = "The council approved the budget on Tuesday. Bus fares will stay the same."
TARGET = "The council approved the budget on Tuesday with 15 votes."


def test_the_file_sets_method_threshold_and_per_method_options(here):
    import halluscope
    from halluscope.cli.main import app
    from halluscope.records import Report

    (here / "pyproject.toml").write_text(
        '[tool.halluscope]\nmethod = "gate"\nthreshold = 0.8\n\n'
        '[tool.halluscope.options.gate]\ntop_k = 2\nuncertain = "unscored"\n',
        encoding="utf-8",
    )
    report = halluscope.check(SOURCE, TARGET)  # no method named: the file's
    assert report.method == "gate" and report.threshold == 0.8
    from halluscope.methods import get_method

    gate = get_method("gate")
    assert (gate.opts.top_k, gate.opts.uncertain, gate.opts.threshold) == (2, "unscored", 0.8)
    assert get_method("gate", top_k=4).opts.top_k == 4  # explicit options win over the file's
    (here / "s.txt").write_text(SOURCE, encoding="utf-8")
    (here / "t.txt").write_text(TARGET, encoding="utf-8")
    flagged = CliRunner().invoke(app, ["check", "-s", "s.txt", "-t", "t.txt", "--format", "json"])
    assert Report.model_validate_json(flagged.output).threshold == 0.8 and flagged.exit_code == 1
    flag = CliRunner().invoke(app, ["check", "-s", "s.txt", "-t", "t.txt", "--format", "json", "--threshold", "0.3"])
    assert Report.model_validate_json(flag.output).threshold == 0.3  # the flag wins over the file
    assert halluscope.check(SOURCE, TARGET, method="rouge").threshold == 0.8  # one threshold for every method


def test_errors_name_the_key_and_the_file(here, monkeypatch):
    from halluscope.cli.main import app
    from halluscope.config import ConfigError

    (here / "halluscope.toml").write_text('threshold = "high"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Config()
    message = str(caught.value)
    assert f"key 'threshold' in {here / 'halluscope.toml'}" in message and "'high'" in message
    assert "pydantic" not in message and "errors.pydantic.dev" not in message
    (here / "halluscope.toml").write_text("threshold = 0.5\n", encoding="utf-8")
    monkeypatch.setenv("HALLUSCOPE_MAX_CONCURRENCY", "many")
    with pytest.raises(ConfigError, match="environment variable HALLUSCOPE_MAX_CONCURRENCY"):
        Config()
    monkeypatch.delenv("HALLUSCOPE_MAX_CONCURRENCY")
    (here / "halluscope.toml").write_text("[options.gate]\ntop_kk = 2\n", encoding="utf-8")
    (here / "s.txt").write_text(SOURCE, encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "--method", "gate", "-s", "s.txt", "-t", "s.txt"])
    assert result.exit_code == 2 and "top_kk" in result.output and str(here / "halluscope.toml") in result.output
