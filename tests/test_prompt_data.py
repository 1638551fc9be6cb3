"""The test helpers that read a prompt's fenced data."""

import pytest

from tests.prompt_data import fenced, listing, user_text

PROMPT = (
    "Example:\n<claim_aa11>\nan example claim\n</claim_aa11>\nNow:\n<claim_bb22>\nThe ferry runs hourly.\n"
    "</claim_bb22>\n<units_cc33>\n1. First one.\n2. Second one.\n</units_cc33>"
)


def test_fenced_reads_the_last_value_of_that_name():
    assert fenced(PROMPT, "claim") == "The ferry runs hourly."
    assert (
        fenced(
            [
                {"role": "system", "content": "<claim_x>\nno\n</claim_x>"},
                {"role": "user", "content": "<source_k1>\nS\n</source_k1>"},
                {"role": "user", "content": PROMPT},
            ],
            "source",
        )
        == "S"
    )


def test_a_missing_value_is_an_error_unless_a_default_is_given():
    with pytest.raises(AssertionError, match="no fenced evidence"):
        fenced(PROMPT, "evidence")
    assert fenced(PROMPT, "evidence", "") == ""


def test_listing_numbers_its_lines():
    assert listing(PROMPT, "units") == [(1, "First one."), (2, "Second one.")]
    assert (
        user_text(
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
        )
        == "a\nc"
    )
