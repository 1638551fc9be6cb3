"""Fuzz every core parser with >= 1,000 garbled, truncated and non-JSON replies.

The contract: a parser returns a value or raises ParseError (or pydantic's ValidationError for schema
parsers); nothing else escapes. Driven end to end, a method turns every failure into an unscored Report
with a reason and keeps the raw replies.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from halluscope.llm import LLM, FakeModel
from halluscope.llm.structured import generate_structured, json_parser
from halluscope.methods.geval import GEval, GevalReply
from halluscope.text.parsing import ParseError, extract_json, parse_items_after_marker
from tests.garble import garbled_replies

REPLIES = list(dict.fromkeys(garbled_replies(2500, seed=7)))  # distinct, in generation order


def test_there_are_enough_garbled_replies() -> None:
    assert len(REPLIES) >= 1000


class Claims(BaseModel):
    claims: list[str]


class Judgement(BaseModel):
    label: str
    reason: str = ""


PARSERS = {
    "extract_json": extract_json,
    "extract_json_dict": lambda text: extract_json(text, dict),
    "items": parse_items_after_marker,
    "items_after_marker": lambda text: parse_items_after_marker(text, "Final answer:"),
    "json_parser_list_schema": json_parser(Claims),
    "json_parser_object_schema": json_parser(Judgement),
    "json_parser_geval": json_parser(GevalReply),
    "geval_reply": GevalReply.parse,
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parser_never_raises_anything_but_parse_errors(name: str) -> None:
    parse = PARSERS[name]
    ok = failed = 0
    for reply in REPLIES:
        try:
            parse(reply)
        except (ParseError, ValidationError):
            failed += 1
        else:
            ok += 1
    assert ok + failed == len(REPLIES)
    assert failed > 0  # the garble set really contains unparseable replies for every parser


def test_parse_geval_success_is_always_in_range() -> None:
    for reply in REPLIES:
        try:
            rating = GevalReply.parse(reply).score
        except (ParseError, ValidationError):
            continue
        assert 1 <= rating <= 5


async def test_generate_structured_turns_every_garbled_reply_into_value_or_reason() -> None:
    llm = LLM(FakeModel(REPLIES * 2), cache=None)  # the garbled replies in order
    errors = 0
    for _ in range(len(REPLIES) // 2):
        parsed = await generate_structured(llm, [{"role": "user", "content": "list the claims"}], Claims)
        assert 1 <= len(parsed.calls) <= 2
        if parsed.value is None:
            errors += 1
            assert parsed.error and parsed.error.startswith("unparseable reply after 2 attempt(s)")
            assert len(parsed.calls) == 2
        else:
            assert isinstance(parsed.value, Claims)
    assert errors > 0


async def test_geval_end_to_end_on_garbled_replies() -> None:
    method = GEval(llm=LLM(FakeModel(REPLIES), cache=None))  # the garbled replies in order
    pairs = [("The mayor opened the bridge on Monday.", f"The mayor opened a bridge. ({i})") for i in range(500)]
    reports = await method.acheck_many(pairs, concurrency=8)
    assert len(reports) == 500
    unscored = [r for r in reports if r.score is None]
    assert unscored, "some garbled replies must fail"
    for report in reports:
        assert report.calls and report.usage.calls == len(report.calls) <= 2
        if report.score is None:
            assert report.label is None
            assert len(report.calls) == 2 and all(isinstance(c.reply, str) for c in report.calls)
        else:
            assert report.subscores["rating"] in (1.0, 2.0, 3.0, 4.0, 5.0)
            assert report.score == (report.subscores["rating"] - 1) / 4
