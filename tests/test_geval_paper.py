"""geval's paper variant: G-Eval's score-only form and its probability-weighted score from
token log-probabilities; the reasoned prompt stays the default."""

from __future__ import annotations

import json
import math

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.llm.base import GenerateParams, TokenLogprobs
from halluscope.llm.cache import cache_key
from halluscope.methods import get_method
from halluscope.methods.geval import parse_paper_score, weighted_score

SOURCE = "The museum opened in June after two years of repairs."
TARGET = "The museum opened in June."


def _top(**probs: float) -> dict[str, float]:
    return {k: math.log(v) for k, v in probs.items()}


def test_parse_paper_score_reads_a_score_only_reply_and_nothing_else():
    assert [parse_paper_score(t) for t in ("4", " 5\n", "Consistency: 3", "- Consistency: 2", "4/5", "**5**")] == [
        4,
        5,
        3,
        2,
        4,
        5,
    ]
    for bad in ("", "6", "The text is consistent, 4", "3 or 4", "four", '{"score": 4}'):
        assert parse_paper_score(bad) is None


def test_weighted_score_is_the_probability_weighted_sum_over_1_to_5():
    lp = [
        TokenLogprobs(token=" ", logprob=0.0),
        TokenLogprobs(token="4", logprob=math.log(0.6), top=_top(**{"4": 0.6, "5": 0.3, "3": 0.05, "x": 0.05})),
    ]
    value, probs = weighted_score(lp)
    assert probs == pytest.approx({"3": 0.05 / 0.95, "4": 0.6 / 0.95, "5": 0.3 / 0.95})
    assert value == pytest.approx((3 * 0.05 + 4 * 0.6 + 5 * 0.3) / 0.95)
    assert weighted_score(None) is None
    assert weighted_score([TokenLogprobs(token="The", logprob=-0.1)]) is None  # no score at the first position


async def test_paper_variant_weights_the_score_where_the_backend_gives_logprobs():
    scripted = [TokenLogprobs(token="4", logprob=math.log(0.5), top=_top(**{"4": 0.5, "5": 0.5}))]
    model = FakeModel(default="4", logprobs=lambda reply: scripted)
    method = get_method("geval", llm=LLM(model, cache=None), prompt="paper")
    report = await method.acheck(SOURCE, TARGET)
    assert report.subscores["rating"] == 4 and report.subscores["weighted"] == pytest.approx(4.5)
    assert report.score == pytest.approx(3.5 / 4)  # ties between items are broken by the probabilities
    assert report.details["weighting"] == "probability (G-Eval)"
    assert "Consistency (1-5)" in model.requests[0][-1]["content"] and "score only" in model.requests[0][-1]["content"]
    assert method.prompt_version.startswith("geval_paper@1")


async def test_paper_variant_without_logprobs_says_it_used_the_integer():
    method = get_method("geval", llm=LLM(FakeModel(default="Consistency: 2"), cache=None), prompt="paper")
    report = await method.acheck(SOURCE, TARGET)
    assert report.score == 0.25 and report.details["weighting"].startswith("unavailable")
    unread = await get_method(
        "geval", llm=LLM(FakeModel(default="It is mostly fine, 4."), cache=None), prompt="paper"
    ).acheck(SOURCE, TARGET)
    assert unread.score is None and "not a score" in unread.unscored_reason


async def test_reasoned_prompt_stays_the_default():
    reply = json.dumps({"reason": "supported", "score": 5})
    method = get_method("geval", llm=LLM(FakeModel(default=reply), cache=None))
    assert method.opts.prompt == "reasoned" and method.prompt_version.startswith("geval@2")
    assert (await method.acheck(SOURCE, TARGET)).score == 1.0


def test_logprobs_parameter_keeps_old_cache_keys_and_is_sent_to_openai_endpoints():
    messages = [{"role": "user", "content": "hi"}]
    plain = GenerateParams()
    legacy = json.dumps(
        {"model": "m", "params": plain.model_dump(mode="json", exclude={"top_logprobs"}), "messages": messages},
        sort_keys=True,
        ensure_ascii=False,
    )
    import hashlib

    assert cache_key("m", plain, messages) == hashlib.sha256(legacy.encode()).hexdigest()  # unchanged
    assert cache_key("m", GenerateParams(top_logprobs=5), messages) != cache_key("m", plain, messages)


def test_openai_backend_requests_and_reads_logprobs():
    from halluscope.llm.openai_compat import OpenAICompatibleModel

    model = OpenAICompatibleModel("m", "http://127.0.0.1:9/v1")
    messages = [{"role": "user", "content": "rate"}]
    body = model._payload(messages, GenerateParams(top_logprobs=5))
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert "logprobs" not in model._payload(messages, GenerateParams())  # not asked: not sent
    completion = model._completion(
        {
            "choices": [
                {
                    "message": {"content": "4"},
                    "logprobs": {
                        "content": [
                            {
                                "token": "4",
                                "logprob": -0.2,
                                "top_logprobs": [{"token": "4", "logprob": -0.2}, {"token": "5", "logprob": -1.8}],
                            }
                        ]
                    },
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )
    assert completion.logprobs[0].token == "4" and completion.logprobs[0].top["5"] == -1.8
    bare = model._completion({"choices": [{"message": {"content": "4"}}]})
    assert bare.logprobs is None and bare.text == "4"


async def test_montagelie_geval_row_decodes_greedily_and_takes_the_integer():
    """MontageLie ran every LLM evaluator greedily (temperature 0) and read the integer rating: the dove
    protocol's G-Eval row does the same even where the backend returns log-probabilities and the configured
    temperature is not 0; the probability-weighted form is an extra row that says it is not the paper's."""
    from halluscope.bench.reproduce import get_protocol

    rows = {r.id: r for r in get_protocol("dove").rows}
    geval, weighted = rows["geval"], rows["geval_weighted"]
    assert geval.options == {"prompt": "paper", "weighting": "none", "temperature": 0}
    assert weighted.options["weighting"] == "probability" and weighted.analogue and "not the paper" in weighted.note
    scripted = [TokenLogprobs(token="4", logprob=math.log(0.5), top=_top(**{"4": 0.5, "5": 0.5}))]
    model = FakeModel(default="4", logprobs=lambda reply: scripted)
    llm = LLM(model, cache=None, default_params=GenerateParams(temperature=0.7))  # a user's sampling temperature
    report = await get_method("geval", llm=llm, **geval.options).acheck(SOURCE, TARGET)
    assert model.params[0].temperature == 0 and not model.params[0].top_logprobs
    assert report.score == pytest.approx(0.75) and report.subscores["weighted"] == 4.0  # the integer, unweighted
    assert report.details["weighting"].startswith("none") and report.details["temperature"] == 0
