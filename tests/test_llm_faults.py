"""Transport faults never crash: broken envelopes, non-string content, malformed usage, lone surrogates;
identical requests in flight share one backend call (single flight)."""

from __future__ import annotations

import asyncio
import math

import pytest

import halluscope
from halluscope.config import Config
from halluscope.llm import LLM, Completion, FakeModel, GenerateParams, LLMError, ResponseCache, build_api, track_calls
from halluscope.llm.cache import cache_key, clean_messages, clean_text
from halluscope.records import Usage
from tests.conftest import requires_embedded
from tests.test_backends_openai import MSGS, ScriptedServer, backend

LONE = "\ud800"


def _reply(content: object, usage: object = None) -> dict:
    body: dict = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.fixture(scope="module")
def server():
    """One scripted endpoint for the module (starting and stopping one costs ~0.5 s each time)."""
    with ScriptedServer([(200, _reply("OK"), {})]) as scripted:
        yield scripted


def _script(server: ScriptedServer, body: object) -> ScriptedServer:
    server.script = [(200, body, {})]
    server.requests.clear()
    server.times.clear()
    return server


async def _generate(server: ScriptedServer, body: object, messages: list | None = None) -> Completion:
    _script(server, body)
    return await backend(server.url, max_retries=0).generate(messages or MSGS, GenerateParams())


# --- broken envelopes and non-string content are LLMErrors ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("<html>not json</html>", "non-JSON"),
        pytest.param("[" * 100_000, "non-JSON", id="nested-beyond-the-parser-limit"),
        ([{"choices": []}], "JSON list, not an object"),
        ("null", "JSON NoneType"),
        ("42", "JSON int"),
        ({"id": "x"}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"choices": "many"}, "no choices"),
        ({"error": {"message": "overloaded"}}, "error: .*overloaded"),
        ({"choices": [1]}, "no message"),
        ({"choices": [{"message": "hi"}]}, "no message"),
        ({"choices": [{"text": "legacy completion"}]}, "no message"),
        (_reply(5), "content is a int"),
        (_reply(True), "content is a bool"),
        (_reply({"text": "x"}), "content is a dict"),
        (_reply(None), "content is null"),
        (_reply([]), "content is a list"),
        (_reply([{"type": "image_url", "image_url": {"url": "x"}}]), "carry no text"),
        (_reply([{"type": "text", "text": 5}]), "part without text"),
        (_reply([7]), "part without text"),
    ],
)
async def test_broken_envelopes_and_content_are_llm_errors(server, body: object, match: str) -> None:
    with pytest.raises(LLMError, match=match):
        await _generate(server, body)


async def test_refusal_is_named_in_the_error(server) -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help with that"}}]}
    with pytest.raises(LLMError, match="refusal: I can't help"):
        await _generate(server, body)


async def test_content_parts_are_joined(server) -> None:
    parts = [
        {"type": "text", "text": '{"score": '},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "4}"},
    ]
    assert (await _generate(server, _reply(parts))).text == '{"score": 4}'
    assert (await _generate(server, _reply(["a", {"type": "output_text", "text": "b"}]))).text == "ab"


@pytest.mark.parametrize(
    "usage",
    [
        None,
        "lots",
        [],
        {"prompt_tokens": "7", "completion_tokens": "1"},
        {"prompt_tokens": -3, "completion_tokens": -1},
        {"prompt_tokens": {"n": 7}, "completion_tokens": [1]},
        {"prompt_tokens": math.nan, "completion_tokens": math.inf},
        {"prompt_tokens": 2.5, "completion_tokens": True},
    ],
)
async def test_malformed_usage_keeps_the_reply(server, usage: object) -> None:
    body = _reply("OK") if usage is None else {**_reply("OK"), "usage": usage}
    completion = await _generate(server, body)
    assert completion.text == "OK"
    assert completion.usage == Usage(calls=1, prompt_tokens=0, completion_tokens=0)


