"""Trust boundaries: a verdict's probability is read only where the answer is.

Each row of :data:`ATTACKS` is a short verdict-first reply with its token log-probabilities scripted (the package's
fake model), and what the verdict must be: the answer word decides the label, the probability is read at that word's
token only, whole words only, finite log-probabilities only, and a reply that answers neither is read only when the
label tokens hold ``min_label_mass`` of the probability there. The same reader serves the JSON verifiers (FActScore,
DoveScore), AMC's marks and localize's filter; a stub OpenAI-compatible endpoint on loopback sends NaN and a leading
whitespace token the way a server would.
"""

from __future__ import annotations

import json
import math

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.llm.base import TokenLogprobs
from halluscope.llm.fake import label_logprobs
from halluscope.llm.label_probs import (
    MARKS,
    MIN_LABEL_MASS,
    TRUE_FALSE,
    YES_NO,
    label_probabilities,
    read_answer,
)
from halluscope.llm.openai_compat import OpenAICompatibleModel
from halluscope.methods import get_method
from tests.test_backends_openai import ScriptedServer

SOURCE = "The ferry starts in May. The city pays a third of the cost."
TARGET = "The ferry starts in May."
NAN, INF = float("nan"), float("inf")


def raw(token: str, logprob: float, **top: float) -> TokenLogprobs:
    """A token with its log-probabilities given as they are (NaN, infinities, positive values)."""
    return TokenLogprobs(token=token, logprob=logprob, top={k.replace("_", " "): v for k, v in top.items()})


def verdict_first(reply: str, tokens: list[TokenLogprobs] | None, **options):
    """The one verdict of a one-claim check whose short reply is ``reply`` with ``tokens`` as its logprobs."""
    fake = FakeModel(by_reply={"text": reply}, logprobs=(lambda _r: tokens) if tokens is not None else None)
    method = get_method("dcr", llm=LLM(fake), order="verdict_first", explain=False, **options)
    report = method.check(SOURCE, TARGET)
    (verdict,) = report.verdicts
    return report, verdict


# attack, reply, tokens, expected label, expected P(supported) (None: none recorded), words in the reason
ATTACKS = [
    (
        "'Maybe' with one yes candidate at -12 was supported with P = 1.000",
        "Maybe",
        [raw("Maybe", math.log(0.9), Maybe=math.log(0.9), yes=-12.0)],
        "unscored",
        None,
        ["neither yes nor no", "hold 0.000"],
    ),
    (
        "'I cannot tell' with one yes candidate at -12 was supported with P = 1.000",
        "I cannot tell",
        [raw("I", math.log(0.95), I=math.log(0.95), yes=-12.0), raw(" cannot", 0.0), raw(" tell", 0.0)],
        "unscored",
        None,
        ["neither yes nor no"],
    ),
    (
        "a NaN log-probability on 'yes' flipped the claim",
        "No",
        [raw("No", math.log(0.6), No=math.log(0.6), yes=NAN)],
        "unscored",
        None,
        ["refused", "not finite"],
    ),
    (
        "'no' at -inf gave P(supported) = 1.0 on an unsupported label",
        "no",
        [raw("no", -INF, no=-INF, yes=math.log(0.1))],
        "unscored",
        None,
        ["refused", "not finite"],
    ),
    (
        "a log-probability of +50 was accepted",
        "Yes",
        [raw("Yes", 50.0, Yes=50.0, No=math.log(0.1))],
        "unscored",
        None,
        ["refused", "above 0"],
    ),
    (
        "candidates whose probabilities sum to 1.8",
        "Yes",
        [raw("Yes", math.log(0.9), Yes=math.log(0.9), No=math.log(0.9))],
        "unscored",
        None,
        ["refused", "sum to 1.800"],
    ),
    (
        "' No' was read at the whitespace token (P = 1.0)",
        " No",
        [
            raw(" ", math.log(0.99), _=math.log(0.99), yes=-6.0),
            raw("No", math.log(0.8), No=math.log(0.8), Yes=math.log(0.2)),
        ],
        "unsupported",
        0.2,
        ["answered no", "0.200"],
    ),
    (
        "'Note' and 'Now' counted as no",
        "Yes",
        [raw("Yes", math.log(0.4), Yes=math.log(0.4), Note=math.log(0.3), Now=math.log(0.25), no=math.log(0.05))],
        "supported",
        0.4 / 0.45,
        ["answered yes"],
    ),
    (
        "'Yesterday' counted as yes",
        "No",
        [raw("No", math.log(0.5), No=math.log(0.5), Yesterday=math.log(0.4), yes=math.log(0.1))],
        "unsupported",
        0.1 / 0.6,
        ["answered no"],
    ),
    (
        "a reply 'no' with P(yes) = 0.917 scored 0.917, the disagreement unrecorded",
        "no",
        [raw("no", math.log(1 / 12), no=math.log(1 / 12), yes=math.log(11 / 12))],
        "unsupported",
        None,
        ["answered no", "P(yes) = 0.917", "disagrees", "the answer decides"],
    ),
    (
        "a reply 'yes' with P(yes) = 0.1: the answer decides the other way too",
        "yes",
        [raw("yes", math.log(0.1), yes=math.log(0.1), no=math.log(0.9))],
        "supported",
        None,
        ["answered yes", "P(yes) = 0.100", "disagrees"],
    ),
    (
        "tokens that do not spell the reply are not read",
        "Yes",
        [raw("No", math.log(0.9), No=math.log(0.9), Yes=math.log(0.1))],
        "supported",
        None,
        ["answered yes"],
    ),
    (
        "a first word that is neither label, the labels holding most of the probability there",
        "Definitely",
        [raw("Definitely", math.log(0.3), Definitely=math.log(0.3), Yes=math.log(0.35), yes=math.log(0.3))],
        "supported",
        1.0,
        ["does not answer yes or no on its own", "hold 0.650"],
    ),
]


