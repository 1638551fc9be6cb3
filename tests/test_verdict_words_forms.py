"""``dcr -o amc=rule`` never reads a hedged, corrected, restricted or negated reason as +1.

The mapping comes from one list of reason forms (``REASON_FORMS`` in ``halluscope.text.verdict_words``); the
properties below generate phrasings that combine a positive opener with a hedge, an exception, a correction, a
negation or a second thought, and check that none of them is +1 (each is -1 or left unmarked)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.text import ParseError
from halluscope.text.verdict_words import REASON_FORMS, verdict_mark
from tests.stage_fuzz import SOURCE, TARGET

AUDIT_REASONS = [
    "Is it consistent? No, the SOURCE says a grant pays.",
    "Consistent: yes. On reflection, inconsistent: the SOURCE names a grant.",
    "Consistent (except the funding: the SOURCE says a grant pays).",
    "Supported only partly: the SOURCE gives another year.",
    "Largely correct; the SOURCE actually says two thirds come from a grant.",
    "Correct apart from the funding: the SOURCE says a grant pays.",
    "Mostly consistent, yet the SOURCE gives another year.",
    "Consistent in part; the claim about the budget is unfounded.",
]
"""Hedged, corrected or restricted reasons that ``amc=rule`` read as +1 on 22b0ee2."""


def mark_or_none(reason: str) -> int | None:
    try:
        return verdict_mark(reason)
    except ParseError:
        return None


@pytest.mark.parametrize("reason", AUDIT_REASONS)
def test_the_audit_reasons_are_never_plus_one(reason):
    assert mark_or_none(reason) != 1, reason


@pytest.mark.parametrize("reason", AUDIT_REASONS)
def test_dcr_amc_rule_does_not_score_them_consistent(reason):
    reply = json.dumps({"sentences": [{"id": i, "reason": reason} for i in (1, 2, 3)], "is_consistent": True})
    report = get_method("dcr", llm=LLM(FakeModel(default=reply), cache=None), amc="rule").check(SOURCE, TARGET)
    assert report.score != 1.0
    assert not any(v.label == "supported" for v in report.verdicts)


OPENERS = [
    "Consistent",
    "Supported",
    "Correct",
    "Accurate",
    "True",
    "Yes",
    "This sentence is consistent",
    "The claim is supported",
    "Verdict: consistent",
    "1. Consistent",
    "- Correct",
    "**Consistent**",
    "consistent",
    "CONSISTENT",
]
JOINS = [" ", ", ", ": ", "; ", " - ", ". ", " (", " — ", "... ", ":\n"]
TAILS = ["", " the funding", " the SOURCE says a grant pays.", ": the year is 2001.", " this part)."]
ALL_FORMS = sorted({form for forms in REASON_FORMS.values() for form in forms})
NEGATIVE_TAILS = ["inconsistent", "not supported", "wrong", "unfounded", "incorrect", "the SOURCE actually says 2001"]


def _cased(form: str, style: int) -> str:
    return [form, form.capitalize(), form.upper()][style]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    st.sampled_from(OPENERS),
    st.sampled_from(JOINS),
    st.sampled_from(ALL_FORMS),
    st.integers(0, 2),
    st.sampled_from(TAILS),
    st.booleans(),
)
def test_a_positive_opener_with_any_reason_form_is_never_plus_one(opener, join, form, style, tail, form_first):
    """Every form of every kind (hedge, exception, correction, second thought, negation), before or after a
    positive opener, in any case, with any punctuation between: -1 or unmarked, never +1."""
    form = _cased(form, style)
    reason = f"{form} {opener.lower()}{tail}" if form_first else f"{opener}{join}{form}{tail}"
    assert mark_or_none(reason) != 1, reason


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.sampled_from(OPENERS),
    st.sampled_from(JOINS),
    st.sampled_from(["On reflection", "Actually", "Wait", "On second thought", "Correction", "But"]),
    st.sampled_from(NEGATIVE_TAILS),
)
def test_a_positive_opener_taken_back_later_is_never_plus_one(opener, join, turn, negative):
    reason = f"{opener}{join}yes. {turn}, {negative}: the SOURCE names a grant."
    assert mark_or_none(reason) != 1, reason


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.sampled_from(
        ["Is it consistent?", "Consistent?", "Is this supported?", "Is the claim correct?", "Was it accurate?"]
    ),
    st.sampled_from(["No", "Not really", "No, not at all", "Nope", "Hardly", "Partly", "Only in part"]),
    st.sampled_from(TAILS),
)
def test_a_question_answered_otherwise_than_yes_is_never_plus_one(question, answer, tail):
    assert mark_or_none(f"{question} {answer}{tail}") != 1


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.sampled_from(
        [
            "Consistent",
            "Supported",
            "Correct",
            "This sentence is consistent with the article",
            "The sentence is supported",
            "Verdict: consistent",
        ]
    ),
    st.sampled_from(
        [
            ".",
            ": stated in the SOURCE.",
            ": the SOURCE says the city pays.",
            "; the SOURCE states it.",
            " - the article gives the same year.",
        ]
    ),
)
def test_plain_positive_reasons_are_still_plus_one(opener, tail):
    """The mapping is no blanket refusal: a positive reason with no reason form in it is +1."""
    assert verdict_mark(opener + tail) == 1
