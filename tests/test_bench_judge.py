"""FINAL matching: judge-reply parsing (incl. fuzzing), the counting rules, and the suite end to end."""

from __future__ import annotations

import json

import pytest

from halluscope.bench.builtin_suites import final_matching_suite
from halluscope.bench.judge import (
    MATCH_PROMPT,
    MatchReply,
    match_descriptions,
    match_key,
    parse_matches,
)
from halluscope.bench.suites import SuiteContext
from halluscope.llm import LLM, FakeModel
from halluscope.records import Example, Finding, Report
from halluscope.text.parsing import ParseError
from tests.conftest import fake_llm
from tests.garble import garbled_replies
from tests.prompt_data import fenced


@pytest.mark.parametrize(
    "reply,expected",
    [
        ('{"reasoning": "x", "matches": {"P1": "G2", "P2": null}}', {0: 1, 1: None}),
        ('{"matches": {"p1": "g1", "P2": "None"}}', {0: 0, 1: None}),  # "None": the paper's judge writes it
        ('Let me think.\n```json\n{"matches": {"P1": "G2", "P2": "g1"}}\n```', {0: 1, 1: 0}),
        ('{"matches": {"P 1": "G 1", "P2": null}}', {0: 0, 1: None}),
    ],
)
def test_parse_matches_accepts_the_declared_shape(reply, expected):
    assert parse_matches(reply, n_pred=2, n_gold=2) == expected


@pytest.mark.parametrize(
    "reply",
    [
        '{"matches": {"P1": "G3", "P2": null}}',  # no such gold
        '{"matches": {"P1": "G1"}}',  # P2 undecided
        '{"matches": {"P1": "G1", "P2": null, "P3": null}}',  # no such candidate
        '{"matches": {"P1": ["G1", "G2"], "P2": null}}',  # one candidate, two golds
        '{"matches": {"P1": ["G2"], "P2": []}}',  # lists are not reference ids
        '{"matches": {"P1": true, "P2": null}}',
        '{"matches": {"1": 2, "2": "G1"}}',  # numbers are not ids
        '{"matches": {"P1": "the second one", "P2": null}}',
        '{"matches": {"P1": "no match", "P2": null}}',  # prose, not null
        '{"matches": {"P1": "G1", "P2": null, "reasoning": "x"}}',  # a key that is no candidate
        '{"matches": {"P1": "G1", "P-2": null}}',
        '{"P1": "G1", "P2": null}',  # the mapping must be under "matches"
        '{"matches": ["G1", null]}',
        '{"reasoning": "P1 is G1", "matches": {"P1": "G1", "P2": nul',  # cut off
        "P1 matches G1 and P2 matches nothing.",  # prose, no JSON
        "",
    ],
)
def test_parse_matches_rejects_what_it_cannot_trust(reply):
    with pytest.raises(ParseError):
        parse_matches(reply, n_pred=2, n_gold=2)


def test_parse_matches_fuzz_only_raises_parse_error():
    valid = ['{"reasoning": "same date", "matches": {"P1": "G1", "P2": null}}', '{"matches": {"P1": null, "P2": "G2"}}']
    replies = garbled_replies(1000) + valid + [v[:cut] for v in valid for cut in range(5, len(v), 7)]
    ok = failed = 0
    for reply in replies:
        try:
            out = parse_matches(reply, n_pred=2, n_gold=2)
        except ParseError:
            failed += 1
            continue
        ok += 1
        assert set(out) == {0, 1} and all(v in (None, 0, 1) for v in out.values())
    assert ok > 0 and failed > 0  # only complete, declared replies parse; cut-off copies of them do not
    assert ok == len(valid)


async def test_judge_not_called_without_predictions_or_without_gold():
    model = FakeModel()  # no scripted reply: any call would raise
    judge = LLM(model, cache=None)
    no_pred = await match_descriptions(judge, "a", "summary", ["gold one"], [])
    assert (no_pred.matched_gold, no_pred.n_gold, no_pred.n_pred, no_pred.judged) == (0, 1, 0, False)
    no_gold = await match_descriptions(judge, "b", "summary", [], ["pred one", "pred two"])
    assert (no_gold.matched_gold, no_gold.n_pred, no_gold.matches) == (0, 2, {0: None, 1: None})
    assert model.requests == []


async def test_duplicate_predictions_count_one_gold():
    judge = fake_llm('{"reasoning": "all three are about the date", "matches": {"P1": "G1", "P2": "G1", "P3": "G1"}}')
    res = await match_descriptions(
        judge,
        "x",
        "It rained on Monday.",
        ["wrong day", "wrong weather"],
        ["day is wrong", "Monday unsupported", "the date"],
    )
    assert res.matched_gold == 1 and res.n_pred == 3 and res.n_gold == 2
    assert res.calls and "G1. wrong day" in res.calls[0].messages[-1]["content"]
    assert "P3. the date" in res.calls[0].messages[-1]["content"]


async def test_unparseable_judge_reply_is_unscored_not_no_match():
    judge = fake_llm("I think they match.", "Still prose.")
    res = await match_descriptions(judge, "x", "s", ["g"], ["p"])
    assert res.matches is None and res.matched_gold is None
    assert "judge reply unusable" in res.unscored_reason
    assert len(res.calls) == 2  # the reply and one repair round, both kept for audit


async def test_repair_round_recovers():
    judge = fake_llm("P1 -> G1", '{"matches": {"P1": "G1"}}')
    res = await match_descriptions(judge, "x", "s", ["g"], ["p"])
    assert res.matched_gold == 1 and len(res.calls) == 2


