"""The fake model scripted by reply type: replies keyed by the Reply model a request asks for, in
order, not by the prompt's wording; and the same script as a JSON file behind ``--model fake:script.json``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel, build_api
from halluscope.methods import get_method
from halluscope.methods.geval import GevalReply

SOURCE = "The bridge opened in 1932. It is made of steel."
TARGET = "The bridge opened in 1935. It is made of steel."
FACTS = json.dumps(
    {
        "facts": [
            {"sentence": 1, "fact": "The bridge opened in 1935."},
            {"sentence": 2, "fact": "The bridge is made of steel."},
        ]
    }
)


def test_replies_follow_the_reply_type_in_order():
    fake = FakeModel(by_reply={"FactsReply": FACTS, "FactCheckReply": ['{"supported": false}', '{"supported": true}']})
    report = get_method("factscore", llm=LLM(fake, cache=None), describe=False).check(SOURCE, TARGET)
    assert [(v.claim.text, v.label) for v in report.verdicts] == [
        ("The bridge opened in 1935.", "unsupported"),
        ("The bridge is made of steel.", "supported"),
    ]
    assert report.score == 0.5
    assert fake.reply_types == ["FactsReply", "FactCheckReply", "FactCheckReply"]


def test_a_reply_class_and_a_function_are_keys_and_values_too():
    seen = []

    def rate(messages):
        seen.append(messages[-1]["content"])
        return json.dumps({"reason": "The year differs.", "score": 2})

    fake = FakeModel(by_reply={GevalReply: rate})
    report = get_method("geval", llm=LLM(fake, cache=None)).check(SOURCE, TARGET)
    assert report.score == 0.25 and report.subscores["rating"] == 2.0
    assert len(seen) == 1 and TARGET in seen[0]


def test_an_exhausted_list_falls_to_the_default_then_fails_naming_the_type():
    fake = FakeModel(
        by_reply={"FactsReply": [FACTS], "FactCheckReply": ['{"supported": true}']}, default='{"supported": false}'
    )
    report = get_method("factscore", llm=LLM(fake, cache=None), describe=False).check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]  # the second check got the default

    strict = FakeModel(by_reply={"FactsReply": [FACTS], "FactCheckReply": ['{"supported": true}']})
    report = get_method("factscore", llm=LLM(strict, cache=None), describe=False).check(SOURCE, TARGET)
    assert report.score is None  # a transport-like failure leaves the whole check unscored, with the reason
    assert "no scripted reply for request #3 (reply type FactCheckReply)" in report.unscored_reason


def test_a_request_without_a_schema_is_keyed_text():
    fake = FakeModel(
        by_reply={"text": "The TEXT gives 1935, the source 1932.\nFinal answer: no"},
        default=json.dumps({"inconsistencies": ["The text says 1935; the source says 1932."]}),
    )
    report = get_method("localize", llm=LLM(fake, cache=None), style="zero_shot", filter="self").check(SOURCE, TARGET)
    assert "text" in fake.reply_types and "LocalizationReply" in fake.reply_types
    assert [f.description for f in report.findings] == ["The text says 1935; the source says 1932."]


def test_a_script_file_is_a_model(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps({"FactsReply": json.loads(FACTS), "FactCheckReply": [{"supported": True}, {"supported": False}]})
    )
    api = build_api(Config(model=f"fake:{script}"))
    report = get_method("factscore", llm=LLM(api, cache=None), describe=False).check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    before = api.cache_id
    script.write_text(json.dumps({"default": {"supported": True}}))
    assert build_api(Config(model=f"fake:{script}")).cache_id != before  # an edited script is not answered from cache


def test_a_script_that_is_not_an_object_is_refused(tmp_path):
    script = tmp_path / "script.json"
    script.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        build_api(Config(model=f"fake:{script}"))


def test_the_cli_takes_a_fake_script(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"GevalReply": {"reason": "The year differs.", "score": 2}}))
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    result = CliRunner().invoke(
        app,
        [
            "check",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--method",
            "geval",
            "--model",
            f"fake:{script}",
            "--no-cache",
            "--json",
        ],
    )
    assert result.exit_code == 1, result.output  # 0.25 < geval's threshold: inconsistent
    report = json.loads(result.output)
    assert report["score"] == 0.25 and report["model"] == f"fake:{script}"
