"""DCR: AMC arithmetic (seed 001 App. I), DCE/AMC parsers, the method end to end with the fake model,
long-source switching, fuzzing with garbled replies, and one run on the embedded model."""

from __future__ import annotations

import json

import pytest

from halluscope.llm import LLM, ContextOverflowError, FakeModel
from halluscope.methods import get_method
from halluscope.methods.dcr import (DCR, amc_score, parse_amc, parse_dce_single, parse_dce_sentences,
                                    rule_mark)
from halluscope.records import Report
from halluscope.text import ParseError, split_sentences
from tests.conftest import fake_llm
from tests.garble import garbled_replies

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets. Bob joined Acme in 2005."
TARGET = "Alice founded Acme in 1999. Acme makes rockets. It is based in Paris."


def dce(*items, is_consistent=False) -> str:
    return json.dumps({"sentences": [{"id": i, "reason": r} for i, r in items], "is_consistent": is_consistent})


def marks(*values) -> str:
    return json.dumps({"marks": list(values)})


# ------------------------------------------------------------------------------------------ arithmetic


def test_amc_appendix_i_example():
    # reasons: ["The two paragraphs are not consistent.", "This sentence is consistent.", "...not consistent."]
    result = amc_score([-1, 1, -1], [False, True, True])
    assert result.alpha == 1.0 and result.beta == -1.0
    assert result.z == 0.0
    assert result.score == 0.5
    assert result.k == 3


def test_amc_all_sentence_level_is_the_mean_mark():
    result = amc_score([1, 1, -1], [True, True, True])
    assert (result.alpha, result.beta) == (0.0, 0.0)
    assert result.z == pytest.approx(1 / 3)
    assert result.score == pytest.approx(2 / 3)


def test_amc_positive_paragraph_reason_is_removed_too():
    result = amc_score([1, -1, -1], [False, True, True])
    assert (result.alpha, result.beta) == (-1.0, -1.0)
    assert result.z == -1.0 and result.score == 0.0


def test_amc_edge_cases_have_no_score():
    assert amc_score([], []).score is None  # no sentences
    only_paragraph = amc_score([-1, 1], [False, False])
    assert only_paragraph.z is None and only_paragraph.score is None
    assert (only_paragraph.alpha, only_paragraph.beta) == (0.0, -2.0)


def test_amc_rejects_bad_input():
    with pytest.raises(ValueError):
        amc_score([1, -1], [True])
    with pytest.raises(ValueError):
        amc_score([0], [True])


# --------------------------------------------------------------------------------------------- parsers


def test_parse_dce_sentences_ids_text_and_paragraph_reasons():
    sentences = split_sentences(TARGET)
    reply = json.dumps({"sentences": [
        {"reason": "The two paragraphs are not consistent."},
        {"id": "[1]", "reason": "Inconsistent: 2001, not 1999."},
        {"sentence": "Acme makes rockets.", "reason": "Consistent: stated."},
        {"id": 7, "reason": "Consistent: out of range id."},
    ], "is_consistent": "false"})
    parsed = parse_dce_sentences(reply, sentences)
    assert [r.sentence_index for r in parsed.reasons] == [None, 0, 1, None]
    assert parsed.is_consistent is False


def test_sentence_numbers_are_not_read_out_of_text():
    from halluscope.methods.dcr import parse_sentence_number

    assert [parse_sentence_number(v, 3) for v in (2, "2", "[2]", "S2", "Sentence 2", 2.0)] == [1] * 6
    assert [parse_sentence_number(v, 3) for v in ("Two men, 3 cars.", 4, 0, True, None, "x")] == [None] * 6


def test_parse_dce_sentences_positional_and_strings():
    sentences = split_sentences(TARGET)
    parsed = parse_dce_sentences('["Consistent: a", "Consistent: b", "Inconsistent: c"]', sentences)
    assert [r.sentence_index for r in parsed.reasons] == [0, 1, 2]
    # a count mismatch is not guessed positionally
    parsed = parse_dce_sentences('["Consistent: a", "Consistent: b"]', sentences)
    assert [r.sentence_index for r in parsed.reasons] == [None, None]


def test_parse_dce_sentences_fenced_reply_with_prose():
    sentences = split_sentences(TARGET)
    reply = "Here is the evaluation:\n```json\n" + dce((1, "Inconsistent: x"), (2, "Consistent: y")) + "\n```"
    assert [r.text for r in parse_dce_sentences(reply, sentences).reasons] == ["Inconsistent: x", "Consistent: y"]


