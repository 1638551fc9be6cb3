"""Plain output: the default text and web report show score, threshold, label, findings, evidence, fix and cost in
words; the method's internals (Z, alpha, beta, k, sub-scores) only with --details (and always in the JSON);
prompt tokens the model reused and replies from halluscope's cache named apart; an unnamed endpoint's model
named as the endpoint says."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from halluscope.cli.check import Texts, report_text
from halluscope.cli.main import app
from halluscope.config import Config
from halluscope.methods import get_method
from halluscope.records import Claim, Evidence, Finding, Report, Span, Usage, Verdict
from halluscope.report import render_html
from tests.test_backends_openai import ScriptedServer

SOURCE = "The budget passed on Tuesday."
TARGET = "It passed on Friday."


def _report() -> Report:
    claim = Claim(text=TARGET, id="s1", target_spans=[Span(start=0, end=len(TARGET))])
    evidence = Evidence(text="The budget passed on Tuesday.", span=Span(start=0, end=29), relation="contradicts")
    finding = Finding(
        description="The source says Tuesday.",
        kind="contradicted",
        target_spans=[Span(start=13, end=19)],
        evidence=[evidence],
        fix="It passed on Tuesday.",
    )
    usage = Usage(calls=4, prompt_tokens=1853, completion_tokens=126, cached_prompt_tokens=861, cache_hits=2)
    return Report(
        method="dcr",
        model="qwen2.5:7b",
        score=0.0,
        subscores={"units": 1.0, "Z": -1.0, "alpha": 0.0, "beta": 0.0, "k": 1.0},
        claims=[claim],
        verdicts=[Verdict(claim=claim, label="contradicted", evidence=[evidence])],
        findings=[finding],
        usage=usage,
    ).with_threshold(0.5)


def test_the_default_text_is_plain_and_details_show_the_internals() -> None:
    report = _report()
    plain = report_text(report, Texts(SOURCE, TARGET, "src.txt", "answer.txt"))
    for shown in (
        'answer.txt:1:14: contradicted: "Friday"',
        'evidence (contradicts) at src.txt:1:1: "The budget passed on Tuesday."',
        "fix: It passed on Tuesday.",
        "dcr (qwen2.5:7b): score 0, threshold 0.500 -> inconsistent (1 finding)",
        "claims: 1 (1 contradicted)",
        "4 LLM calls, 1853+126 tokens (861 prompt tokens reused), 2 replies from cache, cost unknown",
    ):
        assert shown in plain, shown
    assert "Z=" not in plain and "alpha" not in plain and "cache hits" not in plain and "(861 cached)" not in plain
    detailed = report_text(report, Texts(SOURCE, TARGET), show_details=True)
    assert "units=1, Z=-1, alpha=0, beta=0, k=1" in detailed


def test_the_web_report_is_plain_unless_details_are_asked() -> None:
    report = _report()
    page = render_html(report, SOURCE, TARGET)
    assert "Sub-scores" not in page.split('id="report-data"')[0] and ">alpha<" not in page
    assert "threshold 0.500" in page and "861 prompt tokens reused" in page and "2 replies from cache" in page
    assert "cost unknown" in page
    detailed = render_html(report, SOURCE, TARGET, details=True)
    assert "Method details" in detailed and ">alpha<" in detailed


def test_the_json_keeps_the_internals(tmp_path) -> None:
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    args = ["check", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--method", "rouge"]
    plain = CliRunner().invoke(app, args)
    assert "rouge1=" not in plain.stdout
    assert "rouge1=" in CliRunner().invoke(app, [*args, "--details"]).stdout
    assert "rouge1" in json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)["subscores"]


def test_an_unnamed_endpoint_model_is_named_as_the_endpoint_says(tmp_path) -> None:
    body = {
        "model": "qwen2.5-7b-instruct",
        "choices": [{"message": {"role": "assistant", "content": json.dumps({"reason": "ok", "score": 4})}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9},
    }
    config = Config(base_url="", cache=True, cache_path=tmp_path / "cache.sqlite")
    with ScriptedServer([(200, body, {})]) as server:
        config = config.model_copy(update={"base_url": server.url})
        first = get_method("geval", config=config).check(SOURCE, TARGET)
        again = get_method("geval", config=config).check(SOURCE, TARGET)  # a new client: the reply is cached
    assert [r["body"]["model"] for r in server.requests] == ["default"]
    assert first.model == "qwen2.5-7b-instruct" and first.usage.calls == 1
    assert again.model == "qwen2.5-7b-instruct" and again.usage.cache_hits == 1
