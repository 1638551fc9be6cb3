"""A verdict comes from one unambiguous statement of it.

Each test below fails on main before these checks (842d343): the schema's example echoed back was scored, the first of
two answers (or the last of two values of a repeated key) was scored, look-alike labels folded onto ASCII ones, and
``amc=rule`` read negations and corrections as +1."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods.batching import parse_batch
from halluscope.methods.dcr import DceExcerptBatchReply, DceReply
from halluscope.methods.factscore import (
    FACTSCORE_DESCRIBE_PROMPT,
    FactCheckBatchEntry,
    FactCheckBatchReply,
    FactJudgmentBatchEntry,
    FactJudgmentBatchReply,
    FactJudgmentReply,
)
from halluscope.methods.geval import GevalReply
from halluscope.methods.localize import parse_binary_verdict, parse_final_output
from halluscope.methods.probe import EvaluationReply
from halluscope.methods.probe.replies import EvidenceBatchEntry, EvidenceBatchReply
from halluscope.text import ParseError, extract_json
from halluscope.text.verdict_words import verdict_mark
from tests.stage_fuzz import SOURCE, TARGET, StageScript, run_check

REFUSED = (ParseError, ValidationError)

# ------------------------------------------------------------------------------------------ the schema's example


@pytest.mark.parametrize(
    "schema",
    [
        FactJudgmentReply,
        FactJudgmentBatchReply,
        FactCheckBatchReply,
        DceReply,
        DceExcerptBatchReply,
        EvidenceBatchReply,
    ],
)
def test_the_schemas_own_example_is_no_answer(schema):
    example = json.dumps(schema.example)
    with pytest.raises(ParseError, match="example"):
        schema.parse(example)
    with pytest.raises(ParseError, match="example"):  # inside the echoed format instructions
        schema.parse(schema.format_instructions())
    with pytest.raises(ParseError, match="example"):  # fenced, with a preamble
        schema.parse(f"Here is my answer:\n```json\n{example}\n```")


def test_an_echoed_prompt_is_no_answer():
    messages = FACTSCORE_DESCRIBE_PROMPT.render(source=SOURCE, fact="The city pays for the whole project.")
    echo = "\n\n".join(m["content"] for m in messages)
    with pytest.raises(REFUSED):
        FactJudgmentReply.parse(echo)


def test_the_example_beside_one_real_answer_is_skipped():
    real = {"supported": True, "inconsistencies": []}
    reply = FactJudgmentReply.format_instructions() + "\n\nMy answer: " + json.dumps(real)
    assert FactJudgmentReply.parse(reply).supported is True


def test_a_copied_example_description_makes_the_judgment_a_copy():
    # the old parser dropped the echoed description and kept the example's "supported": false -> 0.0
    copied = {"supported": False, "inconsistencies": FactJudgmentReply.example["inconsistencies"]}
    with pytest.raises(REFUSED):
        FactJudgmentReply.parse(json.dumps(copied))


@pytest.mark.parametrize(
    "reply, entry",
    [
        (FactCheckBatchReply, FactCheckBatchEntry),
        (FactJudgmentBatchReply, FactJudgmentBatchEntry),
        (EvidenceBatchReply, EvidenceBatchEntry),
    ],
)
def test_batch_example_ids_are_never_applied_to_real_units(reply, entry):
    with pytest.raises(ParseError, match="example"):
        parse_batch(json.dumps(reply.example), 3, entry, examples=reply.echoes())
    with pytest.raises(ParseError, match="example"):  # the bare list of the example's entries
        parse_batch(json.dumps(reply.example["results"]), 3, entry, examples=reply.echoes())
    with pytest.raises(ParseError, match="example"):  # the example's entries with a third one added
        extra = {"id": 3, "supported": True, "inconsistencies": [], "reasoning": "", "evidence": []}
        parse_batch(json.dumps({"results": reply.example["results"] + [extra]}), 3, entry, examples=reply.echoes())


@pytest.mark.parametrize(
    "method, options, stage, unit_stage",
    [
        ("factscore", {"batch_size": 3}, "factscore_describe_batch", "factscore_describe"),
        ("factscore", {"batch_size": 3, "describe": False}, "factscore_verify_batch", "factscore_verify"),
        ("probe", {"batch_size": 3}, "probe_find_evidence_batch", "probe_find_evidence"),
    ],
)
def test_an_echoed_batch_example_sends_every_unit_to_its_own_call(method, options, stage, unit_stage):
    schema = {
        "factscore_describe_batch": FactJudgmentBatchReply,
        "factscore_verify_batch": FactCheckBatchReply,
        "probe_find_evidence_batch": EvidenceBatchReply,
    }[stage]
    script = StageScript(attacked=stage, attack=json.dumps(schema.example))
    report = run_check(method, options, script)
    assert script.asked[stage] == 2  # the answer and the repair, both refused
    assert script.asked[unit_stage] == 3  # every unit asked on its own, answered validly ("supported" / "PASS")
    assert report.score == 1.0 and all(v.label == "supported" for v in report.verdicts)


# ------------------------------------------------------------------------------------------ two verdicts


@pytest.mark.parametrize(
    "reply",
    [
        '{"reason": "x", "score": 1} On second thought: {"reason": "y", "score": 5}',
        '```json\n{"reason": "x", "score": 1}\n```\nActually:\n```json\n{"reason": "x", "score": 5}\n```',
        "{'reason': 'x', 'score': 1}\nOn second thought: {\"reason\": \"x\", \"score\": 5}",  # one needs syntax repair
    ],
)
def test_two_different_answers_are_no_verdict(reply):
    with pytest.raises(ParseError, match="different answers"):
        GevalReply.parse(reply)


def test_the_same_answer_twice_is_one_statement():
    assert GevalReply.parse('{"reason": "x", "score": 4}\nAgain: {"score": 4, "reason": "x"}').score == 4
    assert GevalReply.parse('{"reason": "x", "score": 4} and {}').score == 4  # an empty object states nothing


@pytest.mark.parametrize(
    "reply",
    [
        '{"reason": "x", "score": 1, "score": 5}',
        '{"results": [{"id": 1, "supported": true, "supported": false}]}',
        "{'reason': 'x', 'score': 1, 'score': 5, }",  # syntax repair would keep the last value
        '{reason: "x", score: 1, score: 5}',
    ],
)
def test_a_repeated_key_is_no_verdict(reply):
    with pytest.raises(ParseError, match="repeats the key"):
        extract_json(reply)


def test_a_repeated_key_in_a_geval_reply_leaves_the_check_unscored():
    llm = LLM(FakeModel(default='{"reason": "fine", "score": 1, "score": 5}'), cache=None)
    report = get_method("geval", llm=llm).check(SOURCE, TARGET)
    assert report.score is None and "repeats the key" in report.unscored_reason
    assert len(report.calls) == 2  # the one repair request was made


def test_two_final_answers_are_no_verdict():
    with pytest.raises(ParseError, match="two verdicts"):
        parse_binary_verdict("Final answer: no\nOn second thought the dates match.\nFinal answer: yes")
    assert parse_binary_verdict("Final answer: yes\nTo repeat:\nFinal answer: yes") is True


def test_two_final_outputs_with_different_answers_are_no_verdict():
    first = json.dumps({"inconsistencies": ['The text says "the city pays", but a grant pays.']})
    reply = f"Reasoning.\nFinal Output: {first}\nWait.\nFinal Output: {json.dumps({'inconsistencies': []})}"
    with pytest.raises(ParseError, match="two"):
        parse_final_output(reply)


# ------------------------------------------------------------------------------------------ look-alike labels


@pytest.mark.parametrize("label", ["paſs", "PAſS", "faıl", "FAıL", "ＰＡＳＳ", "РASS", "pass\u200b"])
def test_look_alike_verdict_labels_are_refused(label):
    with pytest.raises(ParseError, match="verdict"):
        EvaluationReply.parse(json.dumps({"reasoning": "", "verdict": label}))


@pytest.mark.parametrize("label, expected", [("pass", "PASS"), (" Fail ", "FAIL"), ("PASS", "PASS")])
def test_plain_labels_in_another_case_are_read(label, expected):
    assert EvaluationReply.parse(json.dumps({"verdict": label})).verdict == expected


@pytest.mark.parametrize("reply", ["Final answer: yeſ", "Fınal answer: no", "Final answer: nο", "Final answer: ｙｅｓ"])
def test_look_alike_final_answers_are_refused(reply):
    with pytest.raises(ParseError):
        parse_binary_verdict("Some reasoning.\n" + reply)


def test_look_alike_final_output_marker_is_no_marker():
    with pytest.raises(ParseError, match="no line"):
        parse_final_output('Fınal Output: {"inconsistencies": []}')


@pytest.mark.parametrize(
    "reason",
    ["Conſistent: the SOURCE states this.", "Consistentı: stated.", "ᏟONSISTENT: stated.", "Supporteḋ: stated."],
)
def test_look_alike_reason_labels_state_no_verdict(reason):
    with pytest.raises(ParseError):
        verdict_mark(reason)


# ------------------------------------------------------------------------------------------ amc=rule negations

NEGATIONS = [
    "Nothing in the SOURCE supports this claim.",
    "Correction: the SOURCE says two thirds come from a grant.",
    "Consistent? No, the SOURCE says a grant pays.",
    "Supported, but the SOURCE gives another year.",
    "Consistent: no, the grant pays.",
]


@pytest.mark.parametrize("reason", NEGATIONS)
def test_amc_rule_never_reads_a_negation_or_correction_as_plus_one(reason):
    try:
        mark = verdict_mark(reason)
    except ParseError:
        return  # left unmarked: allowed
    assert mark == -1, reason


@pytest.mark.parametrize(
    "reason", ["No problem!", "No issues found.", "None.", "Nothing wrong here.", "No inconsistency with the SOURCE."]
)
def test_amc_rule_leaves_a_denied_problem_unmarked(reason):
    """ "No problem!" opens with a negation but says neither that the sentence is wrong nor that it is consistent."""
    with pytest.raises(ParseError, match="denies a problem"):
        verdict_mark(reason)


@pytest.mark.parametrize(
    "reason, mark",
    [
        ("No, the SOURCE says a grant pays.", -1),
        ("No evidence for this in the SOURCE.", -1),
        ("Not an error in the dates, but the budget is wrong.", -1),
    ],
)
def test_amc_rule_still_reads_a_negative_answer_as_minus_one(reason, mark):
    assert verdict_mark(reason) == mark


@pytest.mark.parametrize("reason", NEGATIONS[:3])
def test_dcr_amc_rule_scores_no_negation_as_consistent(reason):
    reply = json.dumps({"sentences": [{"id": i, "reason": reason} for i in (1, 2, 3)], "is_consistent": True})
    report = get_method("dcr", llm=LLM(FakeModel(default=reply), cache=None), amc="rule").check(SOURCE, TARGET)
    assert report.score != 1.0
    assert not any(v.label == "supported" for v in report.verdicts)


@pytest.mark.parametrize(
    "reason, mark", [("Consistent? Yes, the SOURCE says so.", 1), ("The sentence is supported.", 1)]
)
def test_amc_rule_still_reads_plain_positive_reasons(reason, mark):
    assert verdict_mark(reason) == mark


def test_amc_rule_leaves_a_positive_reason_with_a_negation_unmarked():
    """ "not April" may correct the sentence or restate the SOURCE: a negation beside a positive verdict is never +1
    (it was read as +1 before every reason form took a positive verdict back)."""
    with pytest.raises(ParseError, match="qualifies"):
        verdict_mark("Consistent: the SOURCE says March, not April.")
