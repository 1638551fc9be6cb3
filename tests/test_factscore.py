"""factscore: decomposition/verification/dedup parsers, de-duplication (fuzzy and LLM), the method end to end,
retrieval on long sources, fuzzing, and one run on the embedded model."""

from __future__ import annotations

import json

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods._descriptions import fuzzy_duplicate_groups
from halluscope.methods.factscore import FactScore, parse_fact_judgment, parse_facts, parse_keep
from halluscope.records import Report
from halluscope.text import ParseError, split_sentences
from tests.garble import garbled_replies

SOURCE = "Philips sold 250,000 units on Amazon. The police investigated Philips for a month and let it continue."
TARGET = "Amazon was investigated for a month. The police ordered Amazon to cease operations."
FACTS = json.dumps({"facts": [
    {"sentence": 1, "fact": "Amazon was investigated."},
    {"sentence": 1, "fact": "The investigation lasted a month."},
    {"sentence": 2, "fact": "The police ordered Amazon to cease operations."},
]})


def judge(messages) -> str:
    """Scripted verifier: facts about Amazon are wrong, the duration is right."""
    fact = messages[-1]["content"].split("FACT:")[-1]
    if "keep" in messages[-1]["content"] and "DESCRIPTIONS" in messages[-1]["content"]:
        return json.dumps({"keep": [1, 3]})
    problems = []
    if "Amazon" in fact:
        problems.append('The fact says "Amazon" was investigated, but the source says it was Philips.')
    if "cease" in fact:
        problems.append('The fact says the company was ordered to "cease operations", but it was allowed to continue.')
    return json.dumps({"supported": not problems, "inconsistencies": problems})


# ---------------------------------------------------------------------------------------------- parsers


def test_parse_facts_forms():
    sentences = split_sentences(TARGET)
    facts = parse_facts(FACTS, sentences)
    assert [(f.text, f.sentence_index) for f in facts] == [
        ("Amazon was investigated.", 0), ("The investigation lasted a month.", 0),
        ("The police ordered Amazon to cease operations.", 1)]
    strings = parse_facts('["A.", "a.", "B."]', sentences)  # duplicates dropped, no sentence known
    assert [(f.text, f.sentence_index) for f in strings] == [("A.", None), ("B.", None)]
    quoted = parse_facts(json.dumps({"facts": [{"sentence": "The police ordered Amazon to cease operations.",
                                                "fact": "The police gave an order."}]}), sentences)
    assert quoted[0].sentence_index == 1  # the sentence quoted instead of numbered
    one_sentence = parse_facts('{"facts": ["X happened."]}', split_sentences("X happened."))
    assert one_sentence[0].sentence_index == 0
    for bad in ('{"facts": []}', "no facts", '{"facts": [{"sentence": 1}]}'):
        with pytest.raises(ParseError):
            parse_facts(bad, sentences)


def test_parse_fact_judgment_forms():
    assert parse_fact_judgment('{"supported": true, "inconsistencies": ["ignored"]}', True).supported
    j = parse_fact_judgment('{"supported": "no", "inconsistencies": ["  a   b ", 3]}', True)
    assert (j.supported, j.descriptions) == (False, ("a b",))
    echoed = parse_fact_judgment('{"supported": false, "inconsistencies": ["<description>", "The year is wrong."]}', True)
    assert echoed.descriptions == ("The year is wrong.",)  # an echoed format placeholder is not a description
    assert parse_fact_judgment('{"supported": false, "inconsistencies": ["x"]}', False).descriptions == ()
    bare = parse_fact_judgment("No.\n- The year is wrong.\n- The place is wrong.", True)
    assert bare.descriptions == ("The year is wrong.", "The place is wrong.")
    assert parse_fact_judgment("Supported: the source says so", True).supported
    for bad in ('{"inconsistencies": []}', '{"supported": "perhaps"}', "I am not sure"):
        with pytest.raises(ParseError):
            parse_fact_judgment(bad, True)


def test_parse_keep():
    assert parse_keep('{"keep": [3, 1, "2", 1]}', 3) == [0, 1, 2]
    for bad in ('{"keep": []}', '{"keep": [4]}', '{"keep": ["x"]}', "none"):
        with pytest.raises(ParseError):
            parse_keep(bad, 3)


def test_parsers_survive_garbled_replies():
    sentences = split_sentences(TARGET)
    for reply in garbled_replies(1000, seed=17):
        for parse in (lambda t: parse_facts(t, sentences), lambda t: parse_fact_judgment(t, True),
                      lambda t: parse_fact_judgment(t, False), lambda t: parse_keep(t, 4)):
            try:
                parse(reply)
            except ParseError:
                pass


# ------------------------------------------------------------------------------------------------ dedup


def test_fuzzy_dedup_merges_rewordings_but_not_different_errors():
    descriptions = [
        "The age of the victim is not mentioned in the text.",
        "The location of the attack is not mentioned in the text.",
        "The victim's age is not mentioned in the text.",
        "The text does not mention the age of the victim.",
    ]
    groups = fuzzy_duplicate_groups(descriptions, 85.0)
    assert [0, 3] in groups or [0, 2, 3] in groups  # reworded duplicates merge
    assert [1] in groups  # a different piece of information stays apart


def test_fuzzy_dedup_merges_descriptions_pinned_to_the_same_words():
    from halluscope.records import Span

    spans = [[Span(start=0, end=6)], [Span(start=0, end=6)], [Span(start=10, end=14)]]
    groups = fuzzy_duplicate_groups(["Amazon is wrong", "It was Philips, not that company", "other"], 85.0, spans)
    assert groups == [[0, 1], [2]]


# ------------------------------------------------------------------------------------------------ method