@pytest.mark.parametrize("reply", ["", "no json here", '{"sentences": []}', '{"sentences": [{"id": 1}]}', "[1, 2]"])
def test_parse_dce_sentences_rejects_unusable(reply):
    with pytest.raises(ParseError):
        parse_dce_sentences(reply, split_sentences(TARGET))


def test_parse_dce_single_forms():
    assert parse_dce_single('{"reason": "Consistent: ok", "is_consistent": true}').reasons[0].text == "Consistent: ok"
    nested = '{"reason": {"sentence": "x", "reason": "Inconsistent: y"}, "is_consistent": false}'
    assert parse_dce_single(nested).reasons[0].text == "Inconsistent: y"
    with pytest.raises(ParseError):
        parse_dce_single('{"is_consistent": true}')


def test_parse_amc():
    assert parse_amc('{"marks": [1, -1, "+1", "-1"]}', 4) == [1, -1, 1, -1]
    assert parse_amc('{"reason": ["..."], "answer": [-1, 1]}', 2) == [-1, 1]
    assert parse_amc("[1]", 1) == [1]
    for bad in ('{"marks": [1, -1]}', '{"marks": [1, 0, 1]}', '{"marks": [true, 1, 1]}', "nothing"):
        with pytest.raises(ParseError):
            parse_amc(bad, 3)


@pytest.mark.parametrize("reason, mark", [
    ("Inconsistent: the source says 2001.", -1),
    ("This sentence is not consistent with the article.", -1),
    ("Consistent: stated in the source.", 1),
    ("This sentence is consistent with the article.", 1),
    ("**Verdict: inconsistent** - wrong year", -1),
    ("1. The source does not support the source, so the sentence is inconsistent.", -1),
    ("The source supports the text, and the source is consistent with the text.", 1),
    ("The article does not mention the date. Otherwise it is consistent.", -1),
    ("The year is not consistent with the article", -1),
])
def test_rule_mark(reason, mark):
    assert rule_mark(reason) == mark


@pytest.mark.parametrize("reason", ["The article mentions Paris.", "1.1.1.1.1.1.1.1.", "Paris. It is consistent."])
def test_rule_mark_refuses_to_guess(reason):
    with pytest.raises(ParseError):
        rule_mark(reason)


# Verbatim replies of the embedded SmolLM2-135M model captured during benchmark runs (json_mode on, 160-token cap).
REAL_DCE_TRUNCATED = '{"sentences": [{"id": 1, "reason": "' + "1." * 71
REAL_DCE_BROKEN = (
    '{\n"sentences": [{"id": 1, "reason": "The sentence is consistent with the source\'s consistent message, so it '
    'is a consistent sentence.", "text": "The sentence is consistent with the source\'s consistent message, so it is '
    'a consistent sentence.", "is_consistent": false},\n"sentences[2]: The sentence is inconsistent with the '
    'source\'s inconsistent message, so it is inconsistent with the source\'s inconsistent message.", "text: "\n,'
    '"is_consistent: false"\n,"is_consistent_message_is_a_consistent_message_is_a_consistent_message_is')
REAL_AMC_RUNAWAY = '{"marks": [' + "1, " * 52


def test_real_embedded_replies():
    one = split_sentences("Tom sold the car.")
    truncated = parse_dce_sentences(REAL_DCE_TRUNCATED, one)
    assert [r.sentence_index for r in truncated.reasons] == [0]
    with pytest.raises(ParseError):  # "1.1.1..." carries no verdict: unscored, not guessed
        rule_mark(truncated.reasons[0].text)
    three = split_sentences("Tom sold the car. He bought a bike. Then he left.")
    broken = parse_dce_sentences(REAL_DCE_BROKEN, three)
    assert broken.reasons[0].sentence_index == 0 and rule_mark(broken.reasons[0].text) == 1
    assert all(r.sentence_index is None for r in broken.reasons[1:])  # the mangled rest is not pinned to sentences
    with pytest.raises(ParseError, match="expected 1 marks"):
        parse_amc(REAL_AMC_RUNAWAY, 1)


def test_parsers_survive_garbled_replies():
    sentences = split_sentences(TARGET)
    for reply in garbled_replies(1000):
        for parse in (lambda t: parse_dce_sentences(t, sentences), parse_dce_single, lambda t: parse_amc(t, 3),
                      rule_mark):
            try:
                parse(reply)
            except ParseError:
                pass


# ------------------------------------------------------------------------------------------ the method


