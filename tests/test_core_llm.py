"""The LLM client (cache, concurrency, accounting), backend selection, and structured generation."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from pydantic import BaseModel

from halluscope.config import Config
from halluscope.llm import (
    LLM,
    Completion,
    FakeModel,
    GenerateParams,
    LLMError,
    ResponseCache,
    build_api,
    get_llm,
    track_calls,
)
from halluscope.llm.cache import cache_key
from halluscope.llm.structured import REPAIR_REQUEST, generate_parsed, generate_structured, json_parser
from halluscope.records import Usage
from halluscope.text.parsing import ParseError

MSGS = [{"role": "user", "content": "Is the sky green?"}]


class SlowModel:
    """A backend that sleeps, to observe how many requests are in flight at once."""

    name = "slow"
    max_concurrency: int | None = None
    context_window = None

    def __init__(self, delay: float = 0.02, limit: int | None = None):
        self.delay = delay
        self.max_concurrency = limit
        self.in_flight = 0
        self.peak = 0

    def count_tokens(self, text: str) -> int | None:
        return None

    async def generate(self, messages, params) -> Completion:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        return Completion(text="ok", model=self.name, usage=Usage(calls=1, prompt_tokens=3, completion_tokens=1))


async def test_cache_hit_costs_no_call_and_persists_across_clients(tmp_path) -> None:
    path = tmp_path / "cache.sqlite"
    fake = FakeModel(["first"])
    llm = LLM(fake, cache=ResponseCache(path))
    with track_calls() as log:
        one = await llm.generate(MSGS)
        two = await llm.generate(MSGS)
    assert (one.text, one.cached, two.text, two.cached) == ("first", False, "first", True)
    assert len(fake.requests) == 1
    assert log.usage.calls == 1 and log.usage.cache_hits == 1
    assert [c.cached for c in log.calls] == [False, True]
    assert two.usage == Usage(cache_hits=1)  # a hit costs no tokens

    fresh = LLM(FakeModel([]), cache=ResponseCache(path))  # no scripted reply: must be served by the cache
    assert (await fresh.generate(MSGS)).text == "first"


async def test_cache_key_covers_model_params_and_messages(tmp_path) -> None:
    base = cache_key("m", GenerateParams(), MSGS)
    assert cache_key("m", GenerateParams(), [dict(m) for m in MSGS]) == base
    assert cache_key("other", GenerateParams(), MSGS) != base
    assert cache_key("m", GenerateParams(temperature=0.7), MSGS) != base
    assert cache_key("m", GenerateParams(max_tokens=5), MSGS) != base
    assert cache_key("m", GenerateParams(json_mode=True), MSGS) != base
    assert cache_key("m", GenerateParams(), [{"role": "user", "content": "Is the sky blue?"}]) != base

    fake = FakeModel(["a", "b"])
    llm = LLM(fake, cache=ResponseCache(tmp_path / "c.sqlite"))
    assert (await llm.generate(MSGS, llm.params(max_tokens=10))).text == "a"
    assert (await llm.generate(MSGS, llm.params(max_tokens=20))).text == "b"  # different params: a miss


async def test_unreadable_cache_row_is_a_miss(tmp_path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = ResponseCache(path)
    key = cache_key("fake", GenerateParams(), MSGS)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO responses (key, model, completion) VALUES (?, 'fake', '{not json')", (key,))
    llm = LLM(FakeModel(["fresh"]), cache=cache)
    assert (await llm.generate(MSGS)).text == "fresh"
    assert cache.get(key).text == "fresh"  # overwritten


async def test_openai_backends_on_different_endpoints_do_not_share_cache(tmp_path) -> None:
    from halluscope.llm.openai_compat import OpenAICompatibleModel

    a = OpenAICompatibleModel("default", "http://127.0.0.1:1/v1")
    b = OpenAICompatibleModel("default", "http://127.0.0.1:2/v1/")
    assert a.name == b.name == "default"
    assert a.cache_id != b.cache_id


async def test_concurrency_is_bounded_by_client_and_backend() -> None:
    model = SlowModel()
    llm = LLM(model, cache=None, max_concurrency=3)
    await asyncio.gather(*(llm.generate([{"role": "user", "content": str(i)}]) for i in range(12)))
    assert model.peak == 3

    single = SlowModel(limit=1)  # e.g. the embedded model
    llm = LLM(single, cache=None, max_concurrency=8)
    assert llm.max_concurrency == 1
    await asyncio.gather(*(llm.generate([{"role": "user", "content": str(i)}]) for i in range(4)))
    assert single.peak == 1


def test_client_works_across_event_loops() -> None:
    llm = LLM(SlowModel(delay=0), cache=None, max_concurrency=2)
    for _ in range(2):  # a semaphore bound to the first loop would fail in the second
        assert asyncio.run(llm.generate(MSGS)).text == "ok"
    assert llm.usage.calls == 2


async def test_usage_and_audit_trail_are_recorded() -> None:
    llm = LLM(FakeModel(["yes"], name="fake-1"), cache=None)
    with track_calls() as log:
        completion = await llm.generate(MSGS)
    assert (
        completion.usage.calls == 1 and completion.usage.prompt_tokens == 4 and completion.usage.completion_tokens == 1
    )
    (call,) = log.calls
    assert call.model == "fake-1" and call.messages == MSGS and call.reply == "yes"
    assert llm.usage == log.usage


async def test_calls_outside_track_calls_are_not_logged_elsewhere() -> None:
    llm = LLM(FakeModel(default="x"), cache=None)
    with track_calls() as outer:
        await llm.generate(MSGS)
        with track_calls() as inner:
            await llm.generate([{"role": "user", "content": "inner"}])
        await llm.generate(MSGS)
    await llm.generate(MSGS)  # after both blocks: logged nowhere
    assert [c.messages[0]["content"] for c in inner.calls] == ["inner"]
    assert len(outer.calls) == 2 and all(c.messages == MSGS for c in outer.calls)
    assert llm.usage.calls == 4


async def test_fake_model_scripting_order_and_unscripted_request() -> None:
    fake = FakeModel(["r1"], rules=[(r"green", "rule")], responder=lambda m: "responder")
    llm = LLM(fake, cache=None)
    assert (await llm.generate(MSGS)).text == "rule"
    assert (await llm.generate([{"role": "user", "content": "blue?"}])).text == "r1"
    assert (await llm.generate([{"role": "user", "content": "blue?"}])).text == "responder"
    with pytest.raises(LLMError):
        await LLM(FakeModel([]), cache=None).generate(MSGS)
    with pytest.raises(TimeoutError):
        await LLM(FakeModel([TimeoutError("scripted")]), cache=None).generate(MSGS)


def test_build_api_picks_backends(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="FakeModel"):
        build_api(Config(model="fake"))
    with pytest.raises(ValueError, match="base-url"):
        build_api(Config(model="gpt-4o-mini"))
    api = build_api(Config(model="qwen2.5:7b", base_url="http://127.0.0.1:9/v1", max_retries=2, max_concurrency=5))
    assert (api.name, api.base_url, api.max_retries, api.max_concurrency) == (
        "qwen2.5:7b",
        "http://127.0.0.1:9/v1",
        2,
        5,
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = Config(model="gpt-4o-mini")
    assert (config.base_url, config.api_key) == ("http://127.0.0.1:8/v1", "sk-test")
    assert "sk-test" not in repr(config)


def test_embedded_is_the_default_without_an_endpoint(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("HALLUSCOPE_BASE_URL", raising=False)
    try:
        api = build_api(Config())
    except LLMError as exc:  # not installed here: the error must say how to install it
        assert "pip install" in str(exc)
    else:
        assert api.name == "embedded:smollm2" and api.max_concurrency == 1


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        Config(max_concurrency=0)
    with pytest.raises(ValueError):
        Config(max_retries=-1)
    assert Config().temperature == 0.0
    assert Config(model="x").with_overrides(model=None, max_tokens=5).model == "x"


def test_get_llm_uses_config_defaults(tmp_path) -> None:
    llm = get_llm(Config(max_tokens=77, seed=3, cache_path=tmp_path / "c.sqlite"), api=FakeModel(default="x"))
    assert llm.default_params == GenerateParams(temperature=0.0, max_tokens=77, seed=3)
    assert llm.cache is not None and llm.cache.path == tmp_path / "c.sqlite"
    assert get_llm(Config(cache=False), api=FakeModel(default="x")).cache is None
    assert llm.params(json_mode=True, max_tokens=None).json_mode is True


class Facts(BaseModel):
    facts: list[str]


class Rating(BaseModel):
    reason: str
    score: int


async def test_structured_parses_first_reply() -> None:
    llm = LLM(FakeModel(['Sure: {"reason": "ok", "score": 4}']), cache=None)
    parsed = await generate_structured(llm, MSGS, Rating)
    assert parsed.ok and parsed.value == Rating(reason="ok", score=4) and len(parsed.calls) == 1


async def test_structured_repairs_once() -> None:
    fake = FakeModel(["I think it is fine.", '{"reason": "fine", "score": 5}'])
    parsed = await generate_structured(LLM(fake, cache=None), MSGS, Rating)
    assert parsed.value == Rating(reason="fine", score=5)
    assert len(parsed.calls) == 2 and parsed.raw == '{"reason": "fine", "score": 5}'
    repair_turns = fake.requests[1]
    assert repair_turns[-2] == {"role": "assistant", "content": "I think it is fine."}
    assert repair_turns[-1]["content"].startswith(REPAIR_REQUEST.split("{error}")[0])
    assert "reason, score" in repair_turns[-1]["content"]


async def test_structured_gives_up_with_a_reason_and_the_audit_trail() -> None:
    fake = FakeModel(["nope", '{"reason": "x", "score": "high"}', "never asked"])
    parsed = await generate_structured(LLM(fake, cache=None), MSGS, Rating)
    assert parsed.value is None and not parsed.ok
    assert "2 attempt(s)" in parsed.error and "score" in parsed.error
    assert [c.reply for c in parsed.calls] == ["nope", '{"reason": "x", "score": "high"}']
    assert len(fake.requests) == 2  # bounded: one repair round only


async def test_structured_without_repair_makes_one_call() -> None:
    fake = FakeModel(["nope", "unused"])
    parsed = await generate_structured(LLM(fake, cache=None), MSGS, Rating, repair=False)
    assert parsed.error and len(parsed.calls) == 1 and len(fake.requests) == 1


async def test_generate_parsed_with_a_custom_parser() -> None:
    def yes_no(text: str) -> bool:
        word = text.strip().split()[0].lower().strip(".!") if text.strip() else ""
        if word not in ("yes", "no"):
            raise ParseError(f"expected yes/no, got {text[:20]!r}")
        return word == "yes"

    parsed = await generate_parsed(LLM(FakeModel(["maybe", "Yes."]), cache=None), MSGS, yes_no, format_hint="yes or no")
    assert parsed.value is True and "yes or no" in parsed.calls[1].messages[-1]["content"]


def test_json_parser_shapes() -> None:
    assert json_parser(Facts)('["a", "b"]') == Facts(facts=["a", "b"])  # a bare list for a one-list schema
    assert json_parser(Facts)('```json\n{"facts": ["a"]}\n```') == Facts(facts=["a"])
    with pytest.raises(ParseError):
        json_parser(Rating)('[{"reason": "x", "score": 1}]')  # an object schema never takes a list
    # a list before the object in prose does not hide the object
    assert json_parser(Rating)('Options [1-5]. {"reason": "r", "score": 2}') == Rating(reason="r", score=2)
