"""factscore: strict decomposition/verification/dedup replies, de-duplication (fuzzy and LLM), the method end to
end on the claim pipeline (retrieval options, swapped verifiers), garbled replies, and one embedded run."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence

import pytest

from halluscope.llm import LLM, ContextOverflowError, FakeModel, LLMError
from halluscope.methods import OptionsError, get_method
from halluscope.methods.factscore import (
    FactCheckReply,
    FactJudgmentReply,
    FactScore,
    FactScoreVerifier,
    parse_facts,
    parse_keep,
)
from halluscope.records import Claim, Report, Verdict
from halluscope.stages import Context, register_stage
from halluscope.stages.verifiers import LLMVerifier
from halluscope.text import ParseError, split_sentences
from halluscope.text.descriptions import fuzzy_duplicate_groups
from tests.garble import garbled_replies
from tests.prompt_data import fenced
from tests.reply_fuzz import cut, mutations, parse_each, replace, stray, upper, wrap

SOURCE = "Philips sold 250,000 units on Amazon. The police investigated Philips for a month and let it continue."
TARGET = "Amazon was investigated for a month. The police ordered Amazon to cease operations."
FACTS = json.dumps(
    {
        "facts": [
            {"sentence": 1, "fact": "Amazon was investigated."},
            {"sentence": 1, "fact": "The investigation lasted a month."},
            {"sentence": 2, "fact": "The police ordered Amazon to cease operations."},
        ]
    }
)
PLACEHOLDER_FACTS = [
    '{"facts": [{"sentence": 1, "fact": "<atomic fact>"}]}',
    '{"facts": [{"sentence": 1, "fact": "[fact]"}, {"sentence": 2, "fact": "{fact}"}]}',
    '{"facts": [{"sentence": 1, "fact": "..."}, {"sentence": 1, "fact": "…"}, {"sentence": 2, "fact": "N/A"}]}',
    '{"facts": [{"sentence": 1, "fact": "The museum opened in 1998."}]}',  # the prompt's own example
    # a verbatim embedded-model reply (SmolLM2-135M on "The dog sat on the mat."): the example, copied
    (
        '{"facts": [{"sentence": 1, "fact": "The museum opened in '
        '1998."}, {"sentence": 1, "fact": "The museum is in Lyon."}]}'
    ),
    '{"facts": [{"sentence": 1, "fact": "The museum opened in 1999."}]}',  # ... with a detail changed
]
PROSE_VERDICTS = [
    "No problem!",
    "Yes, I can help with that.",
    "True to form, the fact is accurate.",
    "Supported: the source says so",
    "No.\n- The year is wrong.",
    "The answer is yes.",
    '{"supported": "yes"}',
    '{"supported": null}',
    '{"supported": 1}',
    '{"is_supported": true}',
    '{"verdict": "supported"}',
]


def judge(messages) -> str:
    """Verification: facts about Amazon are wrong, each problem described."""
    fact = fenced(messages, "fact")
    problems = []
    if "Amazon" in fact:
        problems.append('The fact says "Amazon" was investigated, but the source says it was Philips.')
    if "cease" in fact:
        problems.append('The fact says the company was ordered to "cease operations", but it was allowed to continue.')
    return json.dumps({"supported": not problems, "inconsistencies": problems})


# The scripted model, keyed by the reply each stage asks for (not by prompt wording): decomposes into FACTS,
# judges facts about Amazon wrong, keeps descriptions 1 and 3.
JUDGE = {
    "FactsReply": FACTS,
    "FactJudgmentReply": judge,
    "FactCheckReply": judge,
    "KeepReply": json.dumps({"keep": [1, 3]}),
}


def fake(*, by_reply=None, **kwargs) -> LLM:
    """An LLM over a fake keyed by reply type (``JUDGE`` unless another script is given)."""
    return LLM(FakeModel(by_reply=JUDGE if by_reply is None else by_reply, **kwargs), cache=None)


# ---------------------------------------------------------------------------------------------- parsers


def test_parse_facts_reads_the_declared_list():
    sentences = split_sentences(TARGET)
    facts = parse_facts(FACTS, sentences, TARGET)
    assert [(f.text, f.sentence_index) for f in facts] == [
        ("Amazon was investigated.", 0),
        ("The investigation lasted a month.", 0),
        ("The police ordered Amazon to cease operations.", 1),
    ]
    bare = parse_facts('[{"sentence": 2, "fact": "A  b."}, {"sentence": 2, "fact": "a b."}]', sentences)
    assert [(f.text, f.sentence_index) for f in bare] == [("A b.", 1)]  # a bare list of facts; duplicates once


@pytest.mark.parametrize(
    "reply",
    [
        '{"facts": []}',
        "no facts",
        '{"facts": [{"sentence": 1}]}',
        '["Amazon was investigated."]',  # facts without their sentence
        '{"facts": [{"sentence": "1", "fact": "Amazon was investigated."}]}',  # a number as a string
        '{"facts": [{"sentence": 3, "fact": "Amazon was investigated."}]}',  # no such sentence
        '{"facts": [{"sentence": 1, "fact": "Amazon was inv',  # cut off
        *PLACEHOLDER_FACTS,
    ],
)
def test_parse_facts_refuses_everything_else(reply):
    with pytest.raises(ParseError):
        parse_facts(reply, split_sentences(TARGET), TARGET)


def test_placeholders_are_dropped_and_the_example_counts_only_when_the_target_says_it():
    reply = json.dumps(
        {
            "facts": [
                {"sentence": 1, "fact": "<atomic fact>"},
                {"sentence": 1, "fact": "The museum opened in 1998."},
                {"sentence": 2, "fact": "The police gave an order."},
            ]
        }
    )
    assert [f.text for f in parse_facts(reply, split_sentences(TARGET), TARGET)] == ["The police gave an order."]
    museum = "The museum opened in 1998. It is in Lyon."
    facts = parse_facts(reply, split_sentences(museum), museum)
    assert [f.text for f in facts] == ["The museum opened in 1998.", "The police gave an order."]


def test_verification_replies_state_a_boolean():
    assert FactCheckReply.parse('{"supported": true}').supported is True
    j = FactJudgmentReply.parse('{"supported": false, "inconsistencies": ["  a   b ", "<description>", "..."]}')
    assert (j.supported, j.inconsistencies) == (False, ["a b"])  # echoed placeholders are not descriptions
    assert FactJudgmentReply.parse('{"supported": false, "inconsistencies": ["None"]}').inconsistencies == []
    assert FactJudgmentReply.parse('{"supported": false}').inconsistencies == []
    assert FactJudgmentReply.parse('Here: {"supported": true, "inconsistencies": []}').supported


@pytest.mark.parametrize(
    "reply",
    PROSE_VERDICTS
    + [
        '{"supported": true, "inconsistencies": ["The year is wrong."]}',  # contradicts itself
        '{"supported": false, "inconsistencies": ["None", "The year is wrong."]}',
        '{"supported": false, "inconsistencies": "none found"}',
        '{"inconsistencies": []}',
        "",
    ],
)
def test_verification_replies_without_a_verdict_are_refused(reply):
    with pytest.raises(ParseError):
        FactJudgmentReply.parse(reply)


def test_parse_keep():
    assert parse_keep('{"keep": [3, 1, 1]}', 3) == [0, 2]
    for bad in ('{"keep": []}', '{"keep": [4]}', '{"keep": ["2"]}', '{"keep": [0]}', "none", "[1, 2]"):
        with pytest.raises(ParseError):
            parse_keep(bad, 3)


VALID = [
    FACTS,
    '{"supported": true}',
    '{"supported": false, "inconsistencies": ["The year is wrong."]}',
    '{"keep": [1, 2]}',
    '[{"sentence": 2, "fact": "The police gave an order."}]',
]
# cut off, wrapped in prose, a stray character, upper-cased, or re-keyed
FACTSCORE_EDITS = (
    cut,
    wrap("Sure! Here it is: ", " Hope this helps."),
    stray('{}[]",:'),
    upper,
    replace(('"supported"', '"is_supported"'), ('"facts"', '"atomic_facts"')),
)


def test_parsers_on_garbled_replies_some_parse_some_fail():
    sentences = split_sentences(TARGET)
    replies = (
        garbled_replies(1000, seed=17)
        + VALID
        + mutations(VALID, 600 - len(VALID), seed=3, edits=FACTSCORE_EDITS)
        + PLACEHOLDER_FACTS
        + PROSE_VERDICTS
    )
    parsers = {
        "facts": lambda t: parse_facts(t, sentences, TARGET),
        "describe": FactJudgmentReply.parse,
        "check": FactCheckReply.parse,
        "keep": lambda t: parse_keep(t, 4),
    }
    for name, parse in parsers.items():
        parsed, refused = parse_each(parse, replies)
        for reply, value in parsed:
            if name in ("describe", "check"):  # a verdict only from a reply that states it as a JSON boolean
                assert re.search(r'"supported"[\s:,]*' + ("true" if value.supported else "false"), reply)
            if name == "facts":
                assert all(f.text in reply and 0 <= f.sentence_index < 2 for f in value)
        assert parsed and refused, name


# ------------------------------------------------------------------------------------------------ dedup


def test_fuzzy_dedup_merges_rewordings_but_not_different_errors():
    descriptions = [
        "The age of the victim is not mentioned in the text.",
        "The location of the attack is not mentioned in the text.",
        "The victim's age is not mentioned in the text.",
        "The text does not mention the age of the victim.",
    ]
    groups = fuzzy_duplicate_groups(descriptions, 85.0)
    assert [0, 3] in groups or [0, 2, 3] in groups  # reworded duplicates merge
    assert [1] in groups  # a different piece of information stays apart


def test_fuzzy_dedup_merges_descriptions_pinned_to_the_same_words():
    from halluscope.records import Span

    spans = [[Span(start=0, end=6)], [Span(start=0, end=6)], [Span(start=10, end=14)]]
    groups = fuzzy_duplicate_groups(["Amazon is wrong", "It was Philips, not that company", "other"], 85.0, spans)
    assert groups == [[0, 1], [2]]


# ------------------------------------------------------------------------------------------------ method


def test_factscore_describe_with_fuzzy_dedup():
    report = get_method("factscore", llm=fake(), deduplicator="fuzzy").check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3)
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "unsupported"]
    assert report.subscores == {"claims": 3.0, "judged": 3.0, "supported": 1.0}
    assert report.details["stages"]["decomposer"] == "factscore" and report.details["stages"]["verifier"] == "factscore"
    assert report.details["context"]["mode"] == "full"
    # the "Amazon" error appears in facts 1 and 3 and is reported once (same quoted words)
    assert report.details["descriptions_before_dedup"] == 3
    assert len(report.findings) == 2
    amazon = next(f for f in report.findings if "Philips" in f.description)
    assert sorted(amazon.claim_ids) == ["f1", "f3"]
    assert amazon.target_spans[0].of(TARGET) == "Amazon"
    cease = next(f for f in report.findings if "cease" in f.description)
    assert cease.target_spans[0].of(TARGET) == "cease operations"
    assert report.claims[2].target_spans[0].of(TARGET) == "The police ordered Amazon to cease operations."
    assert report.usage.calls == 4 and len(report.calls) == 4


def test_factscore_llm_dedup_is_the_default_and_keeps_the_selected_wordings():
    # the paper (FINAL paper, App. C.2) de-duplicates with the LLM: that is the default
    assert FactScore(llm=fake()).chosen["deduplicator"][0] == "llm"
    report = FactScore(llm=fake()).check(SOURCE, TARGET)
    assert report.details["descriptions_before_dedup"] == 3
    assert len(report.findings) == 2
    assert report.usage.calls == 5
    dedup_prompt = report.calls[-1].messages[-1]["content"]
    assert "DESCRIPTIONS:" in dedup_prompt and "1. " in dedup_prompt and "3. " in dedup_prompt
    assert "factscore_dedup@" in FactScore(llm=fake()).prompt_version
    assert "factscore_dedup@" not in FactScore(llm=fake(), deduplicator="fuzzy").prompt_version
    # the kept wordings are descriptions 1 and 3, as the model chose (by number, never reworded)
    kept = sorted(f.description for f in report.findings)
    assert kept == sorted([report.verdicts[0].reason.split("\n")[0], report.verdicts[2].reason.split("\n")[-1]])


def test_factscore_llm_dedup_failure_falls_back_explicitly():
    report = FactScore(llm=fake(by_reply=JUDGE | {"KeepReply": "no idea"}), deduplicator="llm").check(SOURCE, TARGET)
    assert "used fuzzy" in report.details["dedup_error"]
    assert len(report.findings) == 2


@pytest.mark.parametrize(
    "bad",
    ["no idea", LLMError("the server closed the connection"), ContextOverflowError("the descriptions do not fit")],
)
def test_a_failed_dedup_call_keeps_the_verdicts_and_the_score_and_says_so(bad):
    """A de-duplication call that raised used to void the pair (unscored, no verdicts) though every verdict was in."""
    good = FactScore(llm=fake()).check(SOURCE, TARGET)
    report = FactScore(llm=fake(by_reply=JUDGE | {"KeepReply": bad})).check(SOURCE, TARGET)
    assert report.unscored_reason is None and report.score == good.score == pytest.approx(1 / 3)
    assert [v.label for v in report.verdicts] == [v.label for v in good.verdicts]
    assert report.details["dedup_error"].startswith("LLM de-duplication failed")
    assert "used fuzzy de-duplication" in report.details["dedup_error"]
    assert "de-duplication failed" in report.details["dedup_note"] and "score" in report.details["dedup_note"]
    assert report.findings and "dedup_error" not in good.details and "dedup_note" not in good.details
    if isinstance(bad, Exception):
        assert str(bad) in report.details["dedup_error"]


def test_a_plugin_deduplicator_whose_call_fails_keeps_every_description():
    @register_stage("test_failing_dedup", "deduplicator")
    class Failing:
        uses_llm = False
        note = None

        def __init__(self, model, options):
            pass

        async def __call__(self, descriptions, spans, target):
            raise LLMError("the dedup service is down")

    report = FactScore(llm=fake(), deduplicator="test_failing_dedup").check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3) and report.details["descriptions_before_dedup"] == 3
    assert len(report.findings) == 3 and "kept every description" in report.details["dedup_error"]


def test_factscore_without_descriptions():
    def verify(messages):
        return json.dumps({"supported": "Amazon" not in fenced(messages, "fact")})

    method = FactScore(llm=fake(by_reply={"FactsReply": FACTS, "FactCheckReply": verify}), describe=False)
    report = method.check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3)
    assert [f.description for f in report.findings] == [
        "Not supported by the source: Amazon was investigated.",
        "Not supported by the source: The police ordered Amazon to cease operations.",
    ]
    assert "inconsistencies" not in report.verdicts[0].calls[0].messages[-1]["content"]
    assert "factscore_verify@" in method.prompt_version and "factscore_describe@" not in method.prompt_version


def test_unsupported_fact_without_description_gets_one():
    def verify(messages):
        return json.dumps({"supported": "month" in fenced(messages, "fact"), "inconsistencies": []})

    report = FactScore(
        llm=fake(by_reply={"FactsReply": FACTS, "FactJudgmentReply": verify}), deduplicator="none"
    ).check(SOURCE, TARGET)
    assert [f.description for f in report.findings][0] == "Not supported by the source: Amazon was investigated."


@pytest.mark.parametrize("prose", PROSE_VERDICTS)
def test_a_prose_verdict_is_unscored_not_a_verdict(prose):
    def verify(messages):
        return prose if "cease" in fenced(messages, "fact") else judge(messages)

    report = FactScore(llm=fake(by_reply=JUDGE | {"FactJudgmentReply": verify})).check(SOURCE, TARGET)
    assert report.score == 0.5 and report.subscores["judged"] == 2.0
    third = report.verdicts[2]
    assert third.label == "unscored" and "verification reply unusable" in third.reason
    assert [c.reply for c in third.calls] == [prose, prose]  # the reply and its repair round, kept for audit
    assert all("f3" not in f.claim_ids for f in report.findings)  # no finding from a reply without a verdict


@pytest.mark.parametrize("reply", PLACEHOLDER_FACTS)
def test_a_placeholder_decomposition_is_unscored_not_zero(reply):
    # the embedded model once echoed "<atomic fact>"; 13/15 QAGS items were then scored 0.0
    scripted = {"FactsReply": reply, "FactJudgmentReply": '{"supported": false, "inconsistencies": []}'}
    report = FactScore(llm=fake(by_reply=scripted)).check(SOURCE, TARGET)
    assert report.score is None and "decomposition failed" in report.unscored_reason
    assert report.findings == [] and report.verdicts == []
    assert len(report.calls) == 2 and all(c.reply == reply for c in report.calls)


def test_decomposition_failure_is_unscored():
    report = FactScore(llm=LLM(FakeModel(["nothing useful", "[]"]), cache=None)).check(SOURCE, TARGET)
    assert report.score is None and "decomposition failed" in report.unscored_reason
    assert [c.reply for c in report.calls] == ["nothing useful", "[]"]


def test_no_judged_fact_gives_an_unscored_report():
    report = FactScore(llm=fake(by_reply={"FactsReply": FACTS}, default="No problem!")).check(SOURCE, TARGET)
    assert report.score is None and "could be judged" in report.unscored_reason
    assert [v.label for v in report.verdicts] == ["unscored"] * 3 and report.findings == []


LONG_SOURCE = " ".join(f"Unrelated filler sentence {i} about the weather." for i in range(300)) + " " + SOURCE


def test_factscore_retrieval_when_the_source_does_not_fit():
    llm = fake(context_window=700)
    llm.default_params = llm.params(max_tokens=200)
    report = FactScore(llm=llm, retriever="bm25", top_k=2, window=1).check(LONG_SOURCE, TARGET)
    context = report.details["context"]
    assert context["mode"] == "retrieval" and "does not fit" in context["why"]
    assert report.score == pytest.approx(1 / 3)
    evidence = report.verdicts[1].evidence[0]
    assert evidence.relation == "supports" and "a month" in evidence.text
    assert evidence.span.of(LONG_SOURCE) == evidence.text
    assert all(len(c.messages[-1]["content"]) < 2500 for v in report.verdicts for c in v.calls)


def test_retrieval_options_and_the_snippets_used():
    report = get_method("factscore", llm=fake(), retrieval="always", top_k=3, window=1, retriever="bm25").check(
        LONG_SOURCE, TARGET
    )
    context = report.details["context"]
    assert context["mode"] == "retrieval" and "retrieval=always" in context["why"]
    assert set(context["snippets"]) == {"f1", "f2", "f3"}
    assert all(1 <= len(s) <= 3 for s in context["snippets"].values())
    assert all(len(snippet["sentences"]) <= 3 for s in context["snippets"].values() for snippet in s)
    assert report.score == pytest.approx(1 / 3)


def test_cli_retrieval_options(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import halluscope.methods.base as method_base
    from halluscope.cli.main import app

    monkeypatch.setattr(method_base, "get_llm", lambda config: fake())
    (tmp_path / "s.txt").write_text(LONG_SOURCE, encoding="utf-8")
    (tmp_path / "t.txt").write_text(TARGET, encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "check",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--method",
            "factscore",
            "--json",
            "-o",
            "retrieval=always",
            "-o",
            "top_k=3",
            "-o",
            "window=1",
            "-o",
            "retriever=bm25",
        ],
    )
    assert result.exit_code in (0, 1), result.output
    report = Report.model_validate_json(result.output)
    assert result.exit_code == (1 if report.label == "inconsistent" else 0)  # the documented exit codes
    assert report.details["context"]["mode"] == "retrieval" and set(report.details["context"]["snippets"]) == {
        "f1",
        "f2",
        "f3",
    }


def test_options_validation():
    for bad in (
        {"deduplicator": "magic"},
        {"dedup": "llm"},
        {"retriever": "tfidf"},
        {"retrieval": True},
        {"dedup_threshold": 101},
        {"nonsense": 1},
    ):
        with pytest.raises(OptionsError):
            FactScore(llm=fake(), **bad)
    with pytest.raises(ValueError, match="no verifier stage named"):
        FactScore(llm=fake(), verifier="nope").check(SOURCE, TARGET)
    docs = {row["name"]: row["doc"] for row in FactScore.Options.option_rows()}
    assert {"describe", "deduplicator", "dedup_threshold", "retrieval", "top_k", "window", "verifier"} <= set(docs)
    assert all(docs.values())


# ------------------------------------------------------------------------------------------ swapped verifiers


@register_stage("test_first_word", "verifier")
class FirstWordVerifier(LLMVerifier):
    """Test-only: asks the model one word per claim; 'ok' is supported, 'bad' unsupported, else unscored."""

    def messages(self, claims: Sequence[Claim], context_text: str):
        return [{"role": "user", "content": f"CHECK {claims[0].text} AGAINST {context_text}"}]

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        out = []
        for claim in claims:
            completion = await self.llm.generate(self.messages([claim], context.text))
            word = completion.text.strip()
            if word in ("ok", "bad"):
                out.append(
                    Verdict(
                        claim=claim,
                        label="supported" if word == "ok" else "unsupported",
                        reason=f"the model said {word}",
                    )
                )
            else:
                out.append(Verdict.unscored(claim, f"no verdict in {word[:20]!r}"))
        return out


def test_a_swapped_verifier_runs_end_to_end():
    def verify(messages):  # a plain-text verifier: the request asks for no schema
        user = messages[-1]["content"]
        return "bad" if "Amazon" in user.split("AGAINST")[0] else "ok"

    method = get_method(
        "factscore",
        llm=fake(by_reply={"FactsReply": FACTS, "text": verify, "KeepReply": '{"keep": [1, 2]}'}),
        verifier="test_first_word",
    )
    assert not isinstance(method.verifier, FactScoreVerifier)
    report = method.check(SOURCE, TARGET)
    assert report.details["stages"]["verifier"] == "test_first_word"
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "unsupported"]
    assert report.score == pytest.approx(1 / 3)
    # each unsupported fact gives one description (the fact and the verifier's reason), de-duplicated
    assert report.details["descriptions_before_dedup"] == 2 and report.findings
    assert all(f.claim_ids and set(f.claim_ids) <= {"f1", "f3"} for f in report.findings)
    assert report.findings[0].target_spans[0].of(TARGET) == "Amazon was investigated"  # the quoted fact, located


def test_the_probe_verifier_swapped_into_factscore():
    def evaluate(messages):  # PROBE's evaluation of one excerpt
        verdict = "FAIL" if "Amazon" in fenced(messages, "claim") else "PASS"
        return json.dumps({"reasoning": "", "verdict": verdict})

    scripted = {
        "FactsReply": FACTS,
        "EvidenceReply": json.dumps(
            {
                "reasoning": "",
                "evidence": [  # PROBE's evidence finding: a quote
                    "The police investigated Philips for a month and let it continue."
                ],
            }
        ),
        "EvaluationReply": evaluate,
        "KeepReply": json.dumps({"keep": [1, 2]}),
    }  # FActScore's default LLM de-duplication
    report = get_method("factscore", llm=fake(by_reply=scripted), verifier="probe").check(SOURCE, TARGET)
    assert report.details["stages"]["verifier"] == "probe"
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "unsupported"]
    assert report.score == pytest.approx(1 / 3) and report.findings


def test_the_factscore_verifier_serves_another_claim_method():
    from halluscope.methods.pipeline import ClaimPipeline
    from halluscope.stages.decomposers import SentenceDecomposer

    class Sentences(ClaimPipeline):
        name = "test_sentences_factscore"
        default_verifier = "test_first_word"

        def make_decomposer(self):
            return SentenceDecomposer()

    def verify(messages):
        return json.dumps(
            {
                "supported": "Amazon" not in fenced(messages, "fact"),
                "inconsistencies": []
                if "Amazon" not in fenced(messages, "fact")
                else ['"Amazon" is not in the source.'],
            }
        )

    report = Sentences(llm=fake(by_reply={"FactJudgmentReply": verify}), verifier="factscore").check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["unsupported", "unsupported"]
    assert report.score == 0.0 and '"Amazon" is not in the source.' in report.verdicts[0].reason


# ---------------------------------------------------------------------------------------------- fuzzing


@pytest.mark.parametrize("options", [{}, {"describe": False}, {"deduplicator": "fuzzy"}])
def test_garbled_replies_some_scored_some_not_and_no_finding_without_a_verdict(options):
    rng = random.Random(19)
    pool = garbled_replies(400, seed=19) + PLACEHOLDER_FACTS + PROSE_VERDICTS

    def garbled(valid):
        return lambda messages: rng.choice(pool) if rng.random() < 0.5 else valid(messages)

    scripted = {
        "FactsReply": garbled(lambda m: FACTS),
        "KeepReply": garbled(lambda m: '{"keep": [1]}'),
        "FactJudgmentReply": garbled(judge),
        "FactCheckReply": garbled(judge),
    }
    method = FactScore(llm=fake(by_reply=scripted), **options)
    outcomes = {"scored": 0, "unscored": 0}
    for _ in range(40):
        report = method.check(SOURCE, TARGET)
        assert isinstance(report, Report)
        outcomes["scored" if report.score is not None else "unscored"] += 1
        for v in report.verdicts:
            if v.label == "unscored":
                assert v.calls  # the reply that could not be used, kept for audit
                continue
            stated = re.search(r'"supported"\s*:\s*(true|false)', v.calls[-1].reply)  # the reply that decided
            assert stated and (stated.group(1) == "true") == (v.label == "supported")
        flagged = {v.claim.id for v in report.verdicts if v.label == "unsupported"}
        assert all(f.claim_ids and set(f.claim_ids) <= flagged for f in report.findings)
    assert outcomes["scored"] > 0 and outcomes["unscored"] > 0


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_factscore_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("factscore", config=config).check("The cat sat on the mat.", "The dog sat on the mat.")
    assert report.usage.calls >= 1
    judged = [v for v in report.verdicts if v.label != "unscored"]
    if report.score is not None:  # the fraction of judged facts that are supported
        assert report.score == pytest.approx(sum(v.label == "supported" for v in judged) / len(judged))