@pytest.mark.parametrize(
    ("attack", "reply", "tokens", "label", "probability", "words"), ATTACKS, ids=[a[0] for a in ATTACKS]
)
def test_verdict_first_reads_the_probability_only_at_the_answer(
    attack, reply, tokens, label, probability, words
) -> None:
    report, verdict = verdict_first(reply, tokens)
    assert verdict.label == label, (attack, verdict.reason)
    if probability is None:
        assert verdict.support_probability is None
    else:
        assert verdict.support_probability == pytest.approx(probability)
    for word in words:
        assert word in verdict.reason, (attack, verdict.reason)
    if label == "unscored":
        assert report.score is None
    else:  # the recorded score is the label's, and a probability never contradicts it
        assert verdict.score == (1.0 if label == "supported" else 0.0)
        p = verdict.support_probability
        assert p is None or (p >= 0.5) == (label == "supported")
        assert report.score is not None


def test_the_disagreeing_claim_counts_by_its_label_in_the_probability_score() -> None:
    """A 'no' whose P(yes) reads 0.917 is scored as a no: the report's score is the label score (0 for this one
    claim), never 0.917, and details say why the probability score was not used."""
    report, verdict = verdict_first("no", [raw("no", math.log(1 / 12), no=math.log(1 / 12), yes=math.log(11 / 12))])
    assert report.score == 0.0 and report.details["score"]["kind"] == "label"
    assert report.details["score"]["with_probability"] == 0  # nothing carries the 0.917


def test_the_minimum_label_mass_is_an_option() -> None:
    tokens = [raw("Definitely", math.log(0.3), Definitely=math.log(0.3), Yes=math.log(0.35), yes=math.log(0.3))]
    assert MIN_LABEL_MASS == 0.5
    _, strict = verdict_first("Definitely", tokens, min_label_mass=0.8)
    assert strict.label == "unscored" and "at least 0.8" in strict.reason
    _, lax = verdict_first(
        "Maybe", [raw("Maybe", math.log(0.9), Maybe=math.log(0.9), no=math.log(0.05))], min_label_mass=0.01
    )
    assert (lax.label, lax.support_probability) == ("unsupported", 0.0)
    # recorded with the options only when changed
    method = get_method("dcr", llm=LLM(FakeModel()), order="verdict_first", min_label_mass=0.8)
    assert method.options()["min_label_mass"] == 0.8
    assert "min_label_mass" not in get_method("dcr", llm=LLM(FakeModel()), order="verdict_first").options()