def test_dcr_end_to_end_sentence_level():
    llm = fake_llm(dce((1, "Inconsistent: the source says 2001, not 1999."), (2, "Consistent: stated."),
                       (3, "Consistent: Paris is stated.")),
                   marks(-1, 1, 1))
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score == pytest.approx(2 / 3)
    assert report.label == "inconsistent"  # threshold 1.0: any flagged sentence
    assert report.subscores["Z"] == pytest.approx(1 / 3)
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "supported"]
    assert len(report.findings) == 1
    finding = report.findings[0]
    assert finding.target_spans[0].of(TARGET) == "Alice founded Acme in 1999."
    assert "2001" in finding.description and finding.claim_ids == ["s1"]
    assert report.usage.calls == 2 and len(report.calls) == 2
    assert "Alice founded Acme in 1999." in report.calls[0].messages[-1]["content"]
    assert "[3] It is based in Paris." in report.calls[0].messages[-1]["content"]


def test_dcr_appendix_i_case_end_to_end():
    reply = json.dumps({"sentences": [{"reason": "The two paragraphs are not consistent."},
                                      {"id": 1, "reason": "This sentence is consistent."},
                                      {"id": 2, "reason": "This sentence is not consistent."}]})
    target = "Alice founded Acme. Acme makes cars."
    report = get_method("dcr", llm=fake_llm(reply, marks(-1, 1, -1))).check(SOURCE, target)
    assert report.subscores["alpha"] == 1.0 and report.subscores["beta"] == -1.0
    assert report.score == 0.5
    assert report.details["other_reasons"][0]["reason"] == "The two paragraphs are not consistent."


def test_dcr_keeps_the_negative_of_two_reasons_for_one_sentence():
    reply = dce((1, "Consistent: fine."), (1, "Inconsistent: but the year is wrong."), (2, "Consistent: ok"))
    report = get_method("dcr", llm=fake_llm(reply, marks(1, -1, 1))).check(SOURCE, "Acme was founded in 1999. It makes rockets.")
    assert [v.label for v in report.verdicts] == ["unsupported", "supported"]
    assert report.score == 0.5
    assert (report.subscores["alpha"], report.subscores["beta"]) == (-1.0, -1.0)


def test_dcr_only_paragraph_level_reasons_is_unscored():
    reply = json.dumps({"reasons": ["The summary is not consistent overall."], "is_consistent": False})
    report = get_method("dcr", llm=fake_llm(reply, marks(-1))).check(SOURCE, TARGET)
    assert report.score is None
    assert "not about a single sentence" in report.unscored_reason
    assert all(v.label == "unscored" and v.reason for v in report.verdicts)


def test_dcr_missing_sentence_is_unscored_not_padded():
    llm = fake_llm(dce((1, "Inconsistent: wrong year"), (2, "Consistent: ok")), marks(-1, 1))
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score == 0.5
    assert report.verdicts[2].label == "unscored" and "no reason" in report.verdicts[2].reason
    assert report.subscores["judged"] == 2.0 and report.subscores["units"] == 3.0


def test_dcr_rule_amc_makes_no_extra_call():
    llm = fake_llm(dce((1, "Inconsistent: wrong year"), (2, "Consistent: ok"), (3, "This sentence is consistent.")))
    report = get_method("dcr", llm=llm, amc="rule").check(SOURCE, TARGET)
    assert report.score == pytest.approx(2 / 3)
    assert report.usage.calls == 1


def test_dcr_rule_amc_unclear_reason_is_unscored():
    llm = fake_llm(dce((1, "Inconsistent: wrong year"), (2, "Hmm."), (3, "Consistent: ok")))
    report = get_method("dcr", llm=llm, amc="rule").check(SOURCE, TARGET)
    assert report.verdicts[1].label == "unscored" and "verdict" in report.verdicts[1].reason, report.verdicts[1].reason
    assert report.score == 0.5


def test_dcr_amc_failure_keeps_raw_replies_and_is_unscored():
    llm = fake_llm(dce((1, "Inconsistent: x"), (2, "Consistent: y"), (3, "Consistent: z")), marks(1), "still wrong")
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score is None and "AMC failed" in report.unscored_reason
    assert [c.reply for c in report.calls][-2:] == [marks(1), "still wrong"]  # one repair round, both kept


def test_dcr_dce_repair_round_then_success():
    llm = fake_llm("I think it is fine", dce((1, "Consistent: a"), (2, "Consistent: b"), (3, "Consistent: c")),
                   marks(1, 1, 1))
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score == 1.0 and report.label == "consistent"
    assert report.usage.calls == 3


def test_dcr_paragraph_level():
    reply = json.dumps({"reason": "Inconsistent: the year is wrong.", "is_consistent": False})
    report = get_method("dcr", llm=fake_llm(reply, marks(-1)), level="paragraph").check(SOURCE, TARGET)
    assert report.score == 0.0
    assert report.claims[0].kind == "paragraph"
    assert report.findings[0].target_spans[0].of(TARGET) == TARGET.strip()
    assert "TEXT:\n" + TARGET in report.calls[0].messages[-1]["content"]


