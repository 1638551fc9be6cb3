"""Method base behaviour (check/acheck/batch, accounting, errors), the registry, geval and rouge."""

from __future__ import annotations

import asyncio

import pytest

import halluscope
from halluscope.config import Config
from halluscope.llm import LLM, ContextOverflowError, FakeModel, LLMError
from halluscope.methods import InputError, Method, get_method, list_methods, method_class, register_method
from halluscope.methods.geval import GEVAL_PROMPT, GEval, GevalReply
from halluscope.methods.rouge import Rouge
from halluscope.records import Report
from halluscope.text.parsing import ParseError
from tests.conftest import fake_llm
from tests.prompt_data import fenced

SOURCE = "The council approved the budget on Tuesday. Bus fares will stay the same."
TARGET = "The council approved the budget on Friday."


@pytest.mark.parametrize(("rating", "score"), [(1, 0.0), (2, 0.25), (3, 0.5), (4, 0.75), (5, 1.0)])
def test_geval_normalizes_the_rating(rating: int, score: float) -> None:
    llm = fake_llm(f'{{"reason": "The day is wrong.", "score": {rating}}}')
    report = GEval(llm=llm).check(SOURCE, TARGET)
    assert report.score == score and report.subscores == {"rating": float(rating)}
    assert report.details["reason"] == "The day is wrong."
    assert report.label == ("consistent" if score >= 0.5 else "inconsistent")
    assert report.model == "fake" and report.usage.calls == 1 and report.usage.prompt_tokens > 0


def test_geval_prompt_carries_source_and_target_and_is_kept_for_audit() -> None:
    fake = FakeModel(['{"reason": "ok", "score": 5}'])
    report = GEval(llm=LLM(fake, cache=None)).check(SOURCE, TARGET)
    sent = fake.requests[0]
    assert sent[0]["role"] == "system" and SOURCE in sent[-1]["content"] and TARGET in sent[-1]["content"]
    (call,) = report.calls
    assert call.messages == sent and call.reply == '{"reason": "ok", "score": 5}'


def test_geval_repairs_then_scores() -> None:
    report = GEval(llm=fake_llm("It looks mostly fine to me.", '{"reason": "fine", "score": 4}')).check(SOURCE, TARGET)
    assert report.score == 0.75 and report.usage.calls == 2 and len(report.calls) == 2


@pytest.mark.parametrize("bad", ["I cannot judge this.", '{"score": 9}', '{"score": 4.5}', "Rating: 3.5/5", ""])
def test_geval_unparseable_is_unscored_with_reason_and_raw_reply(bad: str) -> None:
    report = GEval(llm=fake_llm(bad, bad)).check(SOURCE, TARGET)
    assert report.score is None and report.label is None
    assert report.unscored_reason.startswith("unparseable reply after 2 attempt(s)")
    assert [c.reply for c in report.calls] == [bad, bad]


@pytest.mark.parametrize(
    "reply",
    [
        "Score: 3/5",
        "rating - 2",
        '```json\n{"score": "4", "reason": "r"}\n```',
        "I cannot assign a score: 1) the text",
        '{"score": true, "reason": "r"}',
    ],
)
def test_geval_reads_a_rating_only_from_the_declared_json(reply: str) -> None:
    with pytest.raises(ParseError):
        GevalReply.parse(reply)
    assert GevalReply.parse('```json\n{"reason": "r", "score": 4}\n```').score == 4


def test_geval_refuses_out_of_range_and_fractions() -> None:
    for reply in ('{"reason": "r", "score": 15}', '{"reason": "r", "score": 0}', '{"reason": "r", "score": 4.5}'):
        with pytest.raises(ParseError):
            GevalReply.parse(reply)


def test_geval_prompt_override_from_prompts_dir(tmp_path) -> None:
    (tmp_path / "geval.txt").write_text("CUSTOM $source || $target", encoding="utf-8")
    fake = FakeModel(['{"reason": "r", "score": 2}'])
    report = GEval(llm=LLM(fake, cache=None), config=Config(prompts_dir=tmp_path)).check(SOURCE, TARGET)
    sent = fake.requests[0][-1]["content"]
    assert sent.startswith("CUSTOM <source_") and f"\n{SOURCE}\n" in sent and f"\n{TARGET}\n" in sent
    assert report.score == 0.25
    assert GEval().prompt_version == GEVAL_PROMPT.ref() and GEVAL_PROMPT.ref().startswith("geval@2#")


def test_llm_errors_become_unscored_reports() -> None:
    report = GEval(llm=fake_llm(LLMError("endpoint down"))).check(SOURCE, TARGET)
    assert report.score is None and "endpoint down" in report.unscored_reason and report.model == "fake"
    overflow = GEval(llm=fake_llm(ContextOverflowError("prompt too long"))).check(SOURCE, TARGET)
    assert "prompt too long" in overflow.unscored_reason


def test_backend_that_cannot_be_built_is_reported_once(monkeypatch) -> None:
    import halluscope.methods.base as base

    def broken(config):
        raise LLMError("the embedded model needs llama-cpp-python")

    monkeypatch.setattr(base, "get_llm", broken)
    report = GEval(config=Config(model="embedded")).check(SOURCE, TARGET)
    assert report.score is None and "llama-cpp-python" in report.unscored_reason
    assert report.model == "embedded"