def test_the_reader_reads_whole_words_at_the_first_non_space_token() -> None:
    answer = read_answer(
        " **No**",
        [raw(" **", 0.0), raw("No", math.log(0.7), No=math.log(0.7), Yes=math.log(0.3)), raw("**", 0.0)],
        *YES_NO,
    )
    assert (answer.stated, answer.label) == (False, False) and answer.probability == pytest.approx(0.3)
    # a candidate that is a piece of a label still counts ("Y" may start "Yes"); a longer word never does
    assert read_answer(
        "Yes", [raw("Yes", math.log(0.6), Yes=math.log(0.6), N=math.log(0.2), Nowhere=math.log(0.2))], *YES_NO
    ).probability == pytest.approx(0.75)
    # no candidates: the answer decides and nothing is invented
    assert read_answer("Yes", [raw("Yes", -0.1)], *YES_NO).probability is None


def test_json_verdicts_drop_a_refused_or_contradicting_probability_and_say_so() -> None:
    facts = {"facts": [{"sentence": 1, "fact": TARGET}]}
    judgment = json.dumps({"supported": False, "inconsistencies": ["The source gives no start date."]})

    def fake(logprobs) -> FakeModel:
        return FakeModel(by_reply={"FactsReply": json.dumps(facts), "FactJudgmentReply": judgment}, logprobs=logprobs)

    contradicting = label_logprobs({"true": 0.9, "false": 0.1})
    (verdict,) = (
        get_method("factscore", llm=LLM(fake(contradicting)), deduplicator="none").check(SOURCE, TARGET).verdicts
    )
    assert verdict.label == "unsupported" and verdict.support_probability is None
    assert "0.900" in verdict.reason and "contradicts the stated label" in verdict.reason

    def nan_at_label(reply: str) -> list[TokenLogprobs]:
        return [
            raw(x.token, NAN if x.token.strip() == "false" else x.logprob, **x.top)
            for x in label_logprobs({"true": 0.2, "false": 0.8})(reply)
        ]

    (verdict,) = (
        get_method("factscore", llm=LLM(fake(nan_at_label)), deduplicator="none").check(SOURCE, TARGET).verdicts
    )
    assert verdict.label == "unsupported" and verdict.support_probability is None
    assert "refused" in verdict.reason and "not finite" in verdict.reason
    agreeing = label_logprobs({"true": 0.2, "false": 0.8})
    (verdict,) = get_method("factscore", llm=LLM(fake(agreeing)), deduplicator="none").check(SOURCE, TARGET).verdicts
    assert verdict.support_probability == pytest.approx(0.2)


def test_batched_json_verdicts_drop_a_contradicting_probability_and_say_so() -> None:
    facts = {
        "facts": [
            {"sentence": 1, "fact": "The ferry starts in May."},
            {"sentence": 2, "fact": "The city pays a third of the cost."},
        ]
    }
    batch = {
        "results": [
            {"id": 1, "supported": True, "inconsistencies": []},
            {"id": 2, "supported": False, "inconsistencies": ["The source says a half."]},
        ]
    }
    fake = FakeModel(
        by_reply={"FactsReply": json.dumps(facts), "FactJudgmentBatchReply": json.dumps(batch)},
        # the first entry agrees (true at 0.95), the second says false with P(true) = 0.7
        logprobs=label_logprobs([{"true": 0.95, "false": 0.05}, {"false": 0.3, "true": 0.7}]),
    )
    report = get_method("factscore", llm=LLM(fake), deduplicator="none", batch_size=2).check(SOURCE, SOURCE)
    ok, bad = report.verdicts
    assert ok.support_probability == pytest.approx(0.95)
    assert bad.label == "unsupported" and bad.support_probability is None
    assert "0.700" in bad.reason and "contradicts the stated label" in bad.reason


