"""Sentence segmentation with exact offsets, span location, and defensive reply parsing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from halluscope.text import ParseError, extract_json, locate, parse_items_after_marker, split_sentences


def sentences(text: str) -> list[str]:
    return [s.text for s in split_sentences(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Dr. Smith moved to the U.S. in 2010. He earned $3.5 million, e.g. from stocks. Then he left.",
            ["Dr. Smith moved to the U.S. in 2010.", "He earned $3.5 million, e.g. from stocks.", "Then he left."],
        ),
        (
            "Mr. and Mrs. Jones went to Washington D.C. on Jan. 5. They stayed.",
            ["Mr. and Mrs. Jones went to Washington D.C. on Jan. 5.", "They stayed."],
        ),
        (
            "Temperatures rose by 2.5 degrees. Prices fell 3.2%.",
            ["Temperatures rose by 2.5 degrees.", "Prices fell 3.2%."],
        ),
        (
            'She said "I will go." Then she went. "Really?" he asked.',
            ['She said "I will go."', "Then she went.", '"Really?" he asked.'],
        ),
        ("Question? Exclamation! Done.", ["Question?", "Exclamation!", "Done."]),
        ("Para one ends.\n\nPara two starts. And ends.", ["Para one ends.", "Para two starts.", "And ends."]),
        ("Title line\nFirst sentence here.", ["Title line", "First sentence here."]),
        (
            "Findings:\n- first item\n- second item\n* third\n1. numbered\n2) numbered two",
            ["Findings:", "- first item", "- second item", "* third", "1. numbered", "2) numbered two"],
        ),
        ("Line one\r\nLine two.\r\n\r\nPara.", ["Line one", "Line two.", "Para."]),
        ("  padded sentence.   ", ["padded sentence."]),
        ("no final punctuation", ["no final punctuation"]),
        ("a.??", ["a.??"]),  # pysbd drops the "??"; it must stay attached
        ("", []),
        ("   \n\n ", []),
    ],
)
def test_split_sentences_cases(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_sentence_spans_index_the_original_text() -> None:
    text = "Intro line\n\nDr. A met Mr. B. They talked.\n- item one\n- item two"
    found = split_sentences(text)
    assert [s.index for s in found] == list(range(len(found)))
    for s in found:
        assert s.span.of(text) == s.text


_PIECES = list("ab Z.?!\n\t-*1)\"'“”…:;(),é0") + ["Dr.", "U.S.", "e.g.", "3.5", "\r\n", "  ", "\n\n", "- ", "2) "]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_split_sentences_covers_every_character_exactly(text: str) -> None:
    found = split_sentences(text)
    covered = [False] * len(text)
    previous_end = 0
    for s in found:
        assert s.text and s.text == s.text.strip()
        assert text[s.span.start : s.span.end] == s.text
        assert s.span.start >= previous_end  # ordered, no overlap
        previous_end = s.span.end
        covered[s.span.start : s.span.end] = [True] * len(s.span)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))


SOURCE = (
    "The company reported revenue of $4.2 billion in 2023, up 12% from the previous year. "
    "CEO Jane Doe said growth came from cloud services."
)


def test_locate_exact_normalized_fuzzy() -> None:
    exact = locate("revenue of $4.2 billion", SOURCE)
    assert exact.how == "exact" and exact.span.of(SOURCE) == "revenue of $4.2 billion"
    norm = locate("Revenue  of $4.2\nBILLION", SOURCE)
    assert norm.how == "normalized" and norm.span.of(SOURCE) == "revenue of $4.2 billion"
    fuzzy = locate("CEO Jane Doe said the growth came from cloud service", SOURCE)
    assert fuzzy.how == "fuzzy" and fuzzy.score >= 85
    assert fuzzy.span.of(SOURCE).startswith("CEO Jane Doe said growth")


def test_locate_strips_the_quotes_a_model_adds() -> None:
    for quoted in ('"growth came from cloud services"', "“growth came from cloud services”", "'previous year'"):
        match = locate(quoted, SOURCE)
        assert match is not None and match.how == "exact", quoted
        assert match.span.of(SOURCE) in ("growth came from cloud services", "previous year")


def test_locate_drops_the_prompt_fence_tags_a_model_copies_into_its_quote() -> None:
    # the 1.5B model quoted PROBE evidence as "<source_KEY>sentence</source_KEY>" in 35 of 38 FINAL replies
    for quoted in (
        "<source_0223f20577>revenue of $4.2 billion</source_0223f20577>",
        "<source_0223f20577>\nrevenue of $4.2 billion",
        "revenue of $4.2 billion\n</source_0223f20577>",
    ):
        match = locate(quoted, SOURCE)
        assert match is not None and match.how == "exact" and match.span.of(SOURCE) == "revenue of $4.2 billion"
    assert locate("<source_0223f20577>revenue of $9.9 trillion from mining</source_0223f20577>", SOURCE) is None
    tagged = "Raw markup: <source_0223f20577>kept</source_0223f20577> here."  # a text that holds such tags itself
    assert locate("<source_0223f20577>kept</source_0223f20577>", tagged).span.of(tagged) == (
        "<source_0223f20577>kept</source_0223f20577>"
    )


def test_locate_unifies_typographic_quotes_and_dashes() -> None:
    text = "He called it “a turning point” – twice."
    match = locate('called it "a turning point" - twice', text)
    assert match.how == "normalized" and match.span.of(text) == "called it “a turning point” – twice"


def test_locate_rejects_inventions_and_short_fuzz() -> None:
    assert locate("completely unrelated invented sentence about cats", SOURCE) is None
    assert locate("reported revenue of 4.2 billion dollars in 2023", SOURCE) is None
    assert locate("Jan Dox", SOURCE) is None  # too short for fuzzy matching
    assert locate("Jane Dox", SOURCE).span.of(SOURCE).startswith("Jane Do")  # 8+ characters: a typo is found
    assert locate("", SOURCE) is None and locate("x", "") is None
    # A needle that contains the whole haystack plus invented material is not a match to the haystack.
    padded = SOURCE + " And then a great deal of further invented material follows here, at length."
    assert locate(padded, SOURCE) is None


def test_locate_from_a_start_offset() -> None:
    text = "The cat sat. The cat ran."
    first = locate("The cat", text)
    second = locate("The cat", text, start=first.span.end)
    assert (first.span.start, second.span.start) == (0, 13)
    assert locate("the  CAT", text, start=1).span.start == 13
    assert locate("The cat sat.", text, start=20) is None


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"score": 4}', {"score": 4}),
        ('Sure! Here it is:\n```json\n{"score": 4}\n```\nHope this helps.', {"score": 4}),
        ('<think>maybe {"score": 1}</think>{"score": 5}', {"score": 5}),
        ('I think [maybe] {"score": 4, "reason": "ok"}', {"score": 4, "reason": "ok"}),
        ('He said "hi. {"score": 4}', {"score": 4}),
        ('{"reason": "a \\"quoted\\" } brace", "score": 2} trailing', {"reason": 'a "quoted" } brace', "score": 2}),
        ('[{"id": 1}, {"id": 2}]', [{"id": 1}, {"id": 2}]),
        ("{'score': 3, 'reason': 'single quotes'}", {"score": 3, "reason": "single quotes"}),
        ("{}", {}),
    ],
)
def test_extract_json(reply: str, expected) -> None:
    assert extract_json(reply) == expected


def test_extract_json_expect_and_failures() -> None:
    assert extract_json('[1, 2] then {"a": 1}', dict) == {"a": 1}
    assert extract_json('[1, 2] then {"a": 1}', list) == [1, 2]
    # a reply cut off mid-value is refused, never completed; prose in brackets is never a value
    for bad in (
        "",
        "   ",
        "no json here",
        "{{{{",
        "```",
        "null",
        "42",
        '{"claims": [{"text": "a"}, {"text": "b"',
        "I found [nothing]",
        "[maybe, perhaps]",
    ):
        with pytest.raises(ParseError):
            extract_json(bad)


@pytest.mark.parametrize(
    ("reply", "marker", "expected"),
    [
        ("1. The date is wrong.\n2. The name is invented.", None, ["The date is wrong.", "The name is invented."]),
        ("Reasoning first.\nAnswer:\n- a\n- b", "Answer:", ["a", "b"]),
        ("answer: first\nANSWER: second", "Answer:", ["second"]),  # the last marker wins
        ("Answer: None", "Answer:", []),
        ("None.", None, []),
        ('["x", " y "]', None, ["x", "y"]),
        ("* one\n\n(2) two\na) three", None, ["one", "two", "three"]),
        ("<think>Answer: nonsense</think>Answer: real", "Answer:", ["real"]),
    ],
)
def test_parse_items_after_marker(reply: str, marker: str | None, expected: list[str]) -> None:
    assert parse_items_after_marker(reply, marker) == expected


@pytest.mark.parametrize(
    ("reply", "marker"), [("", None), ("no marker here", "Answer:"), ("Answer:   ", "Answer:"), ("- \n* ", None)]
)
def test_parse_items_after_marker_failures(reply: str, marker: str | None) -> None:
    with pytest.raises(ParseError):
        parse_items_after_marker(reply, marker)