async def test_whole_number_usage_is_kept(server) -> None:
    completion = await _generate(server, _reply("OK", {"prompt_tokens": 7.0, "completion_tokens": 2}))
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 2)


# --- lone surrogates ------------------------------------------------------------------------------------------


def test_clean_text() -> None:
    plain = "no surrogates here é 😀"
    assert clean_text(plain) is plain
    assert clean_text(f"a{LONE}b") == "a\ufffdb"
    assert clean_text("\udc00x\ud83d") == "\ufffdx\ufffd"
    assert clean_text("\ud83d\ude00") == "😀"  # a valid pair written as two code points becomes its character
    msgs = [{"role": "user", "content": "fine"}]
    assert clean_messages(msgs) is msgs
    assert clean_messages([{"role": "user", "content": LONE}]) == [{"role": "user", "content": "\ufffd"}]


async def test_lone_surrogates_in_a_reply_are_replaced_at_the_openai_boundary(server) -> None:
    completion = await _generate(server, _reply(f'{{"score": 4}} {LONE}'))
    assert completion.text == '{"score": 4} \ufffd'
    completion.text.encode("utf-8")


async def test_lone_surrogates_in_messages_are_sent_without_crashing(server) -> None:
    await _generate(server, _reply("OK"), [{"role": "user", "content": f"a{LONE}b"}])
    assert server.requests[0]["body"]["messages"] == [{"role": "user", "content": "a\ufffdb"}]


async def test_client_and_cache_never_crash_on_surrogates(tmp_path) -> None:
    assert cache_key("m", GenerateParams(), [{"role": "user", "content": LONE}])  # no UnicodeEncodeError
    fake = FakeModel([f"reply {LONE}"])
    llm = LLM(fake, cache=ResponseCache(tmp_path / "c.sqlite"))
    messages = [{"role": "user", "content": f"q {LONE}"}]
    with track_calls() as log:
        first = await llm.generate(messages)
        second = await llm.generate(messages)  # served from the cache
    assert first.text == second.text == "reply \ufffd" and second.cached
    assert fake.requests == [[{"role": "user", "content": "q \ufffd"}]]
    assert log.calls[0].messages == [{"role": "user", "content": "q \ufffd"}]
    ResponseCache(tmp_path / "d.sqlite").put("k", Completion(text=LONE, model="m"))  # direct use too


async def test_a_repair_request_quoting_a_surrogate_reply_does_not_crash(tmp_path) -> None:
    from pydantic import BaseModel

    from halluscope.llm.structured import generate_structured

    class Score(BaseModel):
        score: int

    llm = LLM(FakeModel([f"no json {LONE}", '{"score": 3}']), cache=ResponseCache(tmp_path / "c.sqlite"))
    parsed = await generate_structured(llm, MSGS, Score)
    assert parsed.value == Score(score=3)


async def test_methods_report_transport_faults_as_unscored(server, tmp_path) -> None:
    for body in (_reply(5), _reply([1, 2]), [1], {"choices": []}):
        config = Config(model="judge", base_url=_script(server, body).url, cache=False, max_retries=0)
        report = await halluscope.acheck("The sky is blue.", "The sky is green.", method="geval", config=config)
        assert report.score is None and "LLM error" in (report.unscored_reason or "")
    _script(server, _reply(f"{LONE}{LONE}"))
    config = Config(model="judge", base_url=server.url, cache_path=tmp_path / "c.sqlite", max_retries=0)
    report = await halluscope.acheck("The sky is blue.", "The sky is green.", method="geval", config=config)
    assert report.score is None and report.unscored_reason  # an unparseable reply, not a crash
    report.model_dump_json()


# --- configuration ------------------------------------------------------------------------------------------


