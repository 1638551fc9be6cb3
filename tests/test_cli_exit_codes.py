"""``halluscope check`` as a pipeline step: documented exit codes (one pair and ``--input``), one threshold,
a label that never contradicts the findings, linter-grade output, and ``import halluscope`` exporting its API."""

from __future__ import annotations

import json
import types

import pytest
from typer.testing import CliRunner

import halluscope
import halluscope.methods.base as method_base
from halluscope.cli.check import Texts, line_col, number, report_text
from halluscope.cli.main import app
from halluscope.methods.base import Method
from halluscope.records import Evidence, Finding, Report, Span
from tests.conftest import fake_llm

SOURCE = "The council approved the budget on Tuesday. Bus fares will stay the same."
CONSISTENT = "The council approved the budget on Tuesday."
INCONSISTENT = "The council approved the budget on Friday."


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def pair(tmp_path):
    def write(target: str) -> list[str]:
        (tmp_path / "source.txt").write_text(SOURCE)
        (tmp_path / "target.txt").write_text(target)
        return ["check", "-s", str(tmp_path / "source.txt"), "-t", str(tmp_path / "target.txt")]

    return write


def test_one_pair_exits_0_consistent_1_inconsistent_2_usage_3_unscored(runner, pair, monkeypatch) -> None:
    assert runner.invoke(app, pair(CONSISTENT) + ["--method", "gate"]).exit_code == 0
    flagged = runner.invoke(app, pair(INCONSISTENT) + ["--method", "gate"])
    assert flagged.exit_code == 1 and '"Friday"' in flagged.output
    assert runner.invoke(app, pair(INCONSISTENT) + ["--method", "nope"]).exit_code == 2
    assert runner.invoke(app, pair(INCONSISTENT) + ["--format", "xml"]).exit_code == 2
    monkeypatch.setattr(method_base, "get_llm", lambda config: fake_llm("no idea", "still no idea"))
    unscored = runner.invoke(app, pair(CONSISTENT) + ["--method", "geval"])
    assert unscored.exit_code == 3 and "could not score" in unscored.output


def test_formats_json_jsonl_and_the_json_alias(runner, pair) -> None:
    args = pair(INCONSISTENT) + ["--method", "gate"]
    as_json = runner.invoke(app, args + ["--format", "json"])
    alias = runner.invoke(app, args + ["--json"])
    line = runner.invoke(app, args + ["--format", "jsonl"])
    assert len(line.output.strip().splitlines()) == 1
    reports = [Report.model_validate_json(r.output) for r in (as_json, alias, line)]
    assert {r.label for r in reports} == {"inconsistent"} and {r.exit_code for r in (as_json, alias, line)} == {1}
    assert runner.invoke(app, args + ["--json", "--format", "text"]).exit_code == 2


def test_the_threshold_option_and_flag_are_one_setting(runner, pair) -> None:
    args = pair(INCONSISTENT) + ["--method", "gate", "--format", "json"]
    both = runner.invoke(app, args + ["-o", "threshold=0.9", "--threshold", "0.8"])
    assert both.exit_code == 2 and "same setting" in both.output
    same = runner.invoke(app, args + ["-o", "threshold=0.9", "--threshold", "0.9"])
    flag = runner.invoke(app, args + ["--threshold", "0.9"])
    option = runner.invoke(app, args + ["-o", "threshold=0.9"])
    reports = [Report.model_validate_json(r.output) for r in (same, flag, option)]
    assert [r.threshold for r in reports] == [0.9] * 3
    assert reports[0].model_dump(exclude={"elapsed_s"}) == reports[2].model_dump(exclude={"elapsed_s"})
    # the API: threshold= reaches the gate's own option, and labels the report of a method without one
    gate = halluscope.check(SOURCE, INCONSISTENT, method="gate", threshold=0.9)
    assert gate.threshold == 0.9 and gate.label == "inconsistent"
    rouge = halluscope.check(SOURCE, INCONSISTENT, method="rouge", threshold=0.99)
    assert rouge.threshold == 0.99 and rouge.label == "inconsistent" and rouge.score < 0.99
    with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
        halluscope.check(SOURCE, CONSISTENT, method="rouge", threshold=2)


def test_a_report_with_a_finding_is_never_labelled_consistent() -> None:
    finding = Finding(description="d", target_spans=[Span(start=0, end=3)])
    assert Report(method="m", score=0.9).with_threshold(0.5).label == "consistent"
    assert Report(method="m", score=0.9, findings=[finding]).with_threshold(0.5).label == "inconsistent"
    assert Report(method="m", score=0.4).with_threshold(0.5).label == "inconsistent"
    assert Report(method="m", score=0.5).with_threshold(0.5).label == "consistent"  # at the threshold passes
    assert Report(method="m", unscored_reason="x").with_threshold(0.5).label is None


