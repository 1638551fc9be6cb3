"""Verdict probabilities: P(supported) read from token log-probabilities at the label, the probability variant of
each claim method's score, verdict-first scoring, confidence on findings, and the default method."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.config import DEFAULT_METHOD, DEFAULT_METHOD_OPTIONS, resolve_method
from halluscope.llm import LLM, FakeModel
from halluscope.llm.base import TokenLogprobs
from halluscope.llm.fake import label_logprobs
from halluscope.llm.label_probs import MARKS, PASS_FAIL, TRUE_FALSE, YES_NO, label_probabilities, label_probability
from halluscope.methods import get_method
from halluscope.records import Finding, Report
from tests.test_backends_openai import ScriptedServer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (
    "The city will build a ferry. Two thirds of the money comes from a regional transport grant. "
    "The ferry starts in May."
)
TARGET = "The city will build a ferry. The city pays for the whole project from its own budget."
EXPLANATION = {
    "reason": "The source says two thirds come from a regional grant.",
    "evidence": "Two thirds of the money comes from a regional transport grant.",
    "contradicted": True,
    "fix": "The city pays a third of the project; a regional grant pays the rest.",
}


def per_answer(positive: str, when_positive: dict[str, float], otherwise: dict[str, float]):
    """A logprobs script whose candidate probabilities depend on the label the reply states."""
    return lambda reply: label_logprobs(when_positive if positive in reply else otherwise)(reply)


def tok(token: str, **top: float) -> TokenLogprobs:
    """A token whose candidates have the given probabilities (the token itself among them)."""
    logs = {k: math.log(v) for k, v in top.items()}
    return TokenLogprobs(token=token, logprob=logs.get(token, -5.0), top=logs)


# -- reading the probability ---------------------------------------------------------------------------------


def test_json_label_probability_is_renormalised_over_the_allowed_labels() -> None:
    reply = [
        tok('{"'),
        tok("supported"),
        tok('":'),
        TokenLogprobs(
            token="true",
            logprob=math.log(0.6),
            top={"true": math.log(0.6), "false": math.log(0.2), "True": math.log(0.1), "maybe": math.log(0.1)},
        ),
        tok("}"),
    ]
    (found,) = label_probabilities(reply, *TRUE_FALSE, key="supported")
    assert found.position == 3 and found.stated is True
    assert found.probability == pytest.approx(0.7 / 0.9)  # true + True over true + True + false; "maybe" is no label


def test_one_probability_per_batch_entry_and_per_mark() -> None:
    script = label_logprobs([{"true": 0.9, "false": 0.1}, {"false": 0.8, "true": 0.2}])
    reply = '{"results": [{"id": 1, "supported": true}, {"id": 2, "supported": false}]}'
    assert [f.probability for f in label_probabilities(script(reply), *TRUE_FALSE, key="supported")] == pytest.approx(
        [0.9, 0.2]
    )
    marks = label_logprobs([{"1": 0.9, "-": 0.1}, {"-": 0.7, "1": 0.3}])('{"marks": [1, -1]}')
    found = label_probabilities(marks, *MARKS)
    assert [f.stated for f in found] == [True, False]
    assert [f.probability for f in found] == pytest.approx([0.9, 0.3])


def test_nothing_is_invented() -> None:
    assert label_probability(None, *YES_NO) is None  # the backend gave none
    assert label_probability([], *YES_NO) is None
    only_chosen = [TokenLogprobs(token="yes", logprob=-0.1)]  # no candidates: the other label's mass is unknown
    assert label_probability(only_chosen, *YES_NO) is None
    no_label = [tok("maybe", maybe=0.9, perhaps=0.1)]
    assert label_probability(no_label, *YES_NO) is None
    # a word inside a JSON string is not the verdict
    assert (
        label_probabilities(
            label_logprobs({"PASS": 0.9, "FAIL": 0.1})('{"reasoning": "a pass", "verdict": "FAIL"}'),
            *PASS_FAIL,
            key="verdict",
        )[0].stated
        is False
    )


# -- claim methods: P(supported) on every verdict, the probability score, confidence on findings --------------


def factscore_fake(probabilities) -> FakeModel:
    facts = {
        "facts": [
            {"sentence": 1, "fact": "The city will build a ferry."},
            {"sentence": 2, "fact": "The city pays for the whole project from its own budget."},
        ]
    }
    return FakeModel(
        by_reply={
            "FactsReply": json.dumps(facts),
            "FactJudgmentReply": [
                json.dumps({"supported": True, "inconsistencies": []}),
                json.dumps(
                    {"supported": False, "inconsistencies": ['The fact says "its own budget", but a grant pays most.']}
                ),
            ],
        },
        logprobs=probabilities,
    )


def test_factscore_verdicts_carry_probabilities_and_the_score_uses_them() -> None:
    fake = factscore_fake(per_answer('"supported": true', {"true": 0.9, "false": 0.1}, {"false": 0.7, "true": 0.3}))
    report = get_method("factscore", llm=LLM(fake), deduplicator="none").check(SOURCE, TARGET)
    assert [v.support_probability for v in report.verdicts] == pytest.approx([0.9, 0.3])
    assert all(p.top_logprobs for p in fake.params if p.json_schema and "supported" in p.json_schema)
    assert report.score == pytest.approx(0.6)  # mean P(supported), not the 1 of 2 labels
    assert report.details["score"]["kind"] == "probability" and report.details["score"]["label_score"] == 0.5
    (finding,) = report.findings
    assert finding.confidence == pytest.approx(0.7)
    again = Report.model_validate_json(report.model_dump_json())
    assert again == report  # lossless with the new fields


def test_label_score_stays_available_and_is_used_without_logprobs() -> None:
    labelled = get_method(
        "factscore",
        llm=LLM(factscore_fake(label_logprobs({"true": 0.9, "false": 0.1}))),
        deduplicator="none",
        score="label",
    ).check(SOURCE, TARGET)
    assert labelled.score == 0.5 and labelled.details["score"]["kind"] == "label"
    plain = get_method("factscore", llm=LLM(factscore_fake(None)), deduplicator="none").check(SOURCE, TARGET)
    assert plain.score == 0.5 and all(v.support_probability is None for v in plain.verdicts)
    assert plain.details["score"]["kind"] == "label"
    assert "no token log-probabilities" in plain.details["score"]["why"]  # said once, in the report
    assert all(f.confidence is None for f in plain.findings)
    asked = get_method("factscore", llm=LLM(factscore_fake(None)), deduplicator="none", score="probability")
    report = asked.check(SOURCE, TARGET)
    assert report.score is None and "score=probability" in report.unscored_reason


def test_dcr_z_uses_two_p_minus_one() -> None:
    dce = {
        "sentences": [
            {"id": 1, "reason": "Consistent: the source says so."},
            {"id": 2, "reason": "Inconsistent: a grant pays two thirds."},
        ],
        "is_consistent": False,
    }
    fake = FakeModel(
        by_reply={"DceReply": json.dumps(dce), "AmcReply": '{"marks": [1, -1]}'},
        logprobs=label_logprobs([{"1": 0.8, "-": 0.2}, {"-": 0.9, "1": 0.1}]),
    )
    report = get_method("dcr", llm=LLM(fake)).check(SOURCE, TARGET)
    assert [v.support_probability for v in report.verdicts] == pytest.approx([0.8, 0.1])
    z = ((2 * 0.8 - 1) + (2 * 0.1 - 1)) / 2
    assert report.score == pytest.approx((z + 1) / 2) and report.subscores["Z_probability"] == pytest.approx(z)
    assert report.details["score"]["label_score"] == 0.5
    assert report.findings[0].confidence == pytest.approx(0.9)


def test_dove_uses_mean_probabilities_for_s_e_and_s_d() -> None:
    facts = {
        "event_facts": ["The city will build a ferry."],
        "descriptive_facts": ["The city pays for the whole project from its own budget."],
    }
    checks = [
        json.dumps(
            {"reason": "stated", "evidence": "The city will build a ferry.", "supported": True, "contradicted": False}
        ),
        json.dumps({"reason": "a grant pays", "evidence": "", "supported": False, "contradicted": True}),
    ]
    fake = FakeModel(
        by_reply={"DoveFactsReply": json.dumps(facts), "DoveCheckReply": checks},
        logprobs=per_answer('"supported": true', {"true": 0.75, "false": 0.25}, {"false": 0.6, "true": 0.4}),
    )
    report = get_method("dove", llm=LLM(fake)).check(SOURCE, TARGET)
    assert [v.support_probability for v in report.verdicts] == pytest.approx([0.75, 0.4])
    # alpha = 1/2; one event: S_EO = 1
    assert report.score == pytest.approx(0.5 * 0.75 * 1.0 + 0.5 * 0.4)
    assert report.subscores["S_E_probability"] == pytest.approx(0.75)
    assert report.details["score"]["label_score"] == pytest.approx(0.5)


# -- verdict first --------------------------------------------------------------------------------------------


def verdict_first_fake(
    yes_probability: dict[str, float],
    explanation: dict | str = EXPLANATION,
    fix_probability: float = 0.9,
    contradicts: float = 0.9,
) -> FakeModel:
    """Answers each yes/no request by the claim it ends with (a key of ``yes_probability`` it contains, else
    ``fix_probability``: a fix being re-verified), with that P(yes) scripted at the answer token; a question whether
    a passage contradicts the claim gets P(yes) ``contradicts``."""
    asked: list[float] = []

    def responder(messages):
        claim = messages[-1]["content"].split("CLAIM:")[-1]
        if "contradict the CLAIM?" in messages[-1]["content"]:
            asked.append(contradicts)
        else:
            asked.append(next((yes_probability[k] for k in yes_probability if k in claim), fix_probability))
        return "Yes" if asked[-1] >= 0.5 else "No"

    def logprobs(reply: str):  # called right after the responder, for the same request
        return label_logprobs({"Yes": asked[-1], "No": 1 - asked[-1]})(reply) if reply in ("Yes", "No") else None

    text = explanation if isinstance(explanation, str) else json.dumps(explanation)
    return FakeModel(by_reply={"text": responder, "ExplainReply": text}, logprobs=logprobs)


def test_verdict_first_scores_every_claim_with_one_short_call_and_explains_only_the_flagged() -> None:
    fake = verdict_first_fake({"build a ferry": 0.9, "own budget": 0.2})
    report = get_method("dcr", llm=LLM(fake), order="verdict_first").check(SOURCE, TARGET)
    reason = [r for r in fake.requests if "Write only that sentence" in r[-1]["content"]]
    short = [
        p for p, r, kind in zip(fake.params, fake.requests, fake.reply_types) if kind == "text" and r not in reason
    ]
    # two claims scored; for the flagged one, two passages asked whether they contradict it (the explanation's
    # quote and its closest source sentence) and its fix re-verified by the same short reply; then its reason
    # written from the chosen passage (one sentence)
    assert len(short) == 5 and all(p.max_tokens == 2 and p.top_logprobs for p in short)
    assert len(reason) == 1
    asked = [r[-1]["content"] for r, kind in zip(fake.requests, fake.reply_types) if kind == "text"]
    assert sum("contradict the CLAIM?" in q for q in asked) == 2
    assert fake.reply_types.count("ExplainReply") == 1  # only the flagged claim
    ok, bad = report.verdicts
    assert (ok.label, ok.support_probability, ok.fix) == ("supported", pytest.approx(0.9), None)
    assert (bad.label, bad.support_probability) == ("contradicted", pytest.approx(0.2))
    assert bad.fix == EXPLANATION["fix"] and bad.decided_by == "verdict_first"
    assert bad.fix_verified and bad.fix_probability == pytest.approx(0.9)
    (evidence,) = bad.evidence
    assert evidence.span is not None and evidence.span.of(SOURCE) == EXPLANATION["evidence"]
    (finding,) = report.findings
    assert finding.confidence == pytest.approx(0.8) and finding.fix == EXPLANATION["fix"]
    assert finding.target_spans[0].of(TARGET) == "The city pays for the whole project from its own budget."
    assert report.details["verdict_first"]["flagged"] == ["s2"]
    assert report.score == pytest.approx((2 * 0.9 - 1 + 2 * 0.2 - 1) / 2 / 2 + 0.5)
    # the prompts of the mode are the ones recorded; the order is recorded with the options
    assert "verdict_first_score@" in get_method("dcr", llm=LLM(fake), order="verdict_first").prompt_version
    assert get_method("dcr", llm=LLM(fake), order="verdict_first").options()["order"] == "verdict_first"
    assert "order" not in get_method("dcr", llm=LLM(fake)).options()  # the default is not recorded


def test_a_probability_score_is_labelled_at_the_probability_threshold_and_never_against_its_findings() -> None:
    """DCR's label score keeps the paper's threshold 1; its probability score (a mean P(supported) here) is
    labelled at 0.5, where a claim turns from supported to flagged: all claims likely supported is consistent,
    one flagged claim is inconsistent, and a threshold the user gives wins."""
    likely = get_method(
        "dcr", llm=LLM(verdict_first_fake({"build a ferry": 0.9, "own budget": 0.7})), order="verdict_first"
    ).check(SOURCE, TARGET)
    assert likely.details["score"]["kind"] == "probability" and likely.score == pytest.approx(0.8)
    assert (likely.threshold, likely.label, likely.findings) == (0.5, "consistent", [])
    flagged = get_method(
        "dcr", llm=LLM(verdict_first_fake({"build a ferry": 0.9, "own budget": 0.2})), order="verdict_first"
    ).check(SOURCE, TARGET)
    assert (flagged.threshold, flagged.label, len(flagged.findings)) == (0.5, "inconsistent", 1)
    strict = get_method(
        "dcr",
        llm=LLM(verdict_first_fake({"build a ferry": 0.9, "own budget": 0.7})),
        order="verdict_first",
        threshold=0.9,
    ).check(SOURCE, TARGET)
    assert (strict.threshold, strict.label) == (0.9, "inconsistent")
    label = get_method(
        "dcr",
        llm=LLM(verdict_first_fake({"build a ferry": 0.9, "own budget": 0.7})),
        order="verdict_first",
        score="label",
    ).check(SOURCE, TARGET)
    assert (label.score, label.threshold, label.label) == (1.0, 1.0, "consistent")


def test_verdict_first_source_comes_before_the_claim() -> None:
    fake = verdict_first_fake({"build a ferry": 0.9, "own budget": 0.8})
    get_method("dcr", llm=LLM(fake), order="verdict_first").check(SOURCE, TARGET)
    first, second = (r[-1]["content"] for r in fake.requests)
    prefix = first[: first.index("CLAIM:")]
    assert second.startswith(prefix) and SOURCE.split(".")[0] in prefix  # one shared prefix: the source once


def test_verdict_first_threshold_and_failed_explanations_are_explicit() -> None:
    fake = verdict_first_fake({"build a ferry": 0.9, "own budget": 0.6}, explanation="not json")
    report = get_method("dcr", llm=LLM(fake), order="verdict_first", explain_below=0.7).check(SOURCE, TARGET)
    ok, low = report.verdicts
    assert ok.label == "supported"
    assert low.label == "unsupported" and "below explain_below" in low.reason  # answered yes, but P < 0.7
    assert list(report.details["verdict_first"]["explanation_failed"]) == ["s2"]


def test_verdict_first_without_probabilities_uses_the_answer() -> None:
    fake = FakeModel(
        by_reply={
            "text": lambda m: (
                "No"
                if "budget" in m[-1]["content"].split("CLAIM:")[-1] and "contradict the CLAIM?" not in m[-1]["content"]
                else "yes."
            ),
            "ExplainReply": json.dumps(EXPLANATION),
        }
    )
    report = get_method("dcr", llm=LLM(fake), order="verdict_first").check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["supported", "contradicted"]
    assert report.score == 0.5 and report.details["score"]["kind"] == "label"
    unclear = FakeModel(by_reply={"text": "Perhaps", "ExplainReply": json.dumps(EXPLANATION)})
    report = get_method("dcr", llm=LLM(unclear), order="verdict_first").check(SOURCE, TARGET)
    assert report.score is None and all("neither yes nor no" in v.reason for v in report.verdicts)


@pytest.mark.parametrize("reply", ["No problem!", "Yes it might be", "Nope", "Perhaps", ""])
def test_verdict_first_refuses_a_short_reply_that_states_no_answer(reply) -> None:
    """Without token probabilities, only a reply that answers yes or no (the word alone, or followed by
    punctuation) is read; the start of a phrase leaves the claim unscored with the reply quoted."""
    fake = FakeModel(by_reply={"text": reply, "ExplainReply": json.dumps(EXPLANATION)})
    report = get_method("dcr", llm=LLM(fake), order="verdict_first").check(SOURCE, TARGET)
    assert report.score is None
    assert all(v.label == "unscored" and "neither yes nor no" in v.reason for v in report.verdicts)


def test_reproduce_pins_the_papers_order_and_label_score() -> None:
    from halluscope.bench.reproduce.running import PAPER_ORDER

    assert PAPER_ORDER == {"order": "reason_first", "score": "label"}


def test_old_reports_and_findings_still_load() -> None:
    old = {
        "method": "dcr",
        "score": 0.5,
        "findings": [{"description": "x", "kind": "unsupported"}],
        "verdicts": [{"claim": {"text": "a"}, "label": "supported"}],
    }
    report = Report.model_validate(old)
    assert report.findings[0] == Finding(description="x") and report.verdicts[0].fix is None


# -- the default method ---------------------------------------------------------------------------------------


def test_default_method_runs_verdict_first_and_named_methods_keep_their_defaults() -> None:
    assert resolve_method(None, {}) == (DEFAULT_METHOD, DEFAULT_METHOD_OPTIONS)
    assert resolve_method(None, {"order": "reason_first"})[1]["order"] == "reason_first"
    assert resolve_method("dcr", {}) == ("dcr", {})
    fake = verdict_first_fake({"build a ferry": 0.9, "own budget": 0.2})
    report = halluscope.check(SOURCE, TARGET, llm=LLM(fake))
    assert report.method == DEFAULT_METHOD and report.details["verdict_first"]["flagged"]
    assert report.findings and report.findings[0].evidence and report.findings[0].target_spans


# -- halluscope check --json on the example, through OpenAI-compatible endpoints --------------------------------


def _endpoint(with_logprobs: bool):
    """A stub chat-completions endpoint: yes/no for the short replies (with top_logprobs when asked and
    ``with_logprobs``), the explanation for the explain requests."""

    def respond(body):
        last = body["messages"][-1]["content"]
        if "ExplainReply" in json.dumps(body.get("response_format") or {}) or "judged not supported" in last:
            content, top = json.dumps(EXPLANATION), None
        else:
            answer = "No" if "own budget" in last.split("CLAIM:")[-1] else "Yes"
            p = 0.85
            top = [
                {"token": answer, "logprob": math.log(p)},
                {"token": "No" if answer == "Yes" else "Yes", "logprob": math.log(1 - p)},
            ]
            content = answer
        choice = {"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        if with_logprobs and body.get("logprobs") and top is not None:
            choice["logprobs"] = {"content": [{"token": content, "logprob": top[0]["logprob"], "top_logprobs": top}]}
        return 200, {"choices": [choice], "usage": {"prompt_tokens": 50, "completion_tokens": 1}}, {}

    return ScriptedServer([], respond=respond)


@pytest.mark.parametrize("with_logprobs", [True, False])
def test_check_json_on_the_example_shows_probabilities_and_confidences(with_logprobs, tmp_path) -> None:
    from halluscope.cli.main import app

    with _endpoint(with_logprobs) as server:
        result = CliRunner().invoke(
            app,
            [
                "check",
                "-s",
                str(EXAMPLES / "source.txt"),
                "-t",
                str(EXAMPLES / "summary.txt"),
                "--model",
                "stub",
                "--base-url",
                server.url,
                "--api-key",
                "k",
                "--json",
                "--no-cache",
            ],
        )
    assert result.output.lstrip().startswith("{"), result.output
    report = json.loads(result.output[result.output.index("{") :])
    asked = [r["body"] for r in server.requests if r["body"].get("max_tokens") == 2]
    assert asked and all(b["logprobs"] is True and b["top_logprobs"] >= 5 for b in asked)
    assert report["method"] == DEFAULT_METHOD and report["verdicts"] and report["findings"]
    flagged = [v for v in report["verdicts"] if v["label"] != "supported"]
    assert [v["claim"]["text"] for v in flagged] == [
        "Mayor Elena Ruiz said it would cut the trip to the island to about 15 minutes, and the city will pay for "
        "the whole project from its own budget."
    ]
    if with_logprobs:
        assert all(v["support_probability"] is not None for v in report["verdicts"])
        assert all(f["confidence"] is not None for f in report["findings"])
        assert report["details"]["score"]["kind"] == "probability"
    else:
        assert all(v["support_probability"] is None for v in report["verdicts"])
        assert all(f["confidence"] is None for f in report["findings"])
        assert report["details"]["score"]["kind"] == "label"
        assert "no token log-probabilities" in report["details"]["score"]["why"]
    finding = report["findings"][0]
    assert finding["fix"] == EXPLANATION["fix"] and finding["evidence"][0]["span"] is not None


def test_verdict_first_scoring_only_makes_one_call_per_claim() -> None:
    fake = verdict_first_fake({"build a ferry": 0.9, "own budget": 0.2})
    report = get_method("dcr", llm=LLM(fake), order="verdict_first", explain=False).check(SOURCE, TARGET)
    assert fake.reply_types == ["text", "text"] and report.usage.calls == 2
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    assert report.details["verdict_first"]["flagged"] == ["s2"] and report.findings[0].confidence == pytest.approx(0.8)
    ok, bad = report.verdicts
    assert ok.reason == "answered yes (P(supported) = 0.900)"
    assert bad.reason.startswith("answered no (P(supported) = 0.200); scored only (explain=false): it was checked")
    # with retrieval the snippet the claim was checked against is the finding's evidence, and the reason says so
    retrieved = get_method(
        "dcr",
        llm=LLM(verdict_first_fake({"build a ferry": 0.9, "own budget": 0.2})),
        order="verdict_first",
        explain=False,
        retrieval="always",
        retriever="bm25",
        top_k=1,
        window=0,
    ).check(SOURCE, TARGET)
    (finding,) = retrieved.findings
    assert "the evidence is the source passage it was checked against" in finding.description
    assert finding.evidence and finding.evidence[0].span is not None


def test_explain_max_explains_the_lowest_probabilities_first_and_bounds_the_calls() -> None:
    fake = verdict_first_fake({"build a ferry": 0.3, "own budget": 0.2})
    report = get_method("dcr", llm=LLM(fake), order="verdict_first", explain_max=1).check(SOURCE, TARGET)
    assert fake.reply_types.count("ExplainReply") == 1  # both flagged, one explained
    first, second = report.verdicts
    assert second.label == "contradicted" and second.fix == EXPLANATION["fix"]  # P 0.2: explained
    assert first.label == "unsupported" and first.fix is None and "past explain_max" in first.reason
    record = report.details["verdict_first"]
    assert record["flagged"] == ["s1", "s2"] and record["explained"] == ["s2"] and record["explain_max"] == 1
    assert len(report.findings) == 2 and report.score == pytest.approx((2 * 0.3 - 1 + 2 * 0.2 - 1) / 2 / 2 + 0.5)
    none = verdict_first_fake({"build a ferry": 0.3, "own budget": 0.2})
    report = get_method("dcr", llm=LLM(none), order="verdict_first", explain_max=0).check(SOURCE, TARGET)
    assert none.reply_types == ["text", "text"] and report.details["verdict_first"]["explained"] == []
    assert get_method("dcr", llm=LLM(none), order="verdict_first", explain_max=1).options()["explain_max"] == 1


def test_batched_verdicts_get_their_entrys_probability() -> None:
    facts = {
        "facts": [
            {"sentence": 1, "fact": "The city will build a ferry."},
            {"sentence": 2, "fact": "The city pays for the whole project from its own budget."},
        ]
    }
    batch = {
        "results": [
            {"id": 2, "supported": False, "inconsistencies": ['It says "own budget"; a grant pays.']},
            {"id": 1, "supported": True, "inconsistencies": []},
        ]
    }  # entries out of order: read by id
    fake = FakeModel(
        by_reply={"FactsReply": json.dumps(facts), "FactJudgmentBatchReply": json.dumps(batch)},
        logprobs=label_logprobs([{"false": 0.8, "true": 0.2}, {"true": 0.95, "false": 0.05}]),
    )
    report = get_method("factscore", llm=LLM(fake), deduplicator="none", batch_size=2).check(SOURCE, TARGET)
    assert fake.reply_types == ["FactsReply", "FactJudgmentBatchReply"]
    assert [v.support_probability for v in report.verdicts] == pytest.approx([0.95, 0.2])
    # entries that cannot be told apart in the text (no ids) get no probability: nothing is guessed
    step_text = '{"results": [{"supported": true}, {"supported": false}]}'
    from halluscope.methods.batching import BatchAnswers, BatchStep

    step = BatchStep(BatchAnswers({}, {}), None, [], label_logprobs({"true": 0.9, "false": 0.1})(step_text))
    assert step.label_probabilities("supported", *TRUE_FALSE) == {}


def test_verdict_first_with_retrieval_shares_the_prompt_prefix_across_snippets() -> None:
    fake = verdict_first_fake({"build a ferry": 0.9, "own budget": 0.2})
    report = get_method(
        "dcr", llm=LLM(fake), order="verdict_first", retrieval="always", retriever="bm25", top_k=2, window=0
    ).check(SOURCE, TARGET)
    short = [
        r
        for r, kind in zip(fake.requests, fake.reply_types)
        if kind == "text"
        and "contradict the CLAIM?" not in r[-1]["content"]
        and "Write only that sentence" not in r[-1]["content"]
    ]
    # the supported claim stops at its first snippet, the other tries both; then its fix is re-verified
    assert len(short) == 4
    assert len({r[0]["content"] for r in short}) == 1  # one system message (one fence key) for every snippet
    instructions = short[0][-1]["content"].split("SOURCE:")[0]
    assert all(r[-1]["content"].startswith(instructions) for r in short)
    assert report.details["context"]["mode"] == "retrieval"
    assert [v.label for v in report.verdicts] == ["supported", "contradicted"]
    assert report.verdicts[1].evidence[0].span.of(SOURCE) == EXPLANATION["evidence"]


def test_bench_table_puts_the_label_score_beside_the_probability_score_from_one_run(tmp_path) -> None:
    """``halluscope bench --methods``: a system whose Reports carry a probability score gets two rows computed from
    the same run, and its label row is exactly what ``-o score=label`` gives on the same replies."""
    from halluscope.bench.datasets import load_dataset
    from halluscope.bench.harness import run_systems
    from halluscope.sync import run_sync

    claims = {"build a ferry": 0.9, "own budget": 0.2, "grant": 0.7, "bridge": 0.4}
    targets = [
        "The city will build a ferry. The city pays for the whole project from its own budget.",
        "The city will build a ferry. A regional transport grant pays two thirds.",
        "The city will build a bridge. The city pays for the whole project from its own budget.",
        "The city will build a ferry.",
    ]
    (tmp_path / "items.jsonl").write_text(
        "".join(
            json.dumps({"id": f"i{i}", "source": SOURCE, "target": t, "label": int("budget" not in t)}) + "\n"
            for i, t in enumerate(targets)
        )
    )
    dataset = load_dataset(str(tmp_path / "items.jsonl"))
    methods = [
        (label, get_method("dcr", llm=LLM(verdict_first_fake(claims)), order="verdict_first", explain=False, **extra))
        for label, extra in (("vf", {}), ("vf label", {"score": "label"}))
    ]
    quality = run_sync(run_systems(methods, dataset, tmp_path / "out", n_bootstrap=50, progress=False))

    assert [s["system"] for s in quality["summary"]] == ["vf [label score]", "vf [probability score]", "vf label"]
    rows = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()]
    scores = {(r["system"], r["item"]): r["score"] for r in rows}
    for i in range(4):
        assert scores[("vf [label score]", f"i{i}")] == scores[("vf label", f"i{i}")]
    assert scores[("vf [probability score]", "i0")] == pytest.approx((0.9 + 0.2) / 2)
    assert scores[("vf [label score]", "i0")] == pytest.approx(0.5)
    assert scores[("vf [probability score]", "i3")] == pytest.approx(0.9)
    summary = {s["system"]: s for s in quality["summary"]}
    assert summary["vf [label score]"]["calls_per_item"] == summary["vf [probability score]"]["calls_per_item"] > 0
    table = (tmp_path / "out" / "quality.md").read_text()
    assert "| vf [label score] |" in table and "| vf [probability score] |" in table