@pytest.mark.parametrize(("source", "target"), [("", TARGET), (SOURCE, "   \n"), (None, TARGET), (SOURCE, b"bytes")])
def test_bad_input_is_refused(source, target) -> None:
    with pytest.raises(InputError):
        Rouge().check(source, target)


def test_check_many_keeps_order_and_turns_bad_pairs_into_unscored_reports() -> None:
    ratings = {"Friday": '{"reason": "wrong day", "score": 2}', "Tuesday": '{"reason": "ok", "score": 5}'}

    def rate(messages):  # by the day the rated text names (KeyError: a text nobody scripted)
        return ratings[next(day for day in ratings if day in fenced(messages, "target"))]

    method = GEval(llm=LLM(FakeModel(by_reply={GevalReply: rate}), cache=None))
    reports = method.check_many([(SOURCE, TARGET), (SOURCE, ""), (SOURCE, "Approved on Tuesday.")], concurrency=2)
    assert [r.score for r in reports] == [0.25, None, 1.0]
    assert reports[1].unscored_reason.startswith("bad input")
    assert [r.usage.calls for r in reports] == [1, 0, 1]  # usage is per report, not shared


async def test_acheck_many_runs_concurrently() -> None:
    class Slow(Method):
        name = "slow-test"
        uses_llm = False
        in_flight = peak = 0
        four_in = asyncio.Event()

        async def run(self, source: str, target: str) -> Report:
            Slow.in_flight += 1
            Slow.peak = max(Slow.peak, Slow.in_flight)
            if Slow.in_flight == 4:
                Slow.four_in.set()
            # the first checks stay in until four run at once (proven by the event, not by a sleep's length);
            # the time-out only turns a run that never gets four at once into a failure instead of a hang
            await asyncio.wait_for(Slow.four_in.wait(), timeout=60)
            await asyncio.sleep(0.001)  # some time inside the check, for elapsed_s
            Slow.in_flight -= 1
            return Report(method=self.name, score=1.0)

    reports = await Slow().acheck_many([(SOURCE, TARGET)] * 10, concurrency=4)
    assert len(reports) == 10 and Slow.peak == 4  # four at once, never more
    assert all(r.model is None and r.elapsed_s > 0 for r in reports)


def test_rouge_scores_lexical_precision() -> None:
    same = Rouge().check(SOURCE, "The council approved the budget.")
    assert same.score == 1.0 and same.model is None and same.usage.calls == 0
    unrelated = Rouge().check(SOURCE, "Penguins enjoy cold water.")
    assert unrelated.score < 0.2
    assert set(same.subscores) == {"rouge1", "rouge2", "rougeL"}
    assert Rouge(variant="rouge2").check(SOURCE, TARGET).score == Rouge().check(SOURCE, TARGET).subscores["rouge2"]
    with pytest.raises(ValueError):
        Rouge(variant="rouge9")  # type: ignore[arg-type]


def test_rouge_without_comparable_tokens_is_unscored() -> None:
    report = Rouge().check(SOURCE, "Привет, мир")
    assert report.score is None and "no a-z/0-9 tokens" in report.unscored_reason


def test_registry() -> None:
    assert {"geval", "rouge"} <= set(list_methods())
    assert method_class("geval") is GEval
    assert isinstance(get_method("rouge", variant="rouge1"), Rouge)
    with pytest.raises(KeyError, match="unknown method"):
        method_class("no-such-method")

    class Duplicate(Method):
        name = "geval"

        async def run(self, source: str, target: str) -> Report:
            raise NotImplementedError

    with pytest.raises(ValueError, match="already registered"):
        register_method(GEval)  # registering the same class twice is fine ...
        register_method(Duplicate)  # ... another class under a taken name is not


def test_top_level_check_api() -> None:
    report = halluscope.check(SOURCE, TARGET, method="rouge")
    assert report.method == "rouge" and report.score == get_method("rouge").check(SOURCE, TARGET).score > 0
    llm = fake_llm('{"reason": "ok", "score": 5}')
    assert halluscope.check(SOURCE, TARGET, method="geval", llm=llm).score == 1.0
    reports = halluscope.check_many([(SOURCE, TARGET), (SOURCE, SOURCE)], method="rouge", variant="rouge1")
    assert [r.method for r in reports] == ["rouge", "rouge"] and reports[1].score == 1.0


def test_geval_caps_completion_tokens() -> None:
    seen = []

    class Recording(FakeModel):
        async def generate(self, messages, params):
            seen.append(params.max_tokens)
            return await super().generate(messages, params)

    GEval(llm=LLM(Recording(['{"reason": "ok", "score": 5}']), cache=None)).check(SOURCE, TARGET)
    GEval(llm=LLM(Recording(['{"reason": "ok", "score": 5}']), cache=None), max_tokens=2000).check(SOURCE, TARGET)
    assert seen == [256, 1024]  # the option, never above the configured per-call bound
    assert GEval(max_tokens=64).options() == {
        "max_tokens": 64,
        "prompt": "reasoned",
        "weighting": "probability",
        "temperature": None,
    }
    with pytest.raises(ValueError):
        GEval(max_tokens=0)
