"""Which way a structured reply is asked for (Config.structured_output), with the scripted fake model."""

from __future__ import annotations

import json

import pytest

from halluscope.config import Config
from halluscope.llm import LLM, FakeModel, build_api
from halluscope.llm.structured import generate_reply
from halluscope.methods.geval import GEval, GevalReply

SOURCE = "The ferry runs every 30 minutes. Two thirds of its cost come from a regional grant."
TARGET = "The ferry runs every 30 minutes."
GOOD = '{"reason": "supported", "score": 5}'
BAD = "I think it is quite good."  # no JSON: no verdict stated


def _schema_of(params) -> dict | None:
    return json.loads(params.json_schema) if params.json_schema else None


async def test_plain_first_request_then_the_schema_only_for_the_repair() -> None:
    fake = FakeModel([BAD, GOOD], structured_output="plain")
    step = await generate_reply(LLM(fake, cache=None), [{"role": "user", "content": "rate"}], GevalReply)
    assert step.value is not None and step.value.score == 5
    first, repair = fake.params
    assert first.json_schema is None and not first.json_mode  # unconstrained: plain-text speed
    assert _schema_of(repair) == GevalReply.json_schema() and repair.json_mode  # the grammar, only here
    assert len(step.calls) == 2


async def test_a_valid_plain_reply_needs_no_grammar_at_all() -> None:
    fake = FakeModel([GOOD], structured_output="plain")
    step = await generate_reply(LLM(fake, cache=None), [{"role": "user", "content": "rate"}], GevalReply)
    assert step.value is not None and step.value.score == 5
    assert [p.json_schema for p in fake.params] == [None]


async def test_schema_and_json_object_ways() -> None:
    schema_fake = FakeModel([GOOD])  # the default: the schema from the first request
    await generate_reply(LLM(schema_fake, cache=None), [{"role": "user", "content": "rate"}], GevalReply)
    assert _schema_of(schema_fake.params[0]) == GevalReply.json_schema()
    json_fake = FakeModel([BAD, GOOD], structured_output="json_object")
    await generate_reply(LLM(json_fake, cache=None), [{"role": "user", "content": "rate"}], GevalReply)
    assert json_fake.params[0].json_mode and json_fake.params[0].json_schema is None
    assert _schema_of(json_fake.params[1]) == GevalReply.json_schema()


async def test_without_a_repair_the_only_request_is_constrained() -> None:
    fake = FakeModel([BAD], structured_output="plain")
    step = await generate_reply(LLM(fake, cache=None), [{"role": "user", "content": "rate"}], GevalReply, repair=False)
    assert step.value is None and _schema_of(fake.params[0]) == GevalReply.json_schema()


def test_an_invalid_plain_reply_stays_unscored_when_the_repair_fails() -> None:
    fake = FakeModel([BAD, '{"reason": "fine", "score": "5"}'], structured_output="plain")  # string, not int
    report = GEval(llm=LLM(fake, cache=None)).check(SOURCE, TARGET)
    assert report.score is None and "unparseable reply after 2 attempt(s)" in report.unscored_reason
    assert fake.params[0].json_schema is None and fake.params[1].json_schema is not None
    assert [c.reply for c in report.calls] == [BAD, '{"reason": "fine", "score": "5"}']


def test_config_picks_the_way_per_backend(monkeypatch) -> None:
    assert Config().structured_output == "auto"
    monkeypatch.setenv("HALLUSCOPE_STRUCTURED_OUTPUT", "plain")
    assert Config().structured_output == "plain"
    monkeypatch.delenv("HALLUSCOPE_STRUCTURED_OUTPUT")
    with pytest.raises(ValueError):
        Config(structured_output="grammar")
    remote = dict(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1")
    assert build_api(Config(**remote)).structured_output == "schema"  # auto: constrained decoding is cheap there
    assert build_api(Config(**remote, structured_output="plain")).structured_output == "plain"
