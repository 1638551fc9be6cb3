"""Every ``dove`` parser and the whole method against garbled replies (tests/garble.py plus mutated valid
replies): some parse, some fail (both counts > 0), nothing else escapes, and no verdict or event order comes
from a reply that does not state one."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.methods.dove import (
    Dove,
    parse_batch_judgments,
    parse_decomposition,
    parse_event_order,
    parse_fact_judgment,
)
from halluscope.text import ParseError
from tests.garble import garbled_replies
from tests.prompt_data import fenced, listing
from tests.reply_fuzz import mutations, parse_each

EVENTS = ["Anna baked a cake", "Ben arrived", "They ate the cake"]
VALID_REPLIES = [
    '{"event_facts": ["Ben arrived.", "Anna baked a cake."], "descriptive_facts": ["Anna is a cook."]}',
    '{"event_facts": [], "descriptive_facts": []}',
    '{"reason": "stated", "evidence": "Anna baked a cake", "supported": true}',
    '{"supported": false}',
    '{"reason": "no", "supported": false, "contradicted": true}',
    '{"results": [{"id": 1, "supported": true}, {"id": 2, "supported": false}, {"id": 3, "supported": true}]}',
    '[{"id": 2, "reason": "r", "supported": true}]',
    '{"order": [2, 1, 3]}',
    "[3, 1, 2]",
    '["Ben arrived", "Anna baked a cake"]',
]
NO_VERDICT = [
    "Supported? No.",
    '{"supported": null}',
    '{"supported": "yes"}',
    "No problem!",
    "True.",
    '{"verdict": "supported"}',
    '{"x": {"supported": true}}',
    '{"supported": tr',
    "",
    "[]",
    "{}",
]


REPLIES = garbled_replies(1200) + VALID_REPLIES + NO_VERDICT + mutations(VALID_REPLIES, 400)

PARSERS = {
    "decomposition": parse_decomposition,
    "fact_judgment": parse_fact_judgment,
    "batch_judgments": lambda text: parse_batch_judgments(text, 3),
    "event_order": lambda text: parse_event_order(text, EVENTS),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parser_returns_or_raises_parse_error(name):
    parsed, refused = parse_each(PARSERS[name], REPLIES)
    assert parsed and refused
    assert all(str(exc) for exc in refused)  # a failure always says why


def test_no_verdict_replies_are_refused_by_the_fact_parsers():
    for reply in NO_VERDICT:
        with pytest.raises(ParseError):
            parse_fact_judgment(reply)
        with pytest.raises(ParseError):
            parse_batch_judgments(reply, 3)


def test_event_order_results_are_always_valid_indices():
    for reply in REPLIES:
        try:
            out = parse_event_order(reply, EVENTS)
        except ParseError:
            continue
        assert len(set(out.order)) == len(out.order) >= 2
        assert set(out.order) | set(out.missing) == set(range(len(EVENTS)))
        assert not set(out.order) & set(out.missing)


def test_batch_results_cover_every_fact_once():
    for reply in REPLIES:
        try:
            out = parse_batch_judgments(reply, 3)
        except ParseError:
            continue
        assert out.judged and set(out.judged) | set(out.missing) == {0, 1, 2}
        assert not set(out.judged) & set(out.missing)


# --- end to end ----------------------------------------------------------------------------------------------

SOURCE = "Anna baked a cake. Then Ben arrived. They ate the cake together."
TARGET = "Ben arrived. Anna baked a cake. They ate it. Anna is a cook."
DECOMPOSITION = (
    '{"event_facts": ["Ben arrived.", "Anna baked a cake.", "Anna and Ben ate the cake."], '
    '"descriptive_facts": ["Anna is a cook."]}'
)


def is_sorter_call(call) -> bool:
    """Whether a logged call is the sorter's: it is the one that shows the events (fenced as ``events``)."""
    return bool(fenced(call.messages, "events", ""))


class GarbledResponder:
    """A script keyed by reply type: the pool's replies in turn to every request (decomposition, checks, sorter),
    or optionally a valid decomposition so the checker and sorter get them."""

    def __init__(self, pool: list[str], valid_decomposition: bool):
        self.replies = itertools.cycle(pool)
        self.size = len(pool)
        self.used = 0
        self.valid_decomposition = valid_decomposition

    def next_reply(self, messages) -> str:
        self.used += 1
        return next(self.replies)

    def decompose(self, messages) -> str:
        return DECOMPOSITION if self.valid_decomposition else self.next_reply(messages)

    def script(self) -> dict:
        return {
            "DoveFactsReply": self.decompose,
            "DoveCheckReply": self.next_reply,
            "DoveBatchReply": self.next_reply,
            "DoveOrderReply": self.next_reply,
        }


