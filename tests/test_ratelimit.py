"""Requests- and tokens-per-minute limits, proved on a fake clock: the sleeps asked for are the schedule."""

from __future__ import annotations

import pytest

from halluscope.config import Config
from halluscope.llm import LLM, FakeModel, GenerateParams, ResponseCache, get_llm
from halluscope.llm.ratelimit import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def limiter(clock: FakeClock, rpm=None, tpm=None) -> RateLimiter:
    return RateLimiter(rpm, tpm, clock=clock, sleep=clock.sleep)


async def test_requests_per_minute_delays_the_call_over_the_limit():
    clock = FakeClock()
    lim = limiter(clock, rpm=2)
    await lim.acquire()
    await lim.acquire()
    assert clock.sleeps == []  # a full minute's allowance to start with
    await lim.acquire()
    assert clock.sleeps == [30.0]  # one request refills every 60 / 2 seconds
    clock.now += 60  # a quiet minute refills the bucket, but never beyond one minute's allowance
    await lim.acquire()
    await lim.acquire()
    assert clock.sleeps == [30.0]
    await lim.acquire()
    assert clock.sleeps == [30.0, 30.0]


async def test_tokens_per_minute_reserves_then_settles_with_the_reported_count():
    clock = FakeClock()
    lim = limiter(clock, tpm=100)
    assert await lim.acquire(80) == 80
    lim.settle(80, 20)  # the provider counted 20: 60 tokens are given back
    await lim.acquire(80)
    assert clock.sleeps == []
    await lim.acquire(60)  # the bucket is empty: 60 tokens refill at 100/60 per second
    assert clock.sleeps == [36.0]
    lim.settle(60, 0)  # no count reported: the reservation stands
    assert await lim.acquire(500) == 100  # one huge request waits for a full minute, not forever
    assert clock.sleeps == [36.0, 60.0]


async def test_an_under_estimate_delays_later_calls():
    clock = FakeClock()
    lim = limiter(clock, tpm=60)
    await lim.acquire(10)
    lim.settle(10, 70)  # the call used 70: the bucket is 10 tokens in debt
    await lim.acquire(10)
    assert clock.sleeps == [20.0]


async def test_the_client_limits_backend_calls_but_not_cache_hits(tmp_path):
    clock = FakeClock()
    api = FakeModel(default="OK")
    llm = LLM(api, cache=ResponseCache(tmp_path / "c.sqlite"), rate_limiter=limiter(clock, rpm=1))
    params = GenerateParams(max_tokens=8)
    await llm.generate([{"role": "user", "content": "one"}], params)
    await llm.generate([{"role": "user", "content": "one"}], params)  # a cache hit: never waits
    assert clock.sleeps == [] and len(api.requests) == 1
    await llm.generate([{"role": "user", "content": "two"}], params)
    assert clock.sleeps == [60.0] and len(api.requests) == 2


async def test_the_client_reserves_prompt_plus_max_tokens():
    clock = FakeClock()
    api = FakeModel(default="OK")  # counts whitespace-separated words as tokens
    lim = limiter(clock, tpm=60)
    llm = LLM(api, rate_limiter=lim)
    await llm.generate([{"role": "user", "content": "a b c d"}], GenerateParams(max_tokens=36))
    # reserved 4 + 36 = 40, settled with the fake's count (4 prompt + 1 completion): 55 of 60 left
    await llm.generate([{"role": "user", "content": "e f g h"}], GenerateParams(max_tokens=56))
    assert clock.sleeps == [5.0]  # 60 needed, 55 there: 5 tokens at 1 token/s


def test_limits_come_from_config_and_environment(monkeypatch):
    monkeypatch.setenv("HALLUSCOPE_REQUESTS_PER_MINUTE", "30")
    monkeypatch.setenv("HALLUSCOPE_TOKENS_PER_MINUTE", "90000")
    config = Config(model="m", base_url="http://127.0.0.1:9/v1", cache=False)
    assert (config.requests_per_minute, config.tokens_per_minute) == (30, 90000)
    llm = get_llm(config)
    assert llm.rate_limiter is not None
    assert (llm.rate_limiter.requests_per_minute, llm.rate_limiter.tokens_per_minute) == (30, 90000)
    monkeypatch.delenv("HALLUSCOPE_REQUESTS_PER_MINUTE")
    monkeypatch.delenv("HALLUSCOPE_TOKENS_PER_MINUTE")
    assert get_llm(Config(model="m", base_url="http://127.0.0.1:9/v1", cache=False)).rate_limiter is None
    with pytest.raises(ValueError, match="requests_per_minute"):
        Config(requests_per_minute=0)
