"""Every option and flag has limits: counts that multiply work are bounded, numbers are finite and in range,
and an output path that cannot be a file is refused (exit 2, a message, no traceback) before any work."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.methods import get_method
from halluscope.options import OptionsError


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def pair(tmp_path):
    src = tmp_path / "s.txt"
    src.write_text("The cat sat on the mat.", encoding="utf-8")
    return str(src), str(src)


@pytest.mark.parametrize(
    ("method", "options", "says"),
    [
        ("probe", {"samples": 100_000}, "samples: Input should be less than or equal to 20 (allowed: 1 to 20)"),
        ("probe", {"judges": ["m"] * 9}, "judges"),
        ("probe", {"judges": [""]}, "judges.0"),
        ("probe", {"consensus": math.nan}, "consensus: Input should be a finite number"),
        ("probe", {"sample_temperature": math.inf}, "sample_temperature: Input should be a finite number"),
        ("probe", {"max_evidence": 10_000}, "max_evidence"),
        ("probe", {"context_sentences": 10_000}, "context_sentences"),
        ("dcr", {"top_k": 1_000_000}, "top_k: Input should be less than or equal to 50 (allowed: 1 to 50)"),
        ("dcr", {"window": 500}, "(allowed: 0 to 20)"),
        ("dcr", {"batch_size": 10_000}, "(allowed: 1 to 64)"),
        ("dove", {"batch_size": 0}, "(allowed: 1 to 64)"),
        ("factscore", {"dedup_threshold": math.nan}, "dedup_threshold: Input should be a finite number"),
        ("factscore", {"dedup_threshold": 101}, "(allowed: 0 to 100)"),
        ("improve", {"rounds": 11}, "(allowed: 1 to 10)"),
        ("localize", {"filter_threshold": 2.0}, "(allowed: 0.0 to 1.0)"),
        ("localize", {"filter_threshold": -math.inf}, "filter_threshold"),
        ("geval", {"max_tokens": 10**9}, "max_tokens"),
        ("embed", {"flag_below": math.nan}, "flag_below"),
    ],
)
def test_out_of_range_method_options_are_refused_with_the_allowed_range(method, options, says) -> None:
    with pytest.raises(OptionsError) as err:
        get_method(method, **options)
    assert says in str(err.value)


def test_limits_leave_the_papers_settings_valid() -> None:
    get_method("probe", samples=4, judges=["a", "b", "c", "d"], consensus=0.75, batch_size=8)
    get_method("dcr", top_k=3, window=1, batch_size=16)
    get_method("factscore", deduplicator="fuzzy", dedup_threshold=85.0)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--threshold", "2"], "--threshold must be a number from 0 to 1"),
        (["--threshold", "nan"], "--threshold must be a number from 0 to 1"),
        (["--fail-under", "inf"], "--fail-under must be a number from 0 to 1"),
        (["--fail-under", "-0.5"], "--fail-under must be a number from 0 to 1"),
        (["--concurrency", "0"], "--concurrency"),
        (["--method", "probe", "-o", "samples=100000"], "allowed: 1 to 20"),
        (["--method", "probe", "-o", "consensus=NaN"], "consensus: Input should be a finite number"),
    ],
)
def test_check_refuses_bad_numbers_with_exit_2(runner, pair, flags, says) -> None:
    src, tgt = pair
    result = runner.invoke(app, ["check", "-s", src, "-t", tgt, "--method", "rouge", *flags])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "Traceback" not in result.output


def test_html_to_a_directory_is_refused_before_the_check_runs(runner, pair, tmp_path, monkeypatch) -> None:
    import halluscope.methods.base as method_base

    ran = []
    monkeypatch.setattr(method_base.Method, "check", lambda self, s, t: ran.append(1))
    src, tgt = pair
    result = runner.invoke(app, ["check", "-s", src, "-t", tgt, "--method", "rouge", "--html", str(tmp_path)])
    assert result.exit_code == 2
    assert f"--html {tmp_path} is a directory" in result.output
    assert isinstance(result.exception, SystemExit)  # an exit, not an IsADirectoryError
    missing = runner.invoke(
        app, ["check", "-s", src, "-t", tgt, "--method", "rouge", "--html", str(tmp_path / "no" / "r.html")]
    )
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert ran == []


def test_html_to_a_file_still_works(runner, pair, tmp_path) -> None:
    src, tgt = pair
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["check", "-s", src, "-t", tgt, "--method", "rouge", "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!")


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        (["serve"], ["--timeout", "nan"]),
        (["serve"], ["--queue-timeout", "inf"]),
        (["serve"], ["--max-in-flight", "0"]),
        (["serve"], ["--port", "70000"]),
        (["bench", "--method", "rouge", "--dataset", "x"], ["--bootstrap", "-1"]),
        (["bench", "--method", "rouge", "--dataset", "x"], ["--limit", "0"]),
        (["bench", "--method", "rouge", "--dataset", "x"], ["--actor-cpus", "nan"]),
    ],
)
def test_other_commands_refuse_bad_numbers_with_exit_2(runner, command, flags) -> None:
    result = runner.invoke(app, [*command, *flags])
    assert result.exit_code == 2, result.output
    assert flags[0] in result.output  # refused for this flag, not for another reason
    assert "Traceback" not in result.output


def test_improve_output_to_a_directory_is_refused_with_exit_2(runner, pair, tmp_path) -> None:
    src, tgt = pair
    result = runner.invoke(app, ["improve", "-s", src, "-t", tgt, "--output", str(tmp_path)])
    assert result.exit_code == 2 and f"--output {tmp_path} is a directory" in result.output
