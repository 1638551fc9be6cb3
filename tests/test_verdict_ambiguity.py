"""Two verdicts in one reply make it ambiguous: no score is read from it.

Forms that 22b0ee2 still read: the paper G-Eval form read only its first line, keys differing only in case
(or Unicode spelling) were one verdict plus an ignored extra key, a second verdict nested in another value or in
a list after the object was ignored, and 199 bracketed tokens between two answers hid the second."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods.factscore import FactJudgmentReply
from halluscope.methods.geval import GevalReply, parse_paper_score
from halluscope.methods.probe import EvaluationReply
from halluscope.text import ParseError, extract_json
from tests.stage_fuzz import SOURCE, TARGET

REFUSED = (ParseError, ValidationError)


@pytest.mark.parametrize(
    "reply",
    [
        "5\nOn second thought: 1",
        "5\n\n1",
        "Consistency: 5\nActually 2/5",
        "4\nThe summary adds a year the article does not give, so 2.",
    ],
)
def test_the_paper_geval_form_reads_the_whole_reply(reply):
    assert parse_paper_score(reply) is None


def test_the_paper_geval_check_is_unscored_on_two_scores():
    llm = LLM(FakeModel(default="5\nOn second thought: 1"), cache=None)
    report = get_method("geval", llm=llm, prompt="paper", weighting="none").check(SOURCE, TARGET)
    assert report.score is None and "not a score" in report.unscored_reason


@pytest.mark.parametrize("reply", [" 4 \n", "Consistency: 3\n\n", "**5**"])
def test_the_paper_geval_form_still_reads_one_score(reply):
    assert parse_paper_score(reply) in (3, 4, 5)


@pytest.mark.parametrize(
    "schema, reply",
    [
        (EvaluationReply, '{"verdict": "PASS", "Verdict": "FAIL"}'),
        (FactJudgmentReply, '{"supported": true, "inconsistencies": [], "Supported": false}'),
        (GevalReply, '{"reason": "x", "score": 5, "Score": 1}'),
        (GevalReply, '{"reason": "x", "score": 5, "SCORE": 5}'),
        (
            EvaluationReply,
            '{"verdict": "PASS", "\\uff56\\uff45\\uff52\\uff44\\uff49\\uff43\\uff54": "FAIL"}',
        ),  # full width
        (EvaluationReply, '{"verdict": "PASS", "verdict\\u200b": "FAIL"}'),  # a zero-width space in the key
        (GevalReply, '{"reason": "x", "score": 5, "ſcore": 1}'),  # long s: NFKC folds it to "s"
    ],
)
def test_keys_that_normalise_alike_are_two_verdicts(schema, reply):
    with pytest.raises(ParseError, match="repeats the key"):
        schema.parse(reply)


@pytest.mark.parametrize(
    "schema, reply",
    [
        (FactJudgmentReply, '{"supported": true, "inconsistencies": [], "second_opinion": {"supported": false}}'),
        (EvaluationReply, '{"verdict": "PASS", "notes": [{"x": 1}, {"review": {"Verdict": "FAIL"}}]}'),
        (GevalReply, '{"reason": "x", "score": 5, "meta": {"score": 1}}'),
    ],
)
def test_a_second_verdict_nested_anywhere_is_ambiguous(schema, reply):
    with pytest.raises(ParseError, match="second time"):
        schema.parse(reply)


@pytest.mark.parametrize(
    "schema, reply",
    [
        (
            FactJudgmentReply,
            '{"supported": true, "inconsistencies": []}\n[{"supported": false, "inconsistencies": []}]',
        ),
        (GevalReply, '{"reason": "x", "score": 5} and also [{"reason": "y", "score": 1}]'),
    ],
)
def test_a_second_verdict_in_a_list_after_the_object_is_ambiguous(schema, reply):
    with pytest.raises(ParseError, match="second answer"):
        schema.parse(reply)


@pytest.mark.parametrize("between", [199, 250, 5_000])
def test_a_second_answer_after_any_number_of_bracketed_tokens_is_seen(between):
    reply = '{"reason": "x", "score": 5} ' + "[note] " * between + '{"reason": "y", "score": 1}'
    with pytest.raises(ParseError, match="different answers"):
        GevalReply.parse(reply)


def test_a_second_answer_after_many_repairable_values_is_never_hidden():
    reply = (
        '{"reason": "x", "score": 5} ' + " ".join(f"{{'a': {i}}}" for i in range(300)) + ' {"reason": "y", "score": 1}'
    )
    with pytest.raises(ParseError):
        GevalReply.parse(reply)


@pytest.mark.parametrize("reply", ["No problem!", '{"reas', '{"score": true}', "NOT PASS", '{"supported": null}'])
def test_replies_that_state_no_verdict_are_still_refused(reply):
    for schema in (GevalReply, EvaluationReply, FactJudgmentReply):
        with pytest.raises(REFUSED):
            schema.parse(reply)


@pytest.mark.parametrize(
    "schema, reply, field, value",
    [
        (GevalReply, 'Here it is: {"reason": "fine", "score": 4}', "score", 4),
        (GevalReply, '{"reason": "the list [a, b] is fine", "score": 4} [note]', "score", 4),
        (EvaluationReply, '{"reasoning": "ok", "verdict": "PASS"}', "verdict", "PASS"),
        (
            FactJudgmentReply,
            '{"supported": false, "inconsistencies": ["The text says \\"2001\\"; the SOURCE says 1999."]}',
            "supported",
            False,
        ),
        (GevalReply, '{"reason": "x", "score": 4}\n' + "[x] " * 1000, "score", 4),
    ],
)
def test_real_verdicts_still_parse(schema, reply, field, value):
    assert getattr(schema.parse(reply), field) == value


def test_lists_alone_are_not_read_as_an_object():
    with pytest.raises(ParseError):
        extract_json('[{"reason": "x", "score": 4}]', dict)


def test_every_start_is_read_and_the_outcome_is_stated():
    """Every start is tried (no cap that could hide an answer); the scan is linear, so these replies at the size
    cap finish within the suite's timeout (a quadratic scan would take minutes)."""
    with pytest.raises(ParseError, match="cut off|no JSON"):
        extract_json("[']" * 60_000)
    with pytest.raises(ParseError, match="bracketed values"):
        extract_json(" ".join(f"{{'a': {i}}}" for i in range(15_000)))
    with pytest.raises(ParseError, match="no JSON"):
        extract_json("[x] " * 45_000)
    assert extract_json('{"a": 1} ' * 20_000) == {"a": 1}  # one answer repeated is one statement


def test_a_batch_entry_or_batch_restated_inside_another_value_is_ambiguous():
    from halluscope.methods.batching import parse_batch
    from halluscope.methods.factscore import FactCheckBatchEntry

    a = {"results": [{"id": i, "supported": True} for i in (1, 2, 3)]}
    b = {"results": [{"id": i, "supported": False} for i in (1, 2, 3)]}
    with pytest.raises(ParseError, match="second time"):
        parse_batch(json.dumps({**a, "second_opinion": b}), 3, FactCheckBatchEntry)
    nested = {
        "results": [
            {"id": 1, "supported": True, "note": {"Supported": False}},
            {"id": 2, "supported": True},
            {"id": 3, "supported": True},
        ]
    }
    answers = parse_batch(json.dumps(nested), 3, FactCheckBatchEntry)
    assert 0 not in answers.judged and set(answers.judged) == {1, 2}  # unit 1 is asked again on its own


def test_a_final_answer_with_text_after_it_still_counts_as_a_statement():
    from halluscope.methods.localize import parse_binary_verdict

    with pytest.raises(ParseError, match="two verdicts"):
        parse_binary_verdict("Reasoning.\nFinal answer: no " + "[note] " * 250 + "\nFinal answer: yes")
