"""Every ``dove`` parser and the whole method against >= 1,000 garbled replies (tests/garble.py)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.methods.dove import (Dove, parse_batch_judgments, parse_decomposition, parse_event_order,
                                     parse_fact_judgment)
from halluscope.text import ParseError
from tests.garble import garbled_replies

REPLIES = garbled_replies(1200)
EVENTS = ["Anna baked a cake", "Ben arrived", "They ate the cake"]

PARSERS = {
    "decomposition": parse_decomposition,
    "fact_judgment": parse_fact_judgment,
    "batch_judgments": lambda text: parse_batch_judgments(text, 3),
    "event_order": lambda text: parse_event_order(text, EVENTS),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parser_returns_or_raises_parse_error(name):
    parse = PARSERS[name]
    parsed = failed = 0
    for reply in REPLIES:
        try:
            parse(reply)
            parsed += 1
        except ParseError as exc:
            assert str(exc)  # a failure always says why
            failed += 1
    assert parsed + failed == len(REPLIES) and failed > 0


def test_event_order_results_are_always_valid_indices():
    for reply in REPLIES:
        try:
            out = parse_event_order(reply, EVENTS)
        except ParseError:
            continue
        assert len(set(out.order)) == len(out.order) >= 2
        assert set(out.order) | set(out.missing) == set(range(len(EVENTS)))


class GarbledResponder:
    """Garbled replies in turn; optionally a valid decomposition so the checker and sorter get garbage too."""

    def __init__(self, valid_decomposition: bool):
        self.replies = itertools.cycle(REPLIES)
        self.used = 0
        self.valid_decomposition = valid_decomposition

    def __call__(self, messages) -> str:
        first = next(m["content"] for m in messages if m["role"] == "user")
        if self.valid_decomposition and "Split the TEXT below" in first:
            return ('{"event_facts": ["Ben arrived.", "Anna baked a cake.", "Anna and Ben ate the cake."], '
                    '"descriptive_facts": ["Anna is a cook."]}')
        self.used += 1
        return next(self.replies)


@pytest.mark.parametrize("valid_decomposition", [False, True])
def test_dove_end_to_end_on_garbled_replies(valid_decomposition):
    """No exception escapes; every failure is an unscored verdict or report with a reason."""
    responder = GarbledResponder(valid_decomposition)
    method = Dove(llm=LLM(FakeModel(responder=responder)), batch_size=2)
    source = "Anna baked a cake. Then Ben arrived. They ate the cake together."
    target = "Ben arrived. Anna baked a cake. They ate it. Anna is a cook."

    async def until_all_used():
        reports = []
        while responder.used < len(REPLIES):
            reports.append(await method.acheck(source, target))
        return reports

    reports = asyncio.run(until_all_used())
    for report in reports:
        assert (report.score is None) == bool(report.unscored_reason)
        if report.score is not None:
            assert 0.0 <= report.score <= 1.0
        for verdict in report.verdicts:
            assert verdict.label != "unscored" or verdict.reason
            assert verdict.calls  # the raw replies are kept
    assert any(r.score is None for r in reports)
    if valid_decomposition:
        assert any(v.label == "unscored" for r in reports for v in r.verdicts)