def test_empty_model_variable_means_not_set(monkeypatch) -> None:
    monkeypatch.setenv("HALLUSCOPE_MODEL", "")
    assert Config().model is None
    monkeypatch.setenv("HALLUSCOPE_MODEL", "  ")
    assert Config().model is None
    monkeypatch.setenv("HALLUSCOPE_BASE_URL", "http://127.0.0.1:9/v1")
    assert build_api(Config()).name == "default"  # not a model named ''
    assert Config(model="").model is None
    monkeypatch.setenv("HALLUSCOPE_MODEL", "gpt-4o-mini")
    assert Config().model == "gpt-4o-mini"


# --- single flight --------------------------------------------------------------------------------------------


class _GatedFake(FakeModel):
    """A FakeModel whose calls wait until the test opens the gate: the order of events is the test's, not
    the scheduler's (no sleeps to race against on a loaded machine)."""

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.entered = asyncio.Event()  # some call reached the backend
        self.gate = asyncio.Event()

    async def generate(self, messages, params) -> Completion:
        self.entered.set()
        await self.gate.wait()
        return await super().generate(messages, params)


async def _settle() -> None:
    """Let every ready task run up to its next real wait (joining a flight is synchronous up to there)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def _overlapping(fake: _GatedFake, calls) -> list:
    """Run ``calls`` (coroutines) as tasks that all reach the model before any reply is let out: the gate opens
    only once the first call is inside the backend and every task has run up to its wait. Results (or errors) in
    order."""
    tasks = [asyncio.create_task(c) for c in calls]
    await fake.entered.wait()
    await _settle()
    fake.gate.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("with_cache", [False, True])
async def test_identical_requests_in_flight_share_one_call(tmp_path, with_cache: bool) -> None:
    fake = _GatedFake(default="shared")
    llm = LLM(fake, cache=ResponseCache(tmp_path / "c.sqlite") if with_cache else None)
    with track_calls() as log:
        replies = await _overlapping(fake, [llm.generate(MSGS) for _ in range(20)])
    assert len(fake.requests) == 1
    assert {r.text for r in replies} == {"shared"}
    assert log.usage.calls == 1 and log.usage.cache_hits == 19
    assert sum(r.cached for r in replies) == 19 and sum(r.usage.calls for r in replies) == 1
    assert all(r.usage == Usage(cache_hits=1) for r in replies if r.cached)
    assert llm.in_flight == 0


async def test_different_requests_are_not_coalesced() -> None:
    fake = _GatedFake(default="x")
    llm = LLM(fake, cache=None)
    await _overlapping(fake, [llm.generate([{"role": "user", "content": str(i % 4)}]) for i in range(12)])
    assert len(fake.requests) == 4
    fake.gate = asyncio.Event()
    await _overlapping(fake, [llm.generate(MSGS, llm.params(max_tokens=n)) for n in (5, 6)])
    assert len(fake.requests) == 6


async def test_sequential_identical_requests_without_cache_each_call() -> None:
    fake = FakeModel(default="x")
    llm = LLM(fake, cache=None)
    await llm.generate(MSGS)
    await llm.generate(MSGS)
    assert len(fake.requests) == 2  # single flight only joins requests that overlap in time


async def test_an_error_reaches_every_waiter_and_nothing_stays_in_flight() -> None:
    fake = _GatedFake([LLMError("endpoint down")], default="later")
    llm = LLM(fake, cache=None)
    results = await _overlapping(fake, [llm.generate(MSGS) for _ in range(5)])
    assert all(isinstance(r, LLMError) and "endpoint down" in str(r) for r in results)
    assert len(fake.requests) == 1 and llm.in_flight == 0
    assert llm.usage == Usage()
    assert (await llm.generate(MSGS)).text == "later"  # the next request is a fresh call


async def test_a_cancelled_leader_hands_over_to_a_waiter() -> None:
    fake = _GatedFake(default="ok")
    llm = LLM(fake, cache=None)
    leader = asyncio.create_task(llm.generate(MSGS))
    await fake.entered.wait()  # the leader is inside the backend call
    waiters = [asyncio.create_task(llm.generate(MSGS)) for _ in range(3)]
    await _settle()  # ... and the waiters have joined its flight
    assert llm.in_flight == 1 and not any(w.done() for w in waiters)
    leader.cancel()
    await _settle()  # one waiter takes over the call; the others join it
    assert leader.cancelled() and llm.in_flight == 1
    fake.gate.set()
    replies = await asyncio.gather(*waiters)
    assert leader.cancelled()
    assert [r.text for r in replies] == ["ok"] * 3
    assert sum(r.usage.calls for r in replies) == 1 and sum(r.cached for r in replies) == 2
    assert len(fake.requests) == 1  # the cancelled leader never got a reply: one waiter made the call
    assert llm.in_flight == 0


async def test_a_cancelled_waiter_does_not_cancel_the_shared_call() -> None:
    fake = _GatedFake(default="ok")
    llm = LLM(fake, cache=None)
    leader = asyncio.create_task(llm.generate(MSGS))
    await fake.entered.wait()
    waiter = asyncio.create_task(llm.generate(MSGS))
    other = asyncio.create_task(llm.generate(MSGS))
    await _settle()
    waiter.cancel()
    await _settle()
    assert waiter.cancelled() and not leader.done() and not other.done()
    fake.gate.set()
    assert (await leader).text == "ok" and (await other).cached
    assert len(fake.requests) == 1 and llm.in_flight == 0


def test_single_flight_works_across_event_loops() -> None:
    fake = _GatedFake(default="ok")
    llm = LLM(fake, cache=None)

    async def burst() -> list[Completion]:
        fake.entered, fake.gate = asyncio.Event(), asyncio.Event()  # this loop's own events
        return await _overlapping(fake, [llm.generate(MSGS) for _ in range(3)])

    for _ in range(2):
        assert [r.cached for r in asyncio.run(burst())] == [False, True, True]
    assert len(fake.requests) == 2


# --- the embedded backend: threads, token counting beside a generation, surrogates --------------------------


def test_default_threads_follow_the_usable_cores() -> None:
    from halluscope.llm.embedded import default_threads, usable_cores

    assert [default_threads(n) for n in (1, 2, 3, 4, 5, 16)] == [1, 1, 1, 2, 2, 8]
    assert 1 <= usable_cores() and default_threads() == default_threads(usable_cores())


@pytest.mark.embedded
@requires_embedded
def test_embedded_count_tokens_does_not_wait_for_a_generation() -> None:
    import threading

    from halluscope.llm.embedded import EmbeddedModel

    model = EmbeddedModel("smollm2", n_ctx=512, n_threads=3)
    assert model.n_threads == 3
    try:
        text = f"Dr. Smith moved to the U.S. in 2010. {LONE} Prices fell 3.2%."
        with model._lock:  # as if a generation were running
            counted: list[int | None] = []
            worker = threading.Thread(target=lambda: counted.append(model.count_tokens(text)))
            worker.start()
            worker.join(timeout=30)
            assert counted and counted[0] and counted[0] > 10, "count_tokens waited for the generation lock"
        full = model._load()  # the full model tokenizes the same way
        assert counted[0] == len(full.tokenize(clean_text(text).encode("utf-8"), add_bos=False))
    finally:
        model.close()
    assert model._vocab is None and model._llama is None


@pytest.mark.embedded
@requires_embedded
async def test_embedded_generate_survives_lone_surrogates(tmp_path) -> None:
    config = Config(model="embedded:smollm2", cache_path=tmp_path / "c.sqlite", max_tokens=4)
    from halluscope.llm import get_llm

    llm = get_llm(config)
    completion = await llm.generate([{"role": "user", "content": f"Say {LONE} hi."}])
    completion.text.encode("utf-8")
    assert completion.usage.calls == 1
