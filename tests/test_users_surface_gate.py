"""The gate says one thing per claim: the label `--claims` lists is the one the counts, the findings and the verdict
line are made of; it flags the README's own example (a whole project paid by the city, against a source giving two
thirds to a grant), and a name no chunk mentions is "not mentioned", with no unrelated chunk as its evidence."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.methods import get_method

REPO = Path(__file__).resolve().parents[1]
SOURCE = str(REPO / "examples" / "source.txt")
SUMMARY = str(REPO / "examples" / "summary.txt")
CONTEXTS = str(REPO / "examples" / "contexts.json")


def test_claims_counts_and_verdict_line_state_the_same_labels() -> None:
    result = CliRunner().invoke(app, ["check", "-s", SOURCE, "-t", SUMMARY, "--method", "gate", "--claims"])
    assert result.exit_code == 1, result.output
    listed = re.findall(r"^examples/summary\.txt:\d+:\d+: (\w+): ", result.output.replace(str(REPO) + "/", ""), re.M)
    assert listed == ["supported", "supported", "contradicted"]
    report = get_method("gate").check(Path(SOURCE).read_text(), Path(SUMMARY).read_text())
    assert [v.label for v in report.verdicts] == listed
    for label in ("supported", "unsupported", "contradicted", "unscored"):
        assert report.subscores[label] == listed.count(label)
    assert "uncertain" not in report.subscores
    assert report.label == "inconsistent" and "-> inconsistent (1 finding)" in result.output


def test_a_whole_project_against_a_two_thirds_source_is_flagged_with_the_sentence_giving_the_part() -> None:
    target = Path(SUMMARY).read_text()
    report = get_method("gate").check(Path(SOURCE).read_text(), target)
    (finding,) = report.findings
    assert finding.kind == "contradicted"
    assert [s.of(target) for s in finding.target_spans] == ["whole"]
    assert [e.text for e in finding.evidence] == [
        "Two thirds of the money comes from a regional transport grant, and the rest from the city's own budget."
    ]
    assert '"Two thirds"' in finding.description
    assert report.details["gate"]["s3"]["whole_for_part"] is True


def test_a_part_on_both_sides_or_a_whole_on_both_sides_is_no_clash() -> None:
    source = "The city pays the whole cost of the bridge from its budget."
    assert get_method("gate").check(source, "The city pays the whole cost of the bridge.").findings == []
    source = "Two thirds of the money comes from a grant, and the rest from the city's own budget."
    report = get_method("gate").check(source, "The rest of the money comes from the city's own budget.")
    assert report.details["gate"]["s1"]["whole_for_part"] is False and report.findings == []


def test_a_name_no_chunk_mentions_has_no_evidence_and_says_not_mentioned(tmp_path) -> None:
    target = tmp_path / "answer.txt"
    target.write_text("The council voted 7 to 2 to approve a new ferry line built by Northwind Marine.\n")
    result = CliRunner().invoke(app, ["check", "-c", CONTEXTS, "-t", str(target), "--method", "gate", "--claims"])
    assert result.exit_code == 1, result.output
    assert 'unsupported: "Northwind Marine"' in result.output
    assert "evidence: not mentioned in the source" in result.output
    assert "(chunk " not in result.output and "contexts.json[" not in result.output  # no unrelated chunk quoted
    report = get_method("gate").check(json.loads(Path(CONTEXTS).read_text()), target.read_text())
    assert report.findings[0].evidence == [] and report.verdicts[0].evidence == []


def test_a_number_the_source_never_mentions_still_quotes_the_related_window() -> None:
    report = get_method("gate").check(Path(SOURCE).read_text(), "The line will run every 20 minutes.")
    assert "every 30 minutes" in report.findings[0].evidence[0].text
