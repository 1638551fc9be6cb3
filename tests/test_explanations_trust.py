"""No prompt internals in what users read: every registered method, run on a fake model that echoes its prompt
(fence tags, section headers, the data notice and the format instructions included) as every text of its reply,
leaves none of it in a reason, a fix, an evidence quote or a finding -- in the JSON report or in the CLI output --
and a fix is printed once."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method, list_methods, method_class
from halluscope.records import Claim, Evidence, Finding, Report, Span, Verdict
from halluscope.text.markup import clean_report, fix_problem, markup_found, strip_markup

SOURCE = (
    "The city will build a ferry. Two thirds of the money comes from a regional transport grant. "
    "The ferry starts in May."
)
TARGET = "The city will build a ferry. The city pays for the whole project from its own budget."

# What the prompts put around the data, written out here rather than imported, so the test does not share the
# implementation's patterns: a fence tag ends in "_" and ten hex digits; headers are upper-case lines ending in ":".
LEAKS = [
    re.compile(r"</?[a-z_]*_[0-9a-f]{10}>"),
    re.compile(r"(?m)^\s*(SOURCE|TEXT|CLAIM|FACT|FACTS|EXCERPT|SENTENCES?|ASSERTIONS?|FULL TEXT[^:\n]*):\s*$"),
    re.compile(r"Material to examine is given between tags"),
    re.compile(r"Answer with one JSON object and nothing before or after it"),
    re.compile(r"<(atomic fact|corrected sentence|why|reason|claim|fact)>"),
]


def leaks(text: str) -> list[str]:
    return [m.group(0) for p in LEAKS for m in p.finditer(text)]


def _fill(schema: dict[str, Any], defs: dict[str, Any], prompt: str, key: str = "") -> Any:
    """A value of ``schema`` whose every string is ``prompt``: booleans say "not supported" (``contradicted``
    true), ids count 1, 2, AMC marks are -1, a label is the schema's last (FAIL, No, ...)."""
    if "$ref" in schema:
        return _fill(defs[schema["$ref"].split("/")[-1]], defs, prompt, key)
    if "anyOf" in schema:
        return _fill(next(s for s in schema["anyOf"] if s.get("type") != "null"), defs, prompt, key)
    if "enum" in schema:
        return schema["enum"][-1]
    kind = schema.get("type")
    if kind == "object":
        return {k: _fill(v, defs, prompt, k) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        items = [_fill(schema.get("items", {}), defs, prompt, key) for _ in range(2)]
        for i, item in enumerate(items, 1):
            if isinstance(item, dict) and "id" in item:
                item["id"] = i  # the target's two sentences
        return items
    if kind == "boolean":
        return key == "contradicted"
    if kind == "integer":
        return -1 if "mark" in key else 1
    if kind == "number":
        return 1
    return prompt


def echo_model() -> FakeModel:
    """Replies with its prompt: as every string of a JSON reply, as the whole of a free-text reply (then a
    ``Final Output:`` line quoting it, for chain-of-thought parsers); a short answer (verdict first) is "No", so
    every claim goes on to be explained."""
    fake = FakeModel()

    def respond(messages: list[dict[str, str]]) -> str:
        prompt = "\n\n".join(m["content"] for m in messages)
        params = fake.params[-1]
        if params.json_schema:
            schema = json.loads(params.json_schema)
            return json.dumps(_fill(schema, schema.get("$defs", {}), prompt))
        if params.max_tokens is not None and params.max_tokens <= 8:
            return "No"
        return prompt + "\nFinal Output: " + json.dumps({"inconsistencies": [prompt]})

    fake._responder = respond
    return fake


CASES = [(name, {}) for name in list_methods()] + [
    ("dcr", {"order": "verdict_first"}),
    ("probe", {"order": "verdict_first"}),
    ("factscore", {"order": "verdict_first"}),
]


def user_texts(report: Report) -> list[str]:
    """Every text of the report a user reads as the method's explanation."""
    texts = [v.reason for v in report.verdicts] + [v.fix or "" for v in report.verdicts]
    texts += [e.text for v in report.verdicts for e in v.evidence]
    texts += [f.description for f in report.findings] + [f.fix or "" for f in report.findings]
    texts += [e.text for f in report.findings for e in f.evidence]
    reason = report.details.get("reason")  # geval's reason for its rating
    return texts + ([reason] if isinstance(reason, str) else [])


def run(name: str, options: dict[str, Any], tmp_path: Path | None = None) -> tuple[Report, FakeModel]:
    fake = echo_model()
    if name == "ensemble":  # a combiner over rouge and geval, both run
        from tests.test_ensemble import _cascade_combiner, _rouge

        assert tmp_path is not None
        options = {"combiner": _cascade_combiner(tmp_path, _rouge(TARGET)), "cascade": False, **options}
    llm = LLM(fake) if method_class(name).uses_llm else None
    return get_method(name, llm=llm, **options).check(SOURCE, TARGET), fake


CASE_IDS = [f"{n}{'-' if o else ''}{'-'.join(o.values())}" for n, o in CASES]


@pytest.mark.parametrize(("name", "options"), CASES, ids=CASE_IDS)
def test_an_echoed_prompt_reaches_no_reason_fix_evidence_or_finding(
    name: str, options: dict[str, Any], tmp_path: Path
) -> None:
    report, fake = run(name, options, tmp_path)
    dumped = json.loads(report.model_dump_json())
    shown = user_texts(Report.model_validate(dumped))
    assert not [leak for text in shown for leak in leaks(text)], name
    for f in report.findings:
        assert f.fix is None or f.fix_rejected is None


FLAGGING = [
    ("dcr", {}),
    ("dcr", {"order": "verdict_first"}),
    ("factscore", {}),
    ("dove", {}),
    ("localize", {}),
    ("geval", {}),
]


@pytest.mark.parametrize(("name", "options"), FLAGGING)
def test_the_echo_does_reach_the_explanation_path(name: str, options: dict[str, Any]) -> None:
    """The check above is not empty: these methods flag with the echoed reply, and their raw replies (kept for
    audit) hold the fence tags that the findings no longer do."""
    report, fake = run(name, options)
    assert report.findings or report.details.get("reason"), report.unscored_reason
    assert any(leaks(c.reply) for c in report.calls)


def test_every_method_is_covered() -> None:
    assert {name for name, _ in CASES} == set(list_methods())


def test_cli_output_shows_no_markup_and_each_fix_once(monkeypatch, tmp_path: Path) -> None:
    import halluscope.methods as methods
    from halluscope.cli.main import app

    real = methods.get_method
    echo = {"llm": LLM(echo_model()), "order": "verdict_first"}
    monkeypatch.setattr(methods, "get_method", lambda name, **kw: real(name, **{**kw, **echo}))
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    args = ["check", "--method", "dcr", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--no-progress"]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 1, text.output
    assert "reason:" in text.output and not leaks(text.output)
    as_json = CliRunner().invoke(app, [*args, "--format", "json"])
    report = Report.model_validate_json(as_json.output)
    assert report.findings and not [leak for t in user_texts(report) for leak in leaks(t)]


def _report(reason: str, fix: str | None, evidence: list[Evidence]) -> Report:
    claim = Claim(id="s2", text="The city pays for the whole project.", target_spans=[Span(start=0, end=36)])
    verdict = Verdict(claim=claim, label="contradicted", reason=reason, fix=fix, evidence=evidence)
    finding = Finding(description=reason, kind="contradicted", claim_ids=["s2"], fix=fix, evidence=evidence)
    return Report(method="dcr", score=0.5, claims=[claim], verdicts=[verdict], findings=[finding])


def test_a_fix_with_markup_is_dropped_and_recorded_a_reason_is_stripped() -> None:
    tagged = "<claim_d9e042ef58>The city pays for the whole project.</claim_d9e042ef58>"
    located = Evidence(text="Two thirds come from a grant.", span=Span(start=29, end=58), relation="contradicts")
    unlocated = Evidence(text=f"SOURCE:\n{tagged}", relation="contradicts")
    report = clean_report(_report(f"The source says otherwise. {tagged}", tagged, [located, unlocated]))
    (verdict,), (finding,) = report.verdicts, report.findings
    for item in (verdict, finding):
        assert item.fix is None and "fence tag" in (item.fix_rejected or "")
        assert item.evidence == [located]  # a quote located in the source is never touched
    assert verdict.reason == finding.description == "The source says otherwise. The city pays for the whole project."


def test_a_fix_that_repeats_the_flagged_text_is_not_shown_a_real_one_is() -> None:
    same = clean_report(_report("Wrong payer.", " the city pays for the whole project ", []))
    assert same.findings[0].fix is None and "repeats the flagged text" in (same.findings[0].fix_rejected or "")
    fixed = "A regional grant pays two thirds of the project."
    kept = _report("Wrong payer.", fixed, [])
    assert clean_report(kept) is kept and kept.findings[0].fix == fixed


@pytest.mark.parametrize(
    "text",
    [
        "<fix_0123456789>x</fix_0123456789>",
        "Correct.\nSOURCE:\nThe city.",
        "<corrected sentence>",
        "...",
        "Answer with one JSON object and nothing before or after it. Its fields:",
    ],
)
def test_markup_is_named_and_stripped(text: str) -> None:
    assert markup_found(text) is not None and fix_problem(text, []) is not None
    assert not leaks(strip_markup(text)) and markup_found(strip_markup(text) or "ok") is None


@pytest.mark.parametrize("text", ["The ferry costs <b>5</b> million.", "Ratio 3:2 at 10:30.", "Note: the city pays."])
def test_ordinary_text_is_not_markup(text: str) -> None:
    assert markup_found(text) is None and strip_markup(text) == text


def test_improve_shows_and_sends_the_reasons_without_markup(monkeypatch, tmp_path: Path) -> None:
    import halluscope.methods as methods
    from halluscope.cli.main import app

    tagged = "Inconsistent: <sentence_0123456789>own budget</sentence_0123456789> is wrong."
    first, second = [{"id": 1, "reason": "Consistent: fine."}, {"id": 2, "reason": tagged}], "Consistent: ok."
    dce = [
        {"sentences": first, "is_consistent": False},
        {"sentences": [first[0], {"id": 2, "reason": second}], "is_consistent": True},
    ]
    fix = "A regional transport grant pays two thirds of the money."
    fake = FakeModel(
        by_reply={
            "DceReply": [json.dumps(d) for d in dce],
            "RewritesReply": json.dumps({"rewrites": [{"id": 2, "improved_sentence": fix}]}),
        }
    )
    real = methods.get_method
    monkeypatch.setattr(methods, "get_method", lambda name, **kw: real(name, **{**kw, "llm": LLM(fake), "amc": "rule"}))
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    result = CliRunner().invoke(app, ["improve", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt")])
    assert result.exit_code == 0, result.output
    assert "verified improvement" in result.output and "own budget is wrong" in result.output
    assert not leaks(result.output)
    rewrite_prompt = next(m for m, kind in zip(fake.requests, fake.reply_types) if kind == "RewritesReply")
    assert "_0123456789" not in rewrite_prompt[-1]["content"]