def test_factscore_describe_with_fuzzy_dedup():
    llm = LLM(FakeModel([FACTS], responder=judge))
    report = get_method("factscore", llm=llm).check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3)
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "unsupported"]
    assert report.subscores == {"facts": 3.0, "supported": 1.0, "unscored": 0.0}
    # the "Amazon" error appears in facts 1 and 3 and is reported once (same quoted words)
    assert report.details["descriptions_before_dedup"] == 3
    assert len(report.findings) == 2
    amazon = next(f for f in report.findings if "Philips" in f.description)
    assert sorted(amazon.claim_ids) == ["f1", "f3"]
    assert amazon.target_spans[0].of(TARGET) == "Amazon"
    cease = next(f for f in report.findings if "cease" in f.description)
    assert cease.target_spans[0].of(TARGET) == "cease operations"
    assert report.claims[2].target_spans[0].of(TARGET) == "The police ordered Amazon to cease operations."
    assert report.usage.calls == 4


def test_factscore_llm_dedup_keeps_the_selected_wordings():
    llm = LLM(FakeModel([FACTS], responder=judge))
    report = FactScore(llm=llm, dedup="llm").check(SOURCE, TARGET)
    assert report.details["descriptions_before_dedup"] == 3
    assert len(report.findings) == 2
    assert report.usage.calls == 5
    dedup_prompt = report.calls[-1].messages[-1]["content"]
    assert "1. " in dedup_prompt and "3. " in dedup_prompt


def test_factscore_llm_dedup_failure_falls_back_explicitly():
    def responder(messages):
        return "no idea" if "DESCRIPTIONS" in messages[-1]["content"] else judge(messages)

    report = FactScore(llm=LLM(FakeModel([FACTS], responder=responder)), dedup="llm").check(SOURCE, TARGET)
    assert "used fuzzy" in report.details["dedup_error"]
    assert len(report.findings) == 2


def test_factscore_without_descriptions():
    def responder(messages):
        fact = messages[-1]["content"].split("FACT:")[-1]
        return json.dumps({"supported": "Amazon" not in fact})

    report = FactScore(llm=LLM(FakeModel([FACTS], responder=responder)), describe=False).check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3)
    assert [f.description for f in report.findings] == [
        "Not supported by the source: Amazon was investigated.",
        "Not supported by the source: The police ordered Amazon to cease operations."]
    assert "inconsistencies" not in report.verdicts[0].calls[0].messages[-1]["content"]


def test_unsupported_fact_without_description_gets_one():
    def responder(messages):
        return json.dumps({"supported": "month" in messages[-1]["content"].split("FACT:")[-1], "inconsistencies": []})

    report = FactScore(llm=LLM(FakeModel([FACTS], responder=responder)), dedup="none").check(SOURCE, TARGET)
    assert [f.description for f in report.findings][0] == "Not supported by the source: Amazon was investigated."


def test_unscored_facts_are_left_out_of_the_score():
    def responder(messages):
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        return "???" if "cease" in first_user.split("FACT:")[-1] else judge(messages)

    report = FactScore(llm=LLM(FakeModel([FACTS], responder=responder))).check(SOURCE, TARGET)
    assert report.score == 0.5
    assert report.subscores["unscored"] == 1.0
    assert report.verdicts[2].label == "unscored" and "unusable" in report.verdicts[2].reason
    assert len(report.verdicts[2].calls) == 2  # the reply and its repair round, kept for audit


def test_decomposition_failure_is_unscored():
    report = FactScore(llm=LLM(FakeModel(["nothing useful", "[]"]))).check(SOURCE, TARGET)
    assert report.score is None and "decomposition failed" in report.unscored_reason


def test_factscore_retrieval_for_long_sources():
    long_source = " ".join(f"Unrelated filler sentence {i} about the weather." for i in range(300)) + " " + SOURCE
    llm = LLM(FakeModel([FACTS], responder=judge, context_window=700))
    llm.default_params = llm.params(max_tokens=200)
    report = FactScore(llm=llm, retriever="bm25", top_k=2, window=1).check(long_source, TARGET)
    assert report.details["mode"] == "retrieval" and "does not fit" in report.details["retrieval_reason"]
    assert report.score == pytest.approx(1 / 3)
    evidence = report.verdicts[1].evidence[0]
    assert evidence.relation == "supports" and "a month" in evidence.text
    assert evidence.span.of(long_source) == evidence.text
    assert all(len(c.messages[-1]["content"]) < 2000 for v in report.verdicts for c in v.calls)


def test_options_validation():
    with pytest.raises(ValueError):
        FactScore(llm=LLM(FakeModel()), dedup="magic")
    with pytest.raises(ValueError):
        FactScore(llm=LLM(FakeModel()), retriever="tfidf")
    assert "factscore_dedup@" in FactScore(llm=LLM(FakeModel()), dedup="llm").prompt_version
    assert "factscore_verify@" in FactScore(llm=LLM(FakeModel()), describe=False).prompt_version


# ---------------------------------------------------------------------------------------------- fuzzing


@pytest.mark.parametrize("options", [{}, {"describe": False}, {"dedup": "llm"}])
def test_garbled_replies_never_escape(options):
    replies = iter(garbled_replies(1000, seed=19) * 3)
    method = FactScore(llm=LLM(FakeModel(responder=lambda messages: next(replies))), **options)
    for _ in range(40):
        report = method.check(SOURCE, TARGET)
        assert isinstance(report, Report)
        assert report.score is not None or report.unscored_reason
        assert all(v.label != "unscored" or v.reason for v in report.verdicts)


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_factscore_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("factscore", config=config).check("The cat sat on the mat.", "The dog sat on the mat.")
    assert report.usage.calls >= 1
    assert report.score is not None or report.unscored_reason
    if report.score is not None:
        assert 0.0 <= report.score <= 1.0 and report.verdicts