def test_methods_lists_each_default_threshold(runner) -> None:
    listed = runner.invoke(app, ["methods"])
    lines = {line.split()[0]: line for line in listed.output.splitlines() if line.strip()}
    assert "threshold 0.5 (score=label: 1)" in lines["dcr"] and "threshold 0.5 (score=label: 1)" in lines["improve"]
    assert "threshold 0.75" in lines["localize"] and "threshold 0.5" in lines["gate"]
    assert "default threshold: 0.75" in runner.invoke(app, ["methods", "localize"]).output


class Flaky(Method):
    """Unscored on the first try of every target that says "flaky", scored after; never flags anything."""

    name = "flaky"
    uses_llm = False
    tries: dict[str, int] = {}

    async def run(self, source: str, target: str) -> Report:
        Flaky.tries[target] = Flaky.tries.get(target, 0) + 1
        if "flaky" in target and Flaky.tries[target] == 1:
            return Report(method=self.name, unscored_reason="the endpoint was unreachable")
        return Report(method=self.name, score=1.0 if "good" in target else 0.2)


def test_batch_exit_codes_summary_fail_under_and_retry_unscored(runner, tmp_path, monkeypatch) -> None:
    import halluscope.methods as methods

    Flaky.tries = {}
    real = methods.get_method
    monkeypatch.setattr(methods, "get_method", lambda name, **kw: Flaky() if name == "flaky" else real(name, **kw))
    rows = [{"source": SOURCE, "target": t} for t in ("good one", "good flaky")]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [
        "check",
        "-i",
        str(tmp_path / "in.jsonl"),
        "-O",
        str(tmp_path / "out.jsonl"),
        "--method",
        "flaky",
        "--no-progress",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 3, first.output  # a row could not be scored, none inconsistent
    assert "1 scored, 1 unscored, 0 inconsistent" in first.output
    again = runner.invoke(app, args + ["--retry-unscored"])
    assert again.exit_code == 0, again.output
    assert "(1 checked now, 1 resumed)" in again.output and Flaky.tries == {"good one": 1, "good flaky": 2}
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["score"] for r in out] == [1.0, 1.0] and [r["label"] for r in out] == ["consistent"] * 2
    summary = runner.invoke(app, args + ["--retry-unscored", "--fail-under", "0.5", "--format", "json"])
    assert summary.exit_code == 0 and json.loads(summary.output)["checked"] == 0  # nothing left to retry
    rows.append({"source": SOURCE, "target": "bad"})
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "out.jsonl").unlink()
    mixed = runner.invoke(app, args + ["--threshold", "0.1"])
    assert mixed.exit_code == 0, mixed.output  # 0.2 >= 0.1; "good flaky" is scored on its 3rd try
    under = runner.invoke(app, args + ["--threshold", "0.1", "--fail-under", "0.9"])
    assert under.exit_code == 1 and "under --fail-under 0.9" in under.output  # mean (1+1+0.2)/3 < 0.9
    inconsistent = runner.invoke(app, args + ["-O", str(tmp_path / "other.jsonl")])
    assert inconsistent.exit_code == 1 and "1 inconsistent" in inconsistent.output


def test_retry_unscored_refuses_another_inputs_results(runner, tmp_path) -> None:
    (tmp_path / "in.jsonl").write_text(json.dumps({"source": SOURCE, "target": CONSISTENT}) + "\n")
    (tmp_path / "out.jsonl").write_text(
        json.dumps({"source": "other", "target": CONSISTENT, "score": None, "method": "rouge", "model": None}) + "\n"
    )
    result = runner.invoke(
        app,
        [
            "check",
            "-i",
            str(tmp_path / "in.jsonl"),
            "-O",
            str(tmp_path / "out.jsonl"),
            "--method",
            "rouge",
            "--retry-unscored",
            "--no-progress",
        ],
    )
    assert result.exit_code == 2 and "another pair" in result.output


