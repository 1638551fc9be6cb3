"""The ``halluscope`` CLI: ``methods`` and ``check``, including clear errors on bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import halluscope
import halluscope.methods.base as method_base
from halluscope.cli.main import app
from halluscope.llm import LLMError
from halluscope.methods import get_method
from halluscope.records import Report
from tests.conftest import fake_llm

SOURCE = "The council approved the budget on Tuesday. Bus fares will stay the same."
TARGET = "The council approved the budget on Friday."


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def files(tmp_path):
    source = tmp_path / "source.txt"
    target = tmp_path / "target.txt"
    source.write_text(SOURCE, encoding="utf-8")
    target.write_text(TARGET, encoding="utf-8")
    return source, target


@pytest.fixture
def scripted_llm(monkeypatch):
    """Route methods that build their LLM from the config to a scripted fake model."""

    def install(*replies):
        monkeypatch.setattr(method_base, "get_llm", lambda config: fake_llm(*replies))

    return install


def test_methods_lists_builtins(runner) -> None:
    result = runner.invoke(app, ["methods"])
    assert result.exit_code == 0
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert "[LLM]" in lines["geval"] and "[no LLM]" in lines["rouge"]


def test_check_with_rouge_prints_score(runner, files) -> None:
    source, target = files
    result = runner.invoke(app, ["check", "--source", str(source), "--target", str(target), "--method", "rouge"])
    assert result.exit_code == 0, result.output
    assert "rouge (no LLM): score" in result.output and "rouge1=" not in result.output  # internals: --details
    detailed = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge", "--details"])
    assert "rouge1=" in detailed.output


def test_check_json_is_a_full_report(runner, files) -> None:
    source, target = files
    result = runner.invoke(
        app,
        [
            "check",
            "-s",
            str(source),
            "-t",
            str(target),
            "--method",
            "rouge",
            "--json",
            "--threshold",
            "0.99",
            "-o",
            "variant=rouge1",
        ],
    )
    assert result.exit_code == 1, result.output  # inconsistent
    report = Report.model_validate_json(result.output)
    assert report.method == "rouge" and report.threshold == 0.99 and report.label == "inconsistent"
    assert report.score == report.subscores["rouge1"]


def test_check_default_method_with_an_llm(runner, files, scripted_llm) -> None:
    """The default: a claim method, verdict first (one yes/no reply per sentence, the flagged one explained)."""
    explanation = {
        "reason": "The source says Tuesday, not Friday.",
        "evidence": "on Tuesday",
        "contradicted": True,
        "fix": "The council approved the budget on Tuesday.",
    }
    # after the score and the explanation: does the quote, then the closest sentence, contradict the claim (yes,
    # no), and the fix re-verified by the same short reply (yes)
    scripted_llm("No", json.dumps(explanation), "Yes", "No", "Yes")
    source, target = files
    result = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--json"])
    assert result.exit_code == 1, result.output  # 0.25 < geval's threshold 0.5: inconsistent
    report = json.loads(result.output)
    assert report["method"] == halluscope.DEFAULT_METHOD and report["score"] == 0.0 and report["usage"]["calls"] == 5
    (finding,) = report["findings"]
    assert finding["target_spans"] == [{"start": 0, "end": len(TARGET)}] and finding["fix"] == explanation["fix"]
    assert finding["fix_verified"] is True and finding["evidence_relation"] == "contradicts"
    assert finding["evidence"][0]["text"] == "on Tuesday" and finding["evidence"][0]["span"] is not None


def test_check_reads_stdin(runner, files) -> None:
    source, _ = files
    result = runner.invoke(
        app, ["check", "-s", str(source), "-t", "-", "--method", "rouge", "--json"], input=TARGET.encode()
    )
    assert result.exit_code == 0, result.output
    expected = get_method("rouge").check(SOURCE, TARGET).score  # the target came from stdin, whole
    assert Report.model_validate_json(result.output).score == expected > 0


def test_fail_under_exits_1(runner, files) -> None:
    source, target = files
    args = ["check", "-s", str(source), "-t", str(target), "--method", "rouge"]
    assert runner.invoke(app, args + ["--fail-under", "0.99"]).exit_code == 1
    assert runner.invoke(app, args + ["--fail-under", "0.1"]).exit_code == 0


def test_unscored_report_is_shown_with_its_reason(runner, files, scripted_llm) -> None:
    scripted_llm("no idea", "still no idea")
    source, target = files
    result = runner.invoke(app, ["check", "-s", str(source), "-t", str(target)])
    assert result.exit_code == 3  # could not score
    assert "unscored" in result.output and "could not score" in result.output
    failing = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--fail-under", "0"])
    assert failing.exit_code == 3  # an unscored pair never passes a gate


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"  \n\t ", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
        ("caf\u00e9".encode("latin-1"), "not valid UTF-8"),
    ],
)
def test_bad_target_file_is_a_clear_error(runner, files, content: bytes, message: str) -> None:
    source, target = files
    target.write_bytes(content)
    result = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge"])
    assert result.exit_code == 2
    assert message in result.output and "target" in result.output
    assert "Traceback" not in result.output


def test_missing_file_directory_and_double_stdin(runner, files, tmp_path) -> None:
    source, target = files
    missing = runner.invoke(app, ["check", "-s", str(tmp_path / "nope.txt"), "-t", str(target)])
    assert missing.exit_code == 2 and "source file not found" in missing.output
    directory = runner.invoke(app, ["check", "-s", str(tmp_path), "-t", str(target)])
    assert directory.exit_code == 2 and "is a directory" in directory.output
    both = runner.invoke(app, ["check", "-s", "-", "-t", "-"], input=b"text")
    assert both.exit_code == 2 and "standard input" in both.output


def test_empty_stdin_is_an_error(runner, files) -> None:
    source, _ = files
    result = runner.invoke(app, ["check", "-s", str(source), "-t", "-", "--method", "rouge"], input=b"")
    assert result.exit_code == 2 and "standard input" in result.output and "empty" in result.output


def test_utf8_bom_is_accepted(runner, files) -> None:
    source, target = files
    target.write_bytes(b"\xef\xbb\xbf" + TARGET.encode())
    result = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge", "--json"])
    assert result.exit_code == 0, result.output


def test_unknown_method_and_bad_options(runner, files) -> None:
    source, target = files
    unknown = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", "nope"])
    assert unknown.exit_code == 2 and "unknown method 'nope'" in unknown.output
    bad_value = runner.invoke(
        app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge", "-o", "variant=x"]
    )
    assert bad_value.exit_code == 2 and "unknown rouge variant" in bad_value.output
    bad_key = runner.invoke(
        app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge", "-o", "colour=red"]
    )
    assert bad_key.exit_code == 2 and "colour" in bad_key.output
    malformed = runner.invoke(
        app, ["check", "-s", str(source), "-t", str(target), "--method", "rouge", "-o", "novalue"]
    )
    assert malformed.exit_code == 2 and "KEY=VALUE" in malformed.output


def test_backend_that_cannot_be_built_fails_loudly(runner, files, monkeypatch) -> None:
    def missing(config):
        raise LLMError("the embedded model needs llama-cpp-python: pip install 'halluscope[embedded]'")

    monkeypatch.setattr(method_base, "get_llm", missing)
    source, target = files
    result = runner.invoke(app, ["check", "-s", str(source), "-t", str(target)])
    assert result.exit_code == 2 and "pip install" in result.output


def test_model_without_endpoint_is_a_clear_error(runner, files, monkeypatch) -> None:
    for var in ("OPENAI_BASE_URL", "HALLUSCOPE_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    source, target = files
    result = runner.invoke(app, ["check", "-s", str(source), "-t", str(target), "--model", "gpt-4o-mini"])
    assert result.exit_code == 2 and "--base-url" in result.output
