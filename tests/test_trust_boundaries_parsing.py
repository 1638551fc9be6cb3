"""Trust boundaries of what halluscope reads: AMC by rule (``dcr -o amc=rule``) decides from a reason's structure,
a reply's second answer is never left unread, a text with nothing visible is no target, and a combiner file is
checked when it is read.

* AMC by rule (DCR paper, "Divide-Conquer-Reasoning for Consistency Evaluation and Automatic Improvement of Large
  Language Models", §3.2: +1 for a sentence found consistent, -1 otherwise) reads a reason's stated verdict and
  any qualifier of it. On 0c40462, 23 of the 26 hedged forms below and 12 of the 25 written afterwards read +1.
  A hedged positive verdict is unscored (never +1); an undecided reason is unscored (never -1 either).
* ``extract_json``: a second bracketed value over 8,000 characters that needs repair, a second value cut off, or
  prose that takes the answer back ("On second thought, ...") was ignored and the first answer scored.
* A target of U+2800, control characters, unassigned code points (U+2065, U+FFF0, U+E0080), a lone U+0301 or
  private-use characters was accepted (the gate labelled it consistent).
* A combiner file with weights of +-1e300 gave NaN and a silent 0.0, a reversed ``target_range`` gave 0.5
  ("consistent"), and deeply nested JSON crashed with exit 1 (the code for "inconsistent")."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.methods import InputError, OptionsError, get_method
from halluscope.methods.ensemble import (
    MAX_COEFFICIENT,
    MAX_FILE_DEPTH,
    CombinerFileError,
    load_combiner,
)
from halluscope.text import ParseError
from halluscope.text.blank import is_blank
from halluscope.text.parsing import MAX_REPAIR_CHARS, RetractedAnswerError, extract_json
from halluscope.text.verdict_words import qualifier, verdict_mark
from tests.stage_fuzz import SOURCE, TARGET

# ------------------------------------------------------------------------------------------ AMC by rule

HEDGED = [
    # "Consistent, albeit ..."
    "Consistent, albeit the article gives a slightly different figure.",
    "Consistent, albeit with a rounded number.",
    "This sentence is consistent with the article, albeit loosely worded.",
    # "with one discrepancy"
    "Consistent with the article, with one discrepancy: the year.",
    "Consistent, with a minor discrepancy in the date.",
    "Supported, with one small inaccuracy in the amount.",
    # "inaccuracy aside"
    "Consistent, the small inaccuracy aside.",
    "Accurate, that one detail aside.",
    "Correct, minor quibbles aside.",
    # "save that ..."
    "Consistent, save that the article names Tuesday.",
    "Supported save for the date.",
    "Consistent in every respect save one: the article says 2001.",
    # "the amount is off"
    "Consistent: the article gives the date; the amount is off.",
    "Correct. The figure is slightly off.",
    "Consistent. The amount is a bit off from the article's 40 million.",
    # other natural hedges
    "Consistent overall; the timeline is reordered.",
    "Essentially consistent with the article.",
    "Broadly accurate summary of the article.",
    "Consistent in spirit with the article.",
    "Consistent, notwithstanding the year.",
    "Consistent, despite a slip in the name.",
    "Consistent, if we ignore the date.",
    "Consistent, granted the article says 2001.",
    "Consistent. One caveat: the article gives a range.",
    "Consistent with the article; admittedly the figure is rounded.",
    "Technically correct: the article gives a range of 40 to 50 million.",
]
"""26 hedged forms of the five quoted families and other natural hedges: 23 of them read +1 on 0c40462."""

HEDGED_LATER = [
    "Consistent, give or take a year.",
    "Consistent, bar the date.",
    "Consistent, other than a small slip in the spelling.",
    "Consistent, though not word for word.",
    "Consistent; the number is a touch high.",
    "Correct in the main, the date excepted.",
    "Consistent - one small error: the name.",
    "Consistent, only the month differs.",
    "Accurate, more or less.",
    "Consistent with the article to within rounding.",
    "Consistent except that the day is Monday.",
    "Supported, though the article hedges the figure.",
    "Consistent, but for the year.",
    "Consistent, the one exception being the year.",
    "Consistent; the amount, however, is 40 million in the article.",
    "Consistent: close to the article's 40 million.",
    "Consistent, the date being the only inaccuracy.",
    "Correct, barring a misspelled name.",
    "Consistent, the date is a little early.",
    "Consistent, with the year slightly out.",
    "Consistent, modulo the date.",
    "Consistent in the essentials; the day is Monday in the article.",
    "Consistent up to the figure, which the article puts at 40 million.",
    "Supported for the most part.",
    "Consistent, aside from the name.",
]

HEDGED_MID_SENTENCE = [
    "It is consistent, give or take a year.",
    "It is accurate to within a year.",
    "Overall the claim is correct, bar the date.",
]
"""A positive verdict word inside the first sentence is read by the same structure as one that opens it."""

HEDGED_DENIALS = [
    "Consistent: no major errors.",
    "Consistent, with no significant discrepancy.",
    "Consistent: no obvious problems, no real issues.",
    "Consistent: no discrepancy except the year.",
]
"""A problem denied only in part ("no major errors") leaves room for lesser ones: never +1."""
"""25 hedges written after the mapping was built from :data:`HEDGED`: 12 read +1 on 0c40462, 8 with the word list
extended alone, 2 once the verdict's own clause was read by its structure (both then handled: "a touch high",
"close to")."""

CLEAR_POSITIVE = [
    "Consistent: the article states the council approved the budget on Tuesday.",
    "This sentence is consistent with the article.",
    "Supported: the source says the ferry sails in March.",
    "Correct - the article gives the same year.",
    "Verdict: consistent. The article reports the same figure.",
    "Consistent: no discrepancies with the article.",
    "This sentence is consistent with the article; there are no errors.",
    "Fully consistent with the source.",
    "Consistent with the article, which reports the same amount.",
    "Yes, the article states this.",
    "Consistent: the article says the first boat set off in March.",
    "Clearly supported by the second paragraph of the article.",
    "Consistent, with no inconsistencies found.",
    "The source supports the text, and the text is consistent with the source.",
]

CLEAR_NEGATIVE = [
    "Inconsistent: the article says 2001.",
    "This sentence is not consistent with the article.",
    "Not supported: the article does not mention the amount.",
    "Incorrect, the article names Tuesday.",
    "The article does not mention the ferry.",
    "Contradicted by the source: 40 million, not 50.",
    "Inconsistent, albeit only slightly: the amount is off.",
    "Wrong: the year is 2001.",
    "This sentence is inconsistent with the article, although the date is right.",
    "No, the article gives another figure.",
]
"""A negative verdict stays -1 whatever qualifies it (AMC's -1 is any problem reported)."""

UNDECIDED = [
    "Neither consistent nor inconsistent.",
    "Cannot determine whether the sentence is consistent.",
    "Not sure whether this is supported.",
    "Hard to say.",
    "It is unclear whether the article supports this.",
    "The article mentions Paris.",
    "No problems.",
    "Not inconsistent with the article.",
    "Consistent or inconsistent, depending on how the date is read.",
    "Partially consistent.",
    "Insufficient information to judge.",
    "Consistent? Hard to say.",
]
"""No decision stated: unscored. Three of them ("Neither ...", "Not sure ...", "Not inconsistent ...") were -1."""


def test_the_table_has_the_rows_it_claims():
    assert len(HEDGED) == 26 and len(HEDGED_LATER) == 25
    rows = HEDGED + HEDGED_LATER + HEDGED_MID_SENTENCE + HEDGED_DENIALS + CLEAR_POSITIVE + CLEAR_NEGATIVE + UNDECIDED
    assert len(rows) == len(set(rows)) >= 40


@pytest.mark.parametrize("reason", HEDGED + HEDGED_LATER + HEDGED_MID_SENTENCE)
def test_a_hedged_positive_verdict_is_unscored_with_its_qualifier(reason):
    with pytest.raises(ParseError, match="qualifies its positive verdict"):
        verdict_mark(reason)


@pytest.mark.parametrize("reason", HEDGED_DENIALS)
def test_a_problem_denied_in_part_is_never_plus_one(reason):
    with pytest.raises(ParseError):
        verdict_mark(reason)


@pytest.mark.parametrize("reason", CLEAR_POSITIVE)
def test_a_clear_positive_verdict_is_plus_one(reason):
    assert verdict_mark(reason) == 1


@pytest.mark.parametrize("reason", CLEAR_NEGATIVE)
def test_a_clear_negative_verdict_is_minus_one(reason):
    assert verdict_mark(reason) == -1


@pytest.mark.parametrize("reason", UNDECIDED)
def test_an_undecided_reason_is_unscored(reason):
    with pytest.raises(ParseError):
        verdict_mark(reason)


@pytest.mark.parametrize(
    "text, kind",
    [
        ("Consistent, albeit loosely.", "exception"),
        ("Consistent, with one discrepancy.", "conceded problem"),
        ("Consistent: the amount is off.", "conceded problem"),
        ("Mostly consistent.", "hedge"),
        ("Reasonably consistent.", "hedge"),  # an -ly adverb on the verdict, listed or not
        ("Consistent: on second thought, the year.", "second thought"),
        ("Consistent?", "question"),
    ],
)
def test_the_qualifier_is_named_by_its_kind(text, kind):
    found = qualifier(text)
    assert found is not None and found[0] == kind


@pytest.mark.parametrize("verb_phrase", ["set off in March", "took off on Monday", "sails off the coast"])
def test_off_in_a_restated_fact_is_no_qualifier(verb_phrase):
    assert verdict_mark(f"Consistent: the article says the ferry {verb_phrase}.") == 1


def test_dcr_amc_rule_scores_no_hedged_sentence_consistent():
    for reason in HEDGED[:13]:  # the five quoted families
        reply = json.dumps({"sentences": [{"id": i, "reason": reason} for i in (1, 2, 3)], "is_consistent": True})
        report = get_method("dcr", llm=LLM(FakeModel(default=reply), cache=None), amc="rule").check(SOURCE, TARGET)
        assert report.score != 1.0, reason
        assert not any(v.label == "supported" for v in report.verdicts), reason
        assert any(v.label == "unscored" and "qualifies" in v.reason for v in report.verdicts), reason


# ------------------------------------------------------------------------------------------ second answers

ANSWER = '{"reason": "stated", "score": 5}'


def test_a_second_answer_too_long_to_repair_is_refused():
    second = '{"reason": "' + "x" * MAX_REPAIR_CHARS + '", "score": 1,}'  # a trailing comma: repair needed
    assert len(second) > MAX_REPAIR_CHARS
    with pytest.raises(ParseError, match="too long to repair"):
        extract_json(ANSWER + "\nOn reflection:\n" + second)
    with pytest.raises(ParseError, match="too long to repair"):
        extract_json(second)  # alone: the refusal says why, not "no JSON found"


def test_a_second_answer_cut_off_is_refused():
    with pytest.raises(ParseError, match="cut off"):
        extract_json(ANSWER + '\nWait: {"reason": "not stated", "score": 1')


@pytest.mark.parametrize(
    "after",
    [
        "\nOn second thought, the sentence is not consistent.",
        "\nScratch that: the year is wrong.",
        "\nPlease disregard the above answer.",
        "\nI retract that score; the summary adds a claim.",
        "\nActually, no. The source gives another year.",
        "\nLet me correct that: the amount is 40 million.",
        "\nI was wrong, the date differs.",
    ],
)
def test_prose_that_takes_the_answer_back_is_refused(after):
    with pytest.raises(RetractedAnswerError, match="takes its answer back"):
        extract_json(ANSWER + after)
    with pytest.raises(RetractedAnswerError):  # a value of another type after the retraction hides nothing
        extract_json(ANSWER + after + " See [1].", expect=dict)
    with pytest.raises(RetractedAnswerError):  # nor does an answer that needed syntax repair
        extract_json(ANSWER.replace('"score": 5', "'score': 5") + after)


def test_an_answer_restated_after_a_second_thought_is_its_final_word():
    assert extract_json(ANSWER + "\nOn second thought, I keep it:\n" + ANSWER) == {"reason": "stated", "score": 5}


@pytest.mark.parametrize(
    "reply",
    [
        ANSWER,
        "On second thought, here is my answer:\n" + ANSWER,  # a second thought before the answer
        ANSWER + "\nThe source states the same year.",
        "```json\n" + ANSWER + "\n```\nThat is my final verdict.",
        ANSWER + "\nThe set {ferry, bridge} is named in the source.",
        ANSWER + "\nThe summary says 2001; that is wrong. Correction: the source says 2002.",  # explains, not retracts
    ],
)
def test_an_answer_with_harmless_prose_is_still_read(reply):
    assert extract_json(reply) == {"reason": "stated", "score": 5}


def test_geval_leaves_a_retracted_answer_unscored():
    reply = '{"reason": "all stated", "score": 5}\nOn second thought, the year is wrong.'
    report = get_method("geval", llm=LLM(FakeModel(default=reply), cache=None)).check(SOURCE, TARGET)
    assert report.score is None and "takes its answer back" in (report.unscored_reason or "")


# ------------------------------------------------------------------------------------------ blank targets

BLANK_LOOKING = [
    "\u2800",  # braille pattern blank
    "\u2800 \u2800\u2800",
    "\x01\x02\x1b",  # control characters
    "\x00 \x7f",
    "\u2065",  # unassigned (Cn)
    "\ufff0",
    "\U000e0080",
    "\u0301",  # a combining mark with nothing to sit on
    " \u0301\u0308 ",
    "\ue000\uf8ff",  # private use
    "\U000f0000\U0010fffd",
]


@pytest.mark.parametrize("text", BLANK_LOOKING)
def test_a_text_with_nothing_visible_is_blank(text):
    assert is_blank(text)


@pytest.mark.parametrize("text", ["a\u0301", "\u2800x", "~", "\ue000 1", "\x01A"])
def test_a_visible_character_beside_them_is_text(text):
    assert not is_blank(text)


@pytest.mark.parametrize("text", BLANK_LOOKING)
def test_the_gate_refuses_a_blank_looking_target(text):
    with pytest.raises(InputError, match="target is empty"):
        get_method("gate").check(SOURCE, text)


@pytest.mark.parametrize("text", ["\u2800", "\x01\x02", "\u2065", "\ufff0", "\U000e0080", "\u0301", "\ue000"])
def test_the_cli_refuses_a_blank_looking_target_with_exit_2(tmp_path, text):
    source, target = tmp_path / "s.txt", tmp_path / "t.txt"
    source.write_text(SOURCE, encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", "gate"])
    assert result.exit_code == 2, result.output
    assert "target" in result.output and "empty" in result.output and "Traceback" not in result.output


# ------------------------------------------------------------------------------------------ combiner files


def _combiner(**changes) -> dict:
    feature = {
        "name": "rouge.score",
        "member": "rouge",
        "source": "score",
        "mean": 0.5,
        "scale": 0.25,
        "min": 0.0,
        "max": 1.0,
        "weight": 1.0,
    }
    feature.update(changes.pop("feature", {}))
    second = dict(feature, name="gate.score", member="gate", **changes.pop("second", {}))
    data: dict = {
        "format": "halluscope-combiner/1",
        "kind": "binary",
        "estimator": {"class": "hand-written for a test"},
        "intercept": 0.0,
        "threshold": 0.5,
        "members": [{"name": "rouge", "method": "rouge"}, {"name": "gate", "method": "gate"}],
    }
    data["features"] = [feature, second]
    data.update(changes)
    return data


def _write(tmp_path, data, name="c.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return str(path)


def test_a_well_formed_combiner_still_loads_and_scores(tmp_path):
    path = _write(tmp_path, _combiner())
    report = get_method("ensemble", combiner=path).check(SOURCE, TARGET)
    assert report.score is not None and math.isfinite(report.score)


@pytest.mark.parametrize(
    "data, where",
    [
        (_combiner(feature={"weight": 1e300}, second={"weight": -1e300}), "features.0.weight"),
        (_combiner(second={"weight": -1e300}), "features.1.weight"),
        (_combiner(intercept=-1e300), "intercept"),
        (_combiner(feature={"min": 1.0, "max": 0.0}), "min (1.0) is above max (0.0)"),
        (_combiner(feature={"scale": 1e-300}), "standardised values"),
        (_combiner(kind="score", target_range=[5.0, 1.0]), "target_range"),
        (_combiner(kind="score", target_range=[1.0, 1.0]), "target_range"),
        (_combiner(kind="score", target_range=[-1e308, 1e308]), "target_range"),
    ],
)
def test_an_unusable_combiner_is_refused_when_read_naming_the_field(tmp_path, data, where):
    path = _write(tmp_path, data)
    with pytest.raises(CombinerFileError) as caught:
        load_combiner(path)
    assert where in str(caught.value)
    with pytest.raises(OptionsError, match="ensemble"):
        get_method("ensemble", combiner=path)


def test_the_cli_refuses_unbounded_weights_with_exit_2(tmp_path):
    path = _write(tmp_path, _combiner(feature={"weight": 1e300}, second={"weight": -1e300}))
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    args = ["check", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--method", "ensemble"]
    result = CliRunner().invoke(app, [*args, "-o", f"combiner={path}"])
    assert result.exit_code == 2, result.output
    assert "features.0.weight" in result.output and "Traceback" not in result.output
    assert abs(load_combiner(_write(tmp_path, _combiner(feature={"weight": MAX_COEFFICIENT}))).features[0].weight) > 1


@pytest.mark.parametrize("depth", [MAX_FILE_DEPTH + 5, 100_000])
def test_a_deeply_nested_combiner_is_refused_with_exit_2(tmp_path, depth):
    data = json.dumps(_combiner())[:-1] + ', "cv": ' + "[" * depth + "]" * depth + "}"
    path = _write(tmp_path, data)
    with pytest.raises(CombinerFileError, match="nests"):
        load_combiner(path)
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    args = ["check", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--method", "ensemble"]
    result = CliRunner().invoke(app, [*args, "-o", f"combiner={path}"])
    assert result.exit_code == 2, result.output
    assert "nests" in result.output and "Traceback" not in result.output


def test_a_combined_value_that_is_not_a_number_is_never_a_silent_score(tmp_path):
    method = get_method("ensemble", combiner=_write(tmp_path, _combiner()))
    method.combiner = method.combiner.model_copy(update={"intercept": math.nan})  # past the checks on reading
    report = method.check(SOURCE, TARGET)
    assert report.score is None and "not a number" in (report.unscored_reason or "")
    with pytest.raises(CombinerFileError):
        method.combiner.to_score(math.inf - math.inf)
