"""``improve`` composes any method that yields findings (``-o evaluator=NAME``): the flagged sentences are the
ones the evaluator's findings point into, the reason is their description, every rewrite is re-verified by the
same evaluator, and only a verified better text is returned. (With dcr, the default, see test_improve.py.)"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError
from halluscope.methods.improve import Improve, units_of
from halluscope.records import Claim, Finding, Report, Span, Verdict
from tests.prompt_data import fenced

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets. Bob joined Acme in 2005."
TARGET = "Alice founded Acme in 1999.  Acme makes rockets. It is based in Paris."
FIXED = "Alice founded Acme in 2001.  Acme makes rockets. It is based in Paris."


def _localizer_and_rewriter(still_wrong: bool = False):
    """A script keyed by reply type: localize (zero-shot, variant 1) finds "1999" while the text it is given has
    it; the rewriter fixes sentence 1. Also the requests seen, in order, and the rewrite requests alone."""
    seen: list[str] = []
    rewrites: list[str] = []

    def localize(messages):
        seen.append(messages[-1]["content"])
        if "1999" in fenced(messages, "target") or still_wrong:
            return json.dumps({"inconsistencies": ['The text says "1999", but the source says 2001.']})
        return json.dumps({"inconsistencies": []})

    def rewrite(messages):
        seen.append(messages[-1]["content"])
        rewrites.append(messages[-1]["content"])
        return json.dumps({"rewrites": [{"id": 1, "improved_sentence": "Alice founded Acme in 2001."}]})

    return {"LocalizationReply": localize, "RewritesReply": rewrite}, seen, rewrites


def _improve(script, **options):
    return Improve(
        llm=LLM(FakeModel(by_reply=script), cache=None), evaluator="localize", variant=1, style="zero_shot", **options
    )


def test_localize_as_evaluator_rewrites_the_sentence_its_finding_points_into():
    script, seen, rewrites = _localizer_and_rewriter()
    report = _improve(script, rounds=2).check(SOURCE, TARGET)
    details = report.details
    assert report.method == "improve" and report.score == pytest.approx(0.5)  # localize's score of the given text
    assert details["improved"] is True and details["improved_target"] == FIXED
    assert [r["score"] for r in details["rounds"]] == [0.5, 1.0] and details["stop_reason"] == "consistent"
    assert details["rounds"][0]["inconsistent_sentences"] == [1]
    change = details["rounds"][1]["changes"][0]
    assert change["before"] == "Alice founded Acme in 1999." and "source says 2001" in change["reason"]
    [rewrite_prompt] = rewrites
    assert 'reason: The text says "1999", but the source says 2001.' in rewrite_prompt
    assert "[2]" not in fenced(rewrite_prompt, "flagged")  # only the flagged sentence is listed
    assert len(seen) == 3 and report.usage.calls == 3  # evaluate, rewrite, re-evaluate


def test_a_rewrite_the_evaluator_still_flags_is_not_returned():
    script, _, _ = _localizer_and_rewriter(still_wrong=True)
    report = _improve(script, rounds=1).check(SOURCE, TARGET)
    assert report.details["improved"] is False and report.details["improved_target"] == TARGET
    assert [r["score"] for r in report.details["rounds"]] == [0.5, 0.5]


def test_evaluator_options_are_routed_and_validated():
    script, _, _ = _localizer_and_rewriter()
    method = _improve(script)
    assert method.options() == {
        "rounds": 2,
        "level": "sentence",
        "evaluator": "localize",
        "evaluator_options": method.evaluator.options(),
    }
    assert method.evaluator.options()["style"] == "zero_shot" and method.threshold == 0.75
    assert "localize_zero_shot" in method.prompt_version and "rai_sentence@" in method.prompt_version
    with pytest.raises(OptionsError, match="unknown option"):
        Improve(evaluator="localize", amc_rule=1)
    with pytest.raises(OptionsError, match="improve cannot be its own evaluator"):
        Improve(evaluator="improve")
    with pytest.raises(OptionsError, match="unknown method"):
        Improve(evaluator="nonesuch")
    with pytest.raises(OptionsError, match="evaluator_options are for an evaluator other than dcr"):
        Improve(evaluator_options={"amc": "rule"})
    assert "evaluator" not in Improve(amc="rule").options()  # dcr: the options recorded before evaluators existed


def test_units_from_findings_when_the_verdicts_are_not_about_sentences():
    claim = Claim(text="Acme makes cars", kind="atomic", target_spans=[Span(start=29, end=48)])
    report = Report(
        method="x",
        score=0.5,
        verdicts=[Verdict(claim=claim, label="unsupported", reason="no cars")],
        findings=[
            Finding(description="cars are not in the source", target_spans=[Span(start=40, end=48)]),
            Finding(description="no span"),
        ],
    )
    units = units_of(report, TARGET)
    assert [u.reason for u in units] == [None, "cars are not in the source", None]


def test_cli_improve_method_option(tmp_path):
    from halluscope.cli.main import app

    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    result = CliRunner().invoke(
        app, ["improve", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--method", "nonesuch"]
    )
    assert result.exit_code != 0 and "nonesuch" in result.output