def test_linter_output_names_lines_columns_evidence_and_confidence() -> None:
    source = "Line one.\nThe budget passed on Tuesday."
    target = "Intro.\nIt passed on Friday."
    at = target.index("Friday")
    ev_at = source.index("Tuesday")
    finding = Finding(
        description="the source says Tuesday",
        kind="contradicted",
        confidence=0.875,
        target_spans=[Span(start=at, end=at + 6)],
        evidence=[Evidence(text="Tuesday", span=Span(start=ev_at, end=ev_at + 7), relation="contradicts")],
    )
    report = Report(
        method="m", score=0.0, subscores={"claims": 3.0, "precision": 0.5}, findings=[finding]
    ).with_threshold(0.5)
    text = report_text(report, Texts(source, target, "src.txt", "answer.txt"))
    assert 'answer.txt:2:14: contradicted: "Friday" [confidence 0.88]' in text
    assert 'evidence (contradicts) at src.txt:2:22: "Tuesday"' in text
    assert "claims=3, precision=0.500" not in text and "-> inconsistent (1 finding)" in text
    assert "claims=3, precision=0.500" in report_text(report, Texts(source, target), show_details=True)
    assert line_col("ab\ncd", 4) == (2, 2) and number(2.0) == "2" and number(0.25) == "0.250"
    chunked = finding.model_copy(
        update={
            "evidence": [
                Evidence(text="Tuesday", span=Span(start=0, end=7), chunk=1, chunk_span=Span(start=10, end=17))
            ]
        }
    )
    texts = Texts("", target, chunks=["x", "Line\nwith Tuesday"])
    assert "chunk 1, line 2:6" in report_text(report.model_copy(update={"findings": [chunked]}), texts)


def test_import_halluscope_exports_only_its_api() -> None:
    public = {n for n in dir(halluscope) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(halluscope, n), types.ModuleType)}
    assert public - modules == set(halluscope.__all__) - {"__version__"}
    assert all(getattr(halluscope, n, None) is not None for n in halluscope.__all__)


def test_the_text_output_shows_the_verified_rewrite_as_the_suggested_fix() -> None:
    diff = "--- target\n+++ improved\n-The ferry is paid by the city.\n+Two thirds come from a regional grant.\n"
    report = Report(method="improve", score=0.5, details={"improved": True, "best_round": 1, "diff": diff})
    text = report_text(report.with_threshold(1.0), Texts("s", "t"))
    assert (
        "suggested fix (verified rewrite, round 1):\n   -The ferry is paid by the city.\n"
        "   +Two thirds come from a regional grant."
    ) in text
    assert "suggested fix" not in report_text(
        Report(method="improve", score=1.0, details={"improved": False}), Texts("s", "t")
    )


def test_claims_lists_passing_claims_with_the_chunk_of_their_evidence(runner, tmp_path) -> None:
    (tmp_path / "chunks.json").write_text(json.dumps(["Paris is the capital of France.", "It has 2.1 million people."]))
    (tmp_path / "answer.txt").write_text("Paris is the capital of France.\nParis has 9 million people.")
    args = ["check", "-c", str(tmp_path / "chunks.json"), "-t", str(tmp_path / "answer.txt"), "--method", "gate"]
    plain = runner.invoke(app, args)
    listed = runner.invoke(app, args + ["--claims"])
    assert "claims:\n" not in plain.output and listed.exit_code == plain.exit_code == 1  # the counts' line only
    claims = listed.output.split("claims:\n", 1)[1]
    target = tmp_path / "answer.txt"
    assert f'{target}:1:1: supported: "Paris is the capital of France."' in claims
    assert f'supports at {tmp_path / "chunks.json"}[0]:1:1 (chunk 0): "Paris is the capital of France."' in claims
    assert f'{target}:2:1: unsupported: "Paris has 9 million people."' in claims


def test_only_one_input_reads_standard_input(runner, tmp_path) -> None:
    (tmp_path / "a.txt").write_text("Paris is the capital of France.")
    twice = runner.invoke(app, ["check", "-c", "-", "-c", str(tmp_path / "a.txt"), "-t", "-"], input=b"text")
    assert twice.exit_code == 2 and "standard input" in twice.output
    piped = runner.invoke(
        app,
        [
            "check",
            "-c",
            "-",
            "-c",
            str(tmp_path / "a.txt"),
            "-t",
            str(tmp_path / "a.txt"),
            "--method",
            "gate",
            "--format",
            "json",
        ],
        input=b"It has 2.1 million inhabitants.",
    )
    assert piped.exit_code == 0 and len(Report.model_validate_json(piped.output).source_chunks) == 2


def test_one_check_shows_a_spinner_on_a_terminal_only(runner, pair, monkeypatch) -> None:
    """A long single check says what it is doing on standard error when that is a terminal; piped output, JSON
    and --no-progress stay clean."""
    args = pair(INCONSISTENT) + ["--method", "gate"]
    piped = runner.invoke(app, args)
    assert "checking with gate" not in piped.stderr
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich: behave as on a terminal
    shown = runner.invoke(app, args)
    assert "checking with gate (no LLM)..." in shown.stderr and shown.exit_code == 1
    hidden = runner.invoke(app, args + ["--no-progress"])
    assert "checking with gate" not in hidden.stderr
