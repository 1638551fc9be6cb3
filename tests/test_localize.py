"""localize: description-list and binary parsers, mapping descriptions to spans, styles, the 2-step
control flow (self / method / oracle filters, hint), fuzzing, and one run on the embedded model."""

from __future__ import annotations

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods._descriptions import is_none_answer, parse_description_list, spans_for_description
from halluscope.methods.localize import (FINAL_MARKER, LOCALIZE_PROMPTS, Localize, description_score,
                                         parse_binary_verdict)
from halluscope.records import Example, Report
from halluscope.text import ParseError
from tests.conftest import fake_llm
from tests.garble import garbled_replies

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets."
TARGET = "Alice founded Acme in 1999. Acme makes rockets and cars."
COT = ("Step 1: the year. The source says 2001.\nStep 2: cars are not mentioned.\n"
       'Final Output:\nA. The text says "in 1999", but the source says 2001.\n'
       'B. The text says Acme makes "cars", which the source does not mention.')


# ---------------------------------------------------------------------------------------------- parsers


def test_parse_lettered_list():
    reply = 'A. The text says "in 1999", but the source says 2001.\nB) Cars are not mentioned.'
    assert parse_description_list(reply) == ['The text says "in 1999", but the source says 2001.',
                                             "Cars are not mentioned."]


def test_parse_description_blocks_and_continuations():
    reply = ("Here are the inconsistencies:\n\nA.\nDescription: The year is wrong:\nit was 2001.\n\n"
             "B.\n**Description:** Cars are not mentioned.")
    assert parse_description_list(reply) == ["The year is wrong: it was 2001.", "Cars are not mentioned."]


def test_parse_drops_echoed_placeholders():
    assert parse_description_list("A. <description>\nB. The year is wrong.") == ["The year is wrong."]


def test_parse_numbered_bullets_and_json():
    assert parse_description_list("1. one\n2) two\n- three") == ["one", "two", "three"]
    assert parse_description_list('["one", " two "]') == ["one", "two"]


@pytest.mark.parametrize("reply", ["None", "None.", "**None**", "No inconsistencies found.",
                                   "There are no factual inconsistencies in the summary.", "N/A"])
def test_parse_none_answers(reply):
    assert parse_description_list(reply) == []
    assert is_none_answer(reply)


def test_parse_after_marker_uses_the_last_marker():
    assert len(parse_description_list(COT, FINAL_MARKER)) == 2
    reply = "I will give the Final Output: at the end.\nFinal Output:\nNone"
    assert parse_description_list(reply, FINAL_MARKER) == []
    with pytest.raises(ParseError):
        parse_description_list("A. something", FINAL_MARKER)
    with pytest.raises(ParseError):
        parse_description_list("Final Output:   ", FINAL_MARKER)


# A verbatim reply of the embedded SmolLM2-135M model to the CoT prompt (160-token cap): no marker, a runaway list.
REAL_COT_REPLY = "\n".join(
    f"{i}. The text is about a former Rangers owner and ex-chief executive {name}."
    for i, name in enumerate(["Charles Green", "Craig Whyte", "Craig Green", "Craig Whyte", "Charles Green",
                              "Craig Whyte", "Craig Green"], 1)) + "\n8. The text is about a former Rangers owner and ex-chief executive Craig"


def test_real_embedded_reply():
    with pytest.raises(ParseError, match="marker"):
        parse_description_list(REAL_COT_REPLY, FINAL_MARKER)
    items = parse_description_list(REAL_COT_REPLY)  # as a zero-shot answer it is a (poor) list of 8 items
    assert len(items) == 8 and items[0].endswith("Charles Green.")


def test_parse_binary_verdict():
    assert parse_binary_verdict("It matches.\nFinal answer: yes") is True
    assert parse_binary_verdict("Final answer: yes... on reflection\nFinal Answer: **No**") is False
    assert parse_binary_verdict("no") is False
    # a verdict stated in words on the last line (a real embedded-model reply, and its negation)
    assert parse_binary_verdict("The text is consistent with the source documents it is based on.") is True
    assert parse_binary_verdict("Let me see.\nThe summary is not consistent with the source.") is False
    for bad in ("", "Maybe.", "The answer is unclear", "The reason step is to conclude the answer."):
        with pytest.raises(ParseError):
            parse_binary_verdict(bad)