@pytest.mark.parametrize("bad", [NAN, INF, -INF, 50.0])
def test_geval_weighting_refuses_log_probabilities_that_are_not_probabilities(bad) -> None:
    """G-Eval's probability-weighted rating reads the same way: a NaN gave a NaN score, +50 a certain 4."""
    from halluscope.methods.geval import weighted_score

    assert weighted_score([raw("4", math.log(0.6), **{"4": math.log(0.6), "5": bad})]) is None
    assert weighted_score([raw("4", math.log(0.6), **{"4": math.log(0.6), "5": math.log(0.4)})])[0] == pytest.approx(
        4.4
    )


def test_labels_are_whole_words_in_json_and_marks() -> None:
    # "10" is not the mark 1; "Note" is not "no"
    marks = [raw("[", 0.0), raw("10", math.log(0.9), **{"10": math.log(0.9), "-": math.log(0.1)}), raw("]", 0.0)]
    assert label_probabilities(marks, *MARKS) == []
    found = label_probabilities(
        [
            raw('{"supported": ', 0.0),
            raw("true", math.log(0.5), true=math.log(0.5), trueish=math.log(0.3), false=math.log(0.2)),
            raw("}", 0.0),
        ],
        *TRUE_FALSE,
        key="supported",
    )
    assert found[0].probability == pytest.approx(0.5 / 0.7)


def test_localize_filter_reads_p_consistent_at_its_final_answer_only() -> None:
    source, target = "The ferry starts in May.", "The ferry starts in June."

    def filter_with(final_tokens):
        def script(reply: str):
            if not reply.startswith("Check"):
                return None
            return [raw("Check: no note", 0.0), raw(".\nFinal answer: ", 0.0), final_tokens]

        fake = FakeModel(["Check: no note.\nFinal answer: yes", "[]"], logprobs=script)
        return get_method("localize", llm=LLM(fake), filter="self").check(source, target)

    good = filter_with(raw("yes", math.log(0.7), yes=math.log(0.7), no=math.log(0.3)))
    assert good.details["filter"]["p_consistent"] == pytest.approx(0.7)
    refused = filter_with(raw("yes", math.log(0.7), yes=math.log(0.7), no=NAN))
    assert "p_consistent" not in refused.details["filter"]
    contradicting = filter_with(raw("yes", math.log(0.2), yes=math.log(0.2), no=math.log(0.8)))
    assert "p_consistent" not in contradicting.details["filter"]


def _endpoint(content: str, tokens: list[dict]):
    def respond(body):
        choice = {"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": tokens}
        return 200, {"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": len(tokens)}}, {}

    return ScriptedServer([], respond=respond)


def _token(token: str, logprob: float, top: dict[str, float]) -> dict:
    return {"token": token, "logprob": logprob, "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()]}


def test_through_a_stub_endpoint_nan_is_refused_and_a_leading_space_is_not_the_answer() -> None:
    """A server's JSON carries NaN as ``NaN`` and a leading space as its own token: both arrive as a real backend
    sends them, and neither gives the claim a probability it does not have."""
    nan_reply = [_token("Yes", math.log(0.6), {"Yes": math.log(0.6), "no": NAN})]
    with _endpoint("Yes", nan_reply) as server:
        llm = LLM(OpenAICompatibleModel("stub", server.url, None, max_retries=0))
        (verdict,) = get_method("dcr", llm=llm, order="verdict_first", explain=False).check(SOURCE, TARGET).verdicts
    assert verdict.label == "unscored" and "not finite" in verdict.reason
    spaced = [
        _token(" ", math.log(0.99), {" ": math.log(0.99), "yes": -6.0}),
        _token("No", math.log(0.8), {"No": math.log(0.8), "Yes": math.log(0.2)}),
    ]
    with _endpoint(" No", spaced) as server:
        llm = LLM(OpenAICompatibleModel("stub", server.url, None, max_retries=0))
        (verdict,) = get_method("dcr", llm=llm, order="verdict_first", explain=False).check(SOURCE, TARGET).verdicts
    assert verdict.label == "unsupported" and verdict.support_probability == pytest.approx(0.2)
