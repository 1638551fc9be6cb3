"""Prefix affinity (waiting requests served by the prefix they share with the last one) and cached prompt tokens
in ``Usage``. Order is proven with events and the gate's own queue, never with sleeps."""

from __future__ import annotations

import asyncio

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.llm.affinity import PrefixAffinityGate, prompt_text, shared_prefix
from halluscope.llm.embedded import reused_prefix
from halluscope.llm.fake import TEXT_REPLY
from halluscope.llm.openai_compat import _usage
from halluscope.records import LLMCall, Report, Usage


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0)  # a yield to the loop, not a wait for time


async def _serve(gate: PrefixAffinityGate, first: str, queued: list[str]) -> list[str]:
    """``first`` holds the slot while ``queued`` line up (in this order); then it is released."""
    gate.record = True
    await gate.acquire(first)

    async def one(prompt: str) -> None:
        async with gate.slot(prompt):
            pass

    tasks = []
    for prompt in queued:  # one at a time, so the queue order is the list order
        tasks.append(asyncio.create_task(one(prompt)))
        await _until(lambda: gate.waiting == len(tasks))
    gate.release()
    await asyncio.gather(*tasks)
    return gate.served


def test_shared_prefix():
    assert shared_prefix("source A|claim 1", "source A|claim 2") == len("source A|claim ")
    assert shared_prefix("", "x") == 0 and shared_prefix("abc", "abc") == 3 and shared_prefix("abc", "xbc") == 0


async def test_waiters_about_the_last_source_are_served_first():
    served = await _serve(PrefixAffinityGate(), "A|0", ["B|1", "A|1", "B|2", "A|2", "C|1"])
    assert served == ["A|0", "A|1", "A|2", "B|1", "B|2", "C|1"]


async def test_ties_go_to_the_oldest_waiter():
    served = await _serve(PrefixAffinityGate(), "Z|0", ["C|1", "B|1", "A|1"])
    assert served == ["Z|0", "C|1", "B|1", "A|1"]


async def test_a_waiter_passed_over_max_skips_times_is_served_next():
    served = await _serve(PrefixAffinityGate(max_skips=2), "A|0", ["B|1", "A|1", "A|2", "A|3", "A|4"])
    assert served == ["A|0", "A|1", "A|2", "B|1", "A|3", "A|4"]


async def test_without_a_limit_of_skips_the_same_queue_keeps_the_source_together():
    served = await _serve(PrefixAffinityGate(max_skips=100), "A|0", ["B|1", "A|1", "A|2", "A|3", "A|4"])
    assert served == ["A|0", "A|1", "A|2", "A|3", "A|4", "B|1"]


async def test_a_cancelled_waiter_does_not_hold_the_slot():
    gate = PrefixAffinityGate()
    await gate.acquire("A|0")
    waiter = asyncio.create_task(gate.acquire("A|1"))
    await _until(lambda: gate.waiting == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.release()
    await asyncio.wait_for(gate.acquire("B|1"), timeout=5)  # free again (the timeout only guards a hang)
    assert gate.last_prompt == "B|1" and gate.waiting == 0


class _BlockingFake(FakeModel):
    """A one-at-a-time backend with a prefix cache: its first call waits until the test opens it."""

    max_concurrency = 1
    prefix_affinity = True

    def __init__(self):
        super().__init__(by_reply={TEXT_REPLY: "ok"})  # the test's own messages ask for free text
        self.opened = asyncio.Event()

    async def generate(self, messages, params):
        await self.opened.wait()
        return await super().generate(messages, params)


def _messages(source: str, claim: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "checker"},
        {"role": "user", "content": f"instructions\nSOURCE:\n{source}\nFACT:\n{claim}"},
    ]


async def test_the_client_serves_concurrent_calls_grouped_by_source():
    api = _BlockingFake()
    llm = LLM(api, cache=None, max_concurrency=8)
    assert llm.max_concurrency == 1 and llm.prefix_affinity
    order = [("A", "1"), ("B", "1"), ("A", "2"), ("B", "2"), ("A", "3")]
    tasks = []
    for source, claim in order:  # interleaved sources, as concurrent methods or items ask
        tasks.append(asyncio.create_task(llm.generate(_messages(source, claim))))
        await _until(lambda: llm.gate().last_prompt and llm.gate().waiting == len(tasks) - 1)
    api.opened.set()
    await asyncio.gather(*tasks)
    served = [(m[1]["content"].split("SOURCE:\n")[1].split("\n")[0], m[1]["content"][-1]) for m in api.requests]
    assert served == [("A", "1"), ("A", "2"), ("A", "3"), ("B", "1"), ("B", "2")]


async def test_a_backend_without_a_prefix_cache_keeps_first_come_first_served():
    api = _BlockingFake()
    api.prefix_affinity = False
    llm = LLM(api, cache=None)
    order = [("A", "1"), ("B", "1"), ("A", "2")]
    tasks = [asyncio.create_task(llm.generate(_messages(s, c))) for s, c in order]
    await asyncio.sleep(0)
    api.opened.set()
    await asyncio.gather(*tasks)
    assert [m[1]["content"][-1] for m in api.requests] == ["1", "1", "2"]
    assert [m[1]["content"].split("SOURCE:\n")[1][0] for m in api.requests] == ["A", "B", "A"]


def test_prompt_text_keeps_roles_apart():
    assert prompt_text([{"role": "user", "content": "a"}]) != prompt_text([{"role": "system", "content": "a"}])


# ------------------------------------------------------------------------------------------ cached prompt tokens


def test_reused_prefix_counts_the_tokens_llama_cpp_takes_from_its_cache():
    assert reused_prefix([], [1, 2, 3]) == 0
    assert reused_prefix([1, 2, 3, 9, 9], [1, 2, 3, 4]) == 3
    assert reused_prefix([1, 2, 3, 4, 5], [1, 2, 3, 4]) == 3  # the whole prompt held: its last token is redone
    assert reused_prefix([7, 2], [1, 2]) == 0


def test_openai_cached_tokens_are_read_and_bounded():
    u = _usage(
        {"usage": {"prompt_tokens": 2000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1536}}}
    )
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.evaluated_prompt_tokens) == (2000, 1536, 464)
    assert (
        _usage({"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 99}}}).cached_prompt_tokens
        == 10
    )
    for junk in (None, "x", {"cached_tokens": -3}, {"cached_tokens": "12"}, {}):
        assert _usage({"usage": {"prompt_tokens": 10, "prompt_tokens_details": junk}}).cached_prompt_tokens == 0


def test_usage_adds_cached_tokens_and_round_trips():
    total = Usage(calls=1, prompt_tokens=300, cached_prompt_tokens=0) + Usage(
        calls=1, prompt_tokens=310, cached_prompt_tokens=260
    )
    assert total.cached_prompt_tokens == 260 and total.evaluated_prompt_tokens == 350
    assert total.cached_note() == " (260 prompt tokens reused)" and Usage().cached_note() == ""
    report = Report(method="m", score=0.5, usage=total, calls=[LLMCall(model="x", messages=[], reply="", usage=total)])
    again = Report.model_validate_json(report.model_dump_json())
    assert again == report and again.usage.cached_prompt_tokens == 260
    # a report written before the field existed still loads, with nothing cached
    old = report.model_dump(mode="json")
    del old["usage"]["cached_prompt_tokens"]
    assert Report.model_validate(old).usage.cached_prompt_tokens == 0