def test_parsers_survive_garbled_replies():
    for reply in garbled_replies(1000, seed=7):
        for parse in (parse_description_list, lambda t: parse_description_list(t, FINAL_MARKER), parse_binary_verdict):
            try:
                parse(reply)
            except ParseError:
                pass
        spans_for_description(reply, TARGET)  # never raises, whatever the text


# ------------------------------------------------------------------------------------------------ spans


def test_quoted_phrases_are_located():
    spans = spans_for_description('The text says “in 1999” but the source says 2001.', TARGET)
    assert [s.of(TARGET) for s in spans] == ["in 1999"]


def test_quotes_from_the_source_are_not_pinned():
    assert spans_for_description('The source says "in the year two thousand and one".', TARGET) == []


def test_claimed_clause_is_located_without_quotes():
    spans = spans_for_description("The summary states that Acme makes rockets and cars, but cars are not mentioned.",
                                  TARGET)
    assert [s.of(TARGET) for s in spans] == ["Acme makes rockets and cars"]


def test_description_without_anchor_stays_a_description():
    assert spans_for_description("The company is misidentified.", TARGET) == []


# ------------------------------------------------------------------------------------------------ styles


def test_description_score():
    assert [description_score(n) for n in range(4)] == [1.0, 0.5, pytest.approx(1 / 3), 0.25]


def test_cot_end_to_end_with_spans():
    report = get_method("localize", llm=fake_llm(COT)).check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3) and report.label == "inconsistent"
    assert [[s.of(TARGET) for s in f.target_spans] for f in report.findings] == [["in 1999"], ["cars"]]
    assert report.subscores == {"descriptions": 2.0, "located": 2.0}
    assert FINAL_MARKER in report.calls[0].messages[-1]["content"]


def test_none_answer_scores_one():
    report = get_method("localize", llm=fake_llm("None"), style="zero_shot").check(SOURCE, TARGET)
    assert report.score == 1.0 and report.label == "consistent" and report.findings == []


def test_styles_render_distinct_prompts():
    few = LOCALIZE_PROMPTS[("few_shot", False)].render(source="S", target="T")[-1]["content"]
    zero = LOCALIZE_PROMPTS[("zero_shot", False)].render(source="S", target="T")[-1]["content"]
    assert "Example 3" in few and "Example 1" not in zero
    assert "None" in zero and FINAL_MARKER not in zero
    hint = LOCALIZE_PROMPTS[("cot", True)].render(source="S", target="T")[-1]["content"]
    assert "known to contain" in hint and "single word None" not in hint and "or the word None" not in hint


def test_missing_marker_gets_one_repair_then_unscored():
    llm = fake_llm("A. something wrong", "still no marker")
    report = get_method("localize", llm=llm, style="cot").check(SOURCE, TARGET)
    assert report.score is None and "marker" in report.unscored_reason
    assert [c.reply for c in report.calls] == ["A. something wrong", "still no marker"]


# ---------------------------------------------------------------------------------------------- 2-step


def test_self_filter_consistent_skips_localization():
    llm = fake_llm("All details match.\nFinal answer: yes")
    report = get_method("localize", llm=llm, filter="self").check(SOURCE, TARGET)
    assert report.score == 1.0 and report.usage.calls == 1
    assert report.details["filter"] == {"kind": "self", "consistent": True}
    assert report.details["localized"] is False


@pytest.mark.parametrize("hint", [False, True])
def test_self_filter_inconsistent_then_localizes(hint):
    model = FakeModel(["The year differs.\nFinal answer: no", COT])
    report = Localize(llm=LLM(model), filter="self", hint=hint).check(SOURCE, TARGET)
    assert report.usage.calls == 2 and len(report.findings) == 2
    second = model.requests[1][-1]["content"]
    assert ("known to contain at least one" in second) is hint
    assert report.details["filter"]["consistent"] is False and report.details["localized"] is True