def _final_items():
    examples = [
        Example(id="dup", source="src", target="Tom won on Monday.", descriptions=["Tom did not win", "not Monday"]),
        Example(id="clean", source="src", target="Fine.", descriptions=[]),
        Example(id="silent", source="src", target="Wrong.", descriptions=["it is wrong"]),
        Example(id="failed", source="src", target="x", descriptions=["g"]),
    ]
    reports = [
        Report(
            method="m",
            score=0.2,
            findings=[Finding(description="Tom's win is unsupported"), Finding(description="He did not win")],
        ),
        Report(method="m", score=0.9, findings=[Finding(description="a false alarm")]),
        Report(method="m", score=0.9),
        Report(method="m", unscored_reason="unparseable reply"),
    ]
    return examples, reports


async def test_final_suite_counts_and_resumes(tmp_path):
    examples, reports = _final_items()
    # only the "dup" item needs the judge (the others have no gold, no prediction or no report): its summary
    # gets the matches; a request about any other summary finds no reply and fails
    matches = {"Tom won on Monday.": '{"matches": {"P1": "G1", "P2": "G1"}}'}
    model = FakeModel(by_reply={MatchReply: lambda messages: matches[fenced(messages, "summary")]})
    ctx = SuiteContext(
        out_dir=tmp_path, method="m", model="fake", dataset="t", judge=LLM(model, cache=None), n_bootstrap=50
    )
    res = await final_matching_suite(examples, reports, ctx)
    m = res.metrics
    # dup: 1 of 2 gold matched with 2 predictions; clean: 1 false positive; silent: 1 gold missed
    assert (m["gold_matched"], m["predictions"], m["gold"]) == (1, 3, 3)
    assert m["recall"]["value"] == pytest.approx(1 / 3) and m["precision"]["value"] == pytest.approx(1 / 3)
    assert m["n_unscored"] == 1 and m["n_judge_unscored"] == 0 and m["n_judged"] == 1
    assert m["false_positives_on_consistent_items"] == 1
    assert len(model.requests) == 1
    # a second pass reuses the stored matches: the judge is not asked again
    again = await final_matching_suite(examples, reports, ctx)
    assert again.metrics["recall"] == m["recall"] and len(model.requests) == 1
    lines = (tmp_path / "final_matches.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["example_id"] for x in lines) == ["clean", "dup", "silent"]


async def test_final_suite_judge_failure_is_counted_not_scored_as_no_match(tmp_path):
    examples, reports = _final_items()
    ctx = SuiteContext(
        out_dir=tmp_path, method="m", model="fake", dataset="t", judge=fake_llm(default="no idea"), n_bootstrap=0
    )
    m = (await final_matching_suite(examples, reports, ctx)).metrics
    assert m["n_judge_unscored"] == 1 and m["n_scored"] == 2
    # only the two items needing no judge remain: 1 false positive, 1 missed gold
    assert (m["gold_matched"], m["predictions"], m["gold"]) == (0, 1, 1)
    assert "judge reply unusable" in m["judge_unscored_reasons"][0]


async def test_final_suite_with_garbled_judge_never_raises(tmp_path):
    examples, reports = _final_items()
    replies = iter(garbled_replies(200, seed=5))
    judge = LLM(FakeModel(by_reply={MatchReply: lambda messages: next(replies)}), cache=None)
    ctx = SuiteContext(out_dir=tmp_path, method="m", model="fake", dataset="t", judge=judge, n_bootstrap=0)
    m = (await final_matching_suite(examples, reports, ctx)).metrics
    assert m["n_judge_unscored"] + m["n_scored"] == 3


def test_match_prompt_renders_every_placeholder():
    assert MATCH_PROMPT.placeholders() == {"summary", "gold", "predicted", "format"}
    text = MATCH_PROMPT.render(summary="S", gold="G1. g", predicted="P1. p")[-1]["content"]
    assert '"matches"' in text and "$" not in text  # the reply schema's format instructions are in the prompt


async def test_a_prose_verdict_is_unscored_not_no_match():
    # "P1 does not match anything" reads like a decision, but it is not the declared reply
    judge = fake_llm("P1 does not match anything.", '{"matches": {"P1": "nothing"}}')
    res = await match_descriptions(judge, "x", "s", ["g"], ["p"])
    assert res.matches is None and res.matched_gold is None and "judge reply unusable" in res.unscored_reason


def test_match_key_changes_with_the_prompt():
    other = MATCH_PROMPT.override(MATCH_PROMPT.user + "\nBe strict.")
    assert match_key("j", ["g"], ["p"]) != match_key("j", ["g"], ["p"], other)


async def test_unusable_judge_results_are_kept_unless_retry_is_asked(tmp_path):
    examples, reports = _final_items()
    failing = FakeModel(default="no idea")
    ctx = SuiteContext(
        out_dir=tmp_path, method="m", model="fake", dataset="t", judge=LLM(failing, cache=None), n_bootstrap=0
    )
    await final_matching_suite(examples, reports, ctx)
    assert len(failing.requests) == 2  # the reply and one repair round
    await final_matching_suite(examples, reports, ctx)
    assert len(failing.requests) == 2  # stored (unusable) result reused: not asked again
    fixed = FakeModel(default='{"matches": {"P1": "G1", "P2": null}}')
    ctx.judge, ctx.extra = LLM(fixed, cache=None), {"retry_unscored": True}
    m = (await final_matching_suite(examples, reports, ctx)).metrics
    assert len(fixed.requests) == 1 and m["n_judge_unscored"] == 0 and m["gold_matched"] == 1