def test_dcr_options_validation():
    with pytest.raises(ValueError):
        DCR(llm=fake_llm(), level="word")
    with pytest.raises(ValueError):
        DCR(llm=fake_llm(), amc="maybe")
    with pytest.raises(ValueError):
        DCR(llm=fake_llm(), improve=-1)
    assert DCR(llm=fake_llm(), improve=2).options()["improve"] == 2
    assert "rai_sentence@" in DCR(llm=fake_llm(), improve=1).prompt_version
    assert "rai_sentence@" not in DCR(llm=fake_llm()).prompt_version


# ---------------------------------------------------------------------------------------- long sources


def _excerpt_responder(messages):
    user = messages[-1]["content"]
    if "ASSESSMENTS" in user:
        return marks(-1 if "1. Inconsistent" in user else 1)
    sentence = user.split("SENTENCE:")[-1]
    excerpt = user.split("EXCERPT:")[-1].split("SENTENCE:")[0]
    if "1999" in sentence or "Paris" in sentence and "Paris" not in excerpt:
        return json.dumps({"reason": "Inconsistent: not supported by the excerpt."})
    return json.dumps({"reason": "Consistent: the excerpt says so."})


def test_dcr_retrieval_on_request():
    llm = LLM(FakeModel(responder=_excerpt_responder))
    report = get_method("dcr", llm=llm, retrieval=True, retriever="bm25", top_k=2, window=0).check(SOURCE, TARGET)
    assert report.details["mode"] == "retrieval"
    assert report.details["retrieval"]["retriever"] == "bm25"
    assert report.verdicts[0].label == "unsupported" and report.verdicts[1].label == "supported"
    supported = report.verdicts[1]
    assert supported.evidence[0].relation == "supports"
    assert supported.evidence[0].span.of(SOURCE) == supported.evidence[0].text
    assert supported.calls and all("EXCERPT:" in c.messages[-1]["content"] or "ASSESSMENTS" in c.messages[-1]["content"]
                                   for c in supported.calls)
    assert report.usage.calls == sum(len(v.calls) for v in report.verdicts)


def test_dcr_switches_to_retrieval_when_the_source_does_not_fit():
    long_source = " ".join(f"Filler sentence number {i} talks about nothing." for i in range(200)) + " " + SOURCE
    llm = LLM(FakeModel(responder=_excerpt_responder, context_window=600), cache=None)
    llm.default_params = llm.params(max_tokens=100)
    report = get_method("dcr", llm=llm, retriever="bm25").check(long_source, TARGET)
    assert report.details["mode"] == "retrieval"
    assert "does not fit" in report.details["retrieval_reason"]
    assert report.score is not None
    # no prompt carried the whole source
    assert all(len(c.messages[-1]["content"]) < len(long_source) for v in report.verdicts for c in v.calls)


def test_dcr_switches_to_retrieval_on_context_overflow():
    llm = LLM(FakeModel([ContextOverflowError("prompt too long")], responder=_excerpt_responder))
    report = get_method("dcr", llm=llm, retriever="bm25").check(SOURCE, TARGET)
    assert report.details["mode"] == "retrieval"
    assert "context overflow" in report.details["retrieval_reason"]


def test_dcr_paragraph_level_refuses_long_sources_explicitly():
    llm = LLM(FakeModel(responder=_excerpt_responder, context_window=50))
    report = get_method("dcr", llm=llm, level="paragraph").check(SOURCE * 20, TARGET)
    assert report.score is None and "level=sentence" in report.unscored_reason


# ---------------------------------------------------------------------------------------------- fuzzing


@pytest.mark.parametrize("options", [{}, {"amc": "rule"}, {"level": "paragraph"},
                                     {"retrieval": True, "retriever": "bm25"}])
def test_dcr_garbled_replies_never_escape(options):
    replies = iter(garbled_replies(1000, seed=3))
    llm = LLM(FakeModel(responder=lambda messages: next(replies)))
    method = get_method("dcr", llm=llm, **options)
    for _ in range(40):
        report = method.check(SOURCE, TARGET)
        assert isinstance(report, Report)
        if report.score is None:
            assert report.unscored_reason
        for v in report.verdicts:
            assert v.label != "unscored" or v.reason


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_dcr_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("dcr", config=config, amc="rule").check("The cat sat on the mat. It was sunny.", "The cat sat on the mat.")
    assert report.model and report.model.startswith("embedded")
    assert report.usage.calls >= 1
    assert report.score is not None or report.unscored_reason
    assert len(report.verdicts) == 1