def test_self_filter_unparseable_is_unscored():
    report = get_method("localize", llm=fake_llm("hmm", "hmm again"), filter="self").check(SOURCE, TARGET)
    assert report.score is None and "filter failed" in report.unscored_reason
    assert len(report.calls) == 2


def test_method_filter_uses_its_threshold():
    # rouge needs no LLM; its precision here is high, so with a low threshold the target passes the filter
    passed = get_method("localize", llm=fake_llm(), filter="rouge", filter_threshold=0.1).check(SOURCE, TARGET)
    assert passed.score == 1.0 and passed.details["filter"]["method"] == "rouge"
    assert passed.usage.calls == 0
    flagged = get_method("localize", llm=fake_llm(COT), filter="rouge", filter_threshold=0.99).check(SOURCE, TARGET)
    assert flagged.details["filter"]["consistent"] is False and len(flagged.findings) == 2


def test_method_filter_with_an_llm_method_counts_its_calls():
    llm = fake_llm('{"reason": "wrong year", "score": 2}', COT)
    report = get_method("localize", llm=llm, filter="geval").check(SOURCE, TARGET)
    assert report.usage.calls == 2 and len(report.calls) == 2
    assert report.details["filter"]["score"] == 0.25


def test_oracle_filter_uses_gold_labels_in_the_harness():
    method = Localize(llm=fake_llm(COT), filter="oracle", hint=True)
    consistent = Example(id="a", source=SOURCE, target=TARGET, label=1)
    inconsistent = Example(id="b", source=SOURCE, target=TARGET, descriptions=["wrong year"])
    import asyncio

    first = asyncio.run(method.acheck_example(consistent))
    assert first.score == 1.0 and first.usage.calls == 0
    second = asyncio.run(method.acheck_example(inconsistent))
    assert second.usage.calls == 1 and second.details["filter"] == {"kind": "oracle", "consistent": False}
    assert "known to contain" in second.calls[0].messages[-1]["content"]
    unlabeled = asyncio.run(method.acheck_example(Example(id="c", source=SOURCE, target=TARGET)))
    assert unlabeled.score is None and "no gold label" in unlabeled.unscored_reason


def test_oracle_filter_outside_the_harness_is_unscored():
    report = Localize(llm=fake_llm(), filter="oracle").check(SOURCE, TARGET)
    assert report.score is None and "labelled examples" in report.unscored_reason


def test_option_validation():
    with pytest.raises(ValueError):
        Localize(llm=fake_llm(), hint=True)
    with pytest.raises(ValueError):
        Localize(llm=fake_llm(), style="tree_of_thought")
    with pytest.raises(KeyError):
        Localize(llm=fake_llm(), filter="no_such_method")
    assert Localize(llm=fake_llm(), filter="none").filter is None
    assert Localize(llm=fake_llm(), filter="self").prompt_version == "localize_cot@1,localize_binary_filter@1"


# ---------------------------------------------------------------------------------------------- fuzzing


@pytest.mark.parametrize("options", [{"style": "zero_shot"}, {"style": "few_shot"}, {"style": "cot"},
                                     {"filter": "self", "hint": True}])
def test_garbled_replies_never_escape(options):
    replies = iter(garbled_replies(1000, seed=13))
    method = Localize(llm=LLM(FakeModel(responder=lambda messages: next(replies))), **options)
    for _ in range(60):
        report = method.check(SOURCE, TARGET)
        assert isinstance(report, Report)
        assert report.score is not None or report.unscored_reason
        for f in report.findings:
            assert all(0 <= s.start <= s.end <= len(TARGET) for s in f.target_spans)


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_localize_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("localize", config=config, style="zero_shot").check(
        "The cat sat on the mat.", "The dog sat on the mat.")
    assert report.usage.calls >= 1
    assert report.score is not None or report.unscored_reason
    if report.score is not None:
        assert report.score == description_score(len(report.findings))
