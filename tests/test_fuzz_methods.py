"""The fuzz table on every method: replies that state no verdict never produce a score, a
verdict or a finding, and no reply (or transport fault) crashes a check.

Each check below runs with a scripted model whose every reply -- the first answer and the repair answer --
is drawn from one garbage class. Since no reply carries a verdict, the only correct outcome is an unscored
Report whose verdicts are all unscored, with the reason and the raw replies kept."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from halluscope.llm import LLM, FakeModel, LLMError
from halluscope.methods import get_method

SOURCE = (
    "The city council approved the ferry project on Monday. Two thirds of the cost comes from a regional "
    "grant. The first boat will sail in March. The mayor said the route would cut commutes by an hour."
)
TARGET = (
    "The council approved the ferry project on Monday. The city pays for the whole project. "
    "The first boat sails in March."
)

GARBAGE: dict[str, list[str]] = {
    "truncated_json": [
        '{"reason": "The text',
        '{"supported": tr',
        '[{"id": 1, "reason": "Consis',
        '{"claims": [{"segment": "The council", "claim": "The coun',
        '{"score": 4, "reas',
        '{"evidence": ["Two thirds of the cost',
        '{"marks": [1, -1',
    ],
    "prose": [
        "No problem!",
        "Yes, I can help with that.",
        "True to form, the text is accurate.",
        "The answer is yes.",
        "Supported? No.",
        "I found [nothing].",
        "Score: 5",
        "NOT PASS",
        "PASS?",
        "Everything looks consistent to me.",
        "Final Output: the summary is fine",
        "Rating - 4/5",
    ],
    "wrong_keys": [
        '{"foo": 1}',
        '{"result": "ok"}',
        '{"answer": {"score": 5}}',
        '{"items": ["x"]}',
        '{"verdicts": [{"x": 1}]}',
        '{"rating": 5, "why": "ok"}',
    ],
    "wrong_types": [
        '{"score": true, "reason": "x"}',
        '{"supported": "yes", "reason": "x"}',
        '{"score": [5], "reason": "x"}',
        '{"label": 1, "reason": "x"}',
        '{"marks": "1, -1"}',
        '{"verdict": null, "reasoning": "x"}',
        '{"supported": null, "reason": "x"}',
        '{"claims": "The council approved it"}',
        '{"evidence": "Two thirds", "reasoning": "x"}',
        '{"reason": 5, "score": "5"}',
        '{"facts": 3}',
        '{"inconsistencies": "none found"}',
    ],
    "negations": [
        "not supported? not sure",
        "It is not not supported.",
        "Inconsistent? Perhaps consistent.",
        "I would not say it FAILs, nor that it PASSes.",
    ],
    "nested_junk": [
        '{"a": {"b": {"c": [1, {"d": null}]}}}',
        "[[[[]]]]",
        '{"description": {"score": 3}}',
        '{"x": [{"y": {"supported": true}}]}',
    ],
    "empty": ["", " ", "\n\n", "{}", "null", "```json\n```"],
    "huge": ["x" * 300_000, '{"reason": "' + "a" * 250_000 + '"}', "[" * 50_000, "{" * 20_000 + "}" * 5],
    "placeholders": [
        '{"facts": ["<atomic fact>"]}',
        '{"claims": [{"segment": "...", "claim": "..."}]}',
        '["[claim]", "{fact}"]',
        "<atomic fact>",
        '{"facts": ["...", "…", "N/A"]}',
    ],
    "surrogates": ["\ud800 broken \udfff", "Supported\ud800?", '{"reas\ud800'],
}

# method, options: every stage of every method that calls an LLM
CONFIGS: list[tuple[str, dict]] = [
    ("geval", {}),
    ("localize", {"style": "zero_shot"}),
    ("localize", {"style": "few_shot"}),
    ("localize", {"style": "cot"}),
    ("localize", {"style": "zero_shot", "filter": "self"}),
    ("factscore", {}),
    ("factscore", {"describe": False}),
    ("dove", {}),
    ("dove", {"batch_size": 2}),
    ("dove", {"decomposer": "sentences"}),
    ("dcr", {}),
    ("dcr", {"amc": "rule"}),
    ("dcr", {"level": "paragraph"}),
    ("probe", {}),
    ("improve", {"rounds": 1}),
]


def _check(method: str, options: dict, model: FakeModel) -> object:
    return get_method(method, llm=LLM(model, cache=None), **options).check(SOURCE, TARGET)


def _assert_nothing_scored(report, label: str) -> None:
    # (an unscored report or verdict always has its reason: the records refuse one without)
    assert report.score is None, f"{label}: scored {report.score} from replies without a verdict"
    assert all(v.label == "unscored" for v in report.verdicts), f"{label}: {[v.label for v in report.verdicts]}"
    assert not report.findings, f"{label}: findings from replies without a verdict: {report.findings[:1]}"


@pytest.mark.parametrize(
    "method,options", CONFIGS, ids=[f"{m}-{'-'.join(f'{k}={v}' for k, v in o.items())}" for m, o in CONFIGS]
)
def test_no_score_from_replies_without_a_verdict(method, options):
    replies = 0
    for kind, items in GARBAGE.items():
        for item in items:
            model = FakeModel(default=item)  # every request, whatever its stage, gets this reply
            report = _check(method, options, model)
            replies += len(model.requests)
            _assert_nothing_scored(report, f"{method} {options} {kind} {item[:40]!r}")
            assert len(report.calls) == len(model.requests)  # every exchange kept for audit
    assert replies >= 2 * sum(len(v) for v in GARBAGE.values())  # each garbage reply got a repair request


@pytest.mark.parametrize("method,options", CONFIGS[::2])
def test_transport_faults_and_mixed_garbage_never_crash(method, options):
    rng = random.Random(f"{method}{options}")
    pool = [g for items in GARBAGE.values() for g in items]
    faults = [LLMError("HTTP 500 after retries"), LLMError("timed out"), LLMError("HTTP 429 after retries")]
    outcomes = Counter()
    for _ in range(12):

        def responder(messages):
            if rng.random() < 0.3:
                raise rng.choice(faults)
            return rng.choice(pool)

        report = _check(method, options, FakeModel(responder=responder))
        _assert_nothing_scored(report, f"{method} mixed")
        outcomes["llm_error" if "LLM error" in (report.unscored_reason or "") else "unparseable"] += 1
    # both ways of failing were met (the seeded mix holds faults and garbage), and each was told apart
    assert outcomes["llm_error"] >= 1 and outcomes["unparseable"] >= 1, outcomes