def _stated(verdict) -> bool:
    """Whether one of the verdict's own replies states exactly this verdict for this fact."""
    for call in verdict.calls:
        try:
            if fenced(call.messages, "facts", ""):  # a batch check: the facts are listed, numbered
                numbered = {text: n for n, text in listing(call.messages, "facts")}
                judged = parse_batch_judgments(call.reply, len(numbered)).judged
                stated = judged.get(numbered[verdict.claim.text] - 1)
            else:
                stated = (
                    parse_fact_judgment(call.reply) if fenced(call.messages, "fact") == verdict.claim.text else None
                )
        except ParseError:
            continue
        if stated is not None and stated.label == verdict.label:
            return True
    return False


def _run_all(pool: list[str], valid_decomposition: bool, **options) -> list:
    responder = GarbledResponder(pool, valid_decomposition)
    method = Dove(llm=LLM(FakeModel(by_reply=responder.script()), cache=None), **options)

    async def until_all_used():
        reports = []
        while responder.used < responder.size:
            reports.append(await method.acheck(SOURCE, TARGET))
        return reports

    return asyncio.run(until_all_used())


@pytest.mark.parametrize("valid_decomposition,batch_size", [(False, 1), (True, 1), (True, 2)])
def test_dove_end_to_end_on_garbled_replies(valid_decomposition, batch_size):
    """No exception escapes; every failure is an unscored verdict or report with its reason and raw replies;
    every verdict and every event order comes from a reply that states it."""
    reports = _run_all(random.Random(1).sample(REPLIES, 600), valid_decomposition, batch_size=batch_size)
    judged = 0
    for report in reports:
        assert (report.score is None) == bool(report.unscored_reason)
        for verdict in report.verdicts:
            assert verdict.calls  # the raw replies are kept
            if verdict.label != "unscored":
                judged += 1
                assert _stated(verdict), (verdict.label, [c.reply for c in verdict.calls])
        if "source_order" in report.details.get("order", {}):
            sorter_calls = [c for c in report.calls if is_sorter_call(c)]
            assert any(_parses_as_order(c) for c in sorter_calls)
    assert any(r.score is None for r in reports)
    if valid_decomposition:
        assert judged > 0 and any(v.label == "unscored" for r in reports for v in r.verdicts)


def _parses_as_order(call) -> bool:
    """Whether a sorter call's reply is a valid ordering of the events it was shown."""
    shown = [text for _, text in listing(call.messages, "events")]
    try:
        parse_event_order(call.reply, shown)
        return True
    except ParseError:
        return False


class GarbledSorter(GarbledResponder):
    """A valid decomposition and checker (every fact supported); the sorter gets the pool's replies."""

    def script(self) -> dict:
        supported = '{"reason": "stated", "supported": true}'
        return {
            "DoveFactsReply": DECOMPOSITION,
            "DoveCheckReply": supported,
            "DoveBatchReply": supported,
            "DoveOrderReply": self.next_reply,
        }


def test_event_order_only_from_a_sorter_reply_that_states_one():
    responder = GarbledSorter(random.Random(2).sample(REPLIES, 200), True)
    method = Dove(llm=LLM(FakeModel(by_reply=responder.script()), cache=None), target_order="decomposition")

    async def until_all_used():
        reports = []
        while responder.used < responder.size:
            reports.append(await method.acheck(SOURCE, TARGET))
        return reports

    ordered = refused = 0
    for report in asyncio.run(until_all_used()):
        sorter_calls = [c for c in report.calls if is_sorter_call(c)]
        if report.score is not None:
            ordered += 1
            assert any(_parses_as_order(c) for c in sorter_calls)
            assert report.details["order"]["compared_events"] >= 2
        else:
            refused += 1
            assert "sorter" in report.unscored_reason and not any(_parses_as_order(c) for c in sorter_calls)
            assert report.subscores["S_E"] == 1.0 and report.subscores["S_EO"] is None
    assert ordered > 0 and refused > 0


@pytest.mark.parametrize("batch_size", [1, 3])
def test_replies_without_a_verdict_never_score(batch_size):
    """A checker that never states a verdict: every fact unscored, the report unscored, no findings."""
    reports = _run_all(NO_VERDICT * 3, True, batch_size=batch_size)
    for report in reports:
        assert report.score is None and not report.findings
        assert report.verdicts and all(v.label == "unscored" for v in report.verdicts)
        assert "could be checked" in report.unscored_reason
