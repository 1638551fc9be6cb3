"""``probe``: quote verification, span mapping, consensus voting, narrowing, parsers fuzzed, garbled end to end."""

from __future__ import annotations

import json
import re

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods.probe import (EvidenceJudgment, Probe, Vote, parse_claims, parse_evidence, parse_verdict,
                                      place_claims, _ClaimItem)
from halluscope.records import Evidence, Report, Span
from halluscope.text import ParseError
from tests.garble import garbled_replies

SOURCE = ("Marie Curie was born in Warsaw in 1867. She moved to Paris in 1891 to study physics. "
          "In 1903 she shared the Nobel Prize in Physics. She later won a second Nobel Prize, in Chemistry.")
TARGET = "Marie Curie, born in Warsaw, won the Nobel Prize in Physics in 1903. She also taught at Oxford."

DECOMPOSITION = json.dumps({"claims": [
    {"segment": "Marie Curie, born in Warsaw", "claim": "Marie Curie was born in Warsaw."},
    {"segment": "won the Nobel Prize in Physics in 1903", "claim": "Marie Curie won the Nobel Prize in Physics in 1903."},
    {"segment": "She also taught at Oxford.", "claim": "Marie Curie taught at Oxford."},
]})

EVIDENCE = {
    "born in Warsaw": ["Marie Curie was born in Warsaw in 1867."],
    "Physics in 1903": ["In 1903 she shared the Nobel Prize in Physics.", "She moved to Paris in 1891 to study physics."],
    "Oxford": ["Marie Curie lectured at Oxford for many years."],  # invented: not in the source
}


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def responder(pass_rule=lambda claim, evidence: True):
    """A scripted model that reads the probe prompts and answers each step."""

    def reply(messages):
        user = messages[-1]["content"]
        if "List every assertion" in user:
            return DECOMPOSITION
        if "Find the passages" in user:
            claim = _between(user, "ASSERTION:\n", "\n\n")
            for key, quotes in EVIDENCE.items():
                if key in claim:
                    return json.dumps({"reasoning": "see source", "evidence": quotes})
            return json.dumps({"reasoning": "nothing", "evidence": []})
        if "Decide whether the EVIDENCE EXCERPT" in user:
            claim = _between(user, "ASSERTION:\n", "EVIDENCE EXCERPT:")
            evidence = _between(user, "EVIDENCE EXCERPT:", "SURROUNDING CONTEXT:")
            verdict = "PASS" if pass_rule(claim, evidence) else "FAIL"
            return json.dumps({"reasoning": "...", "verdict": verdict})
        raise AssertionError(f"unexpected prompt: {user[:80]}")

    return reply


def default_pass(claim: str, evidence: str) -> bool:
    return ("Warsaw" in claim and "Warsaw" in evidence) or ("1903" in claim and "1903" in evidence)


def make_probe(**kwargs) -> Probe:
    llm = LLM(FakeModel(responder=responder(default_pass)), cache=None)
    return get_method("probe", llm=llm, **kwargs)  # type: ignore[return-value]


def test_end_to_end_steps_spans_and_score():
    report = make_probe(narrow="never").check(SOURCE, TARGET)
    assert report.score == pytest.approx(2 / 3)
    labels = {v.claim.id: v.label for v in report.verdicts}
    assert labels == {"c1": "supported", "c2": "supported", "c3": "unsupported"}
    # step 1: claims mapped to exact target spans
    c3 = report.claims[2]
    assert c3.target_spans[0].of(TARGET) == "She also taught at Oxford."
    assert report.claims[1].target_spans[0].of(TARGET) == "won the Nobel Prize in Physics in 1903"
    # step 2: verified quotes carry exact source spans; the invented quote is rejected and recorded
    supported = report.verdicts[0].evidence[0]
    assert supported.span is not None and supported.span.of(SOURCE) == supported.text
    assert supported.relation == "supports"
    finding_step = {f["claim_id"]: f for f in report.details["steps"]["evidence_finding"]}
    assert [q["status"] for q in finding_step["c3"]["quotes"]] == ["rejected"]
    assert "rejected" in report.verdicts[2].reason
    # step 3: one judgment per verified passage (c1: 1, c2: 2)
    evals = report.details["steps"]["evidence_evaluation"]
    assert [e["claim_id"] for e in evals] == ["c1", "c2", "c2"]
    assert [e["accepted"] for e in evals] == [True, True, False]
    # step 4: the hallucinated claim is localized
    [finding] = report.findings
    assert finding.claim_ids == ["c3"] and finding.target_spans[0].of(TARGET) == "She also taught at Oxford."
    assert report.details["steps"]["localization"]["hallucinated_claim_ids"] == ["c3"]
    assert report.subscores["quotes_rejected"] == 1 and report.subscores["quotes_verified"] == 3
    # audit: every verdict keeps its prompts and raw replies
    assert all(v.calls for v in report.verdicts)
    assert report.calls and "List every assertion" in report.calls[0].messages[-1]["content"]
    assert report.usage.calls == 1 + 3 + 3  # decompose + 3 finder calls + 3 evaluations
    Report.model_validate_json(report.model_dump_json())  # round-trips


def test_place_claims_segment_then_claim_then_similar_sentence_then_unplaced():
    target = "The cat sat on the mat. The dog barked at the mailman all morning."
    items = [
        _ClaimItem(claim="A cat sat.", segment="The cat sat on the mat."),             # exact segment
        _ClaimItem(claim="The dog barked at the mailman", segment="not in the text"),  # claim wording
        _ClaimItem(claim="In the morning the dog barked loudly at a mailman", segment=""),  # similar sentence
        _ClaimItem(claim="Quantum chromodynamics explains quarks.", segment="nope"),   # nowhere
    ]
    claims, placements = place_claims(items, target)
    assert claims[0].target_spans[0].of(target) == "The cat sat on the mat."
    assert placements[0]["placed_by"] == "segment:exact"
    assert claims[1].target_spans[0].of(target) == "The dog barked at the mailman"
    assert placements[1]["placed_by"] == "claim:exact"
    assert claims[2].target_spans[0].of(target) == "The dog barked at the mailman all morning."
    assert placements[2]["placed_by"] == "sentence:similar"
    assert claims[3].target_spans == [] and placements[3]["placed_by"] == "unplaced"


def test_quote_verification_accepts_whitespace_and_quote_variants_only():
    source = "He said: \u201cWe will win.\u201d Then   he left the room."
    llm = LLM(FakeModel(responder=lambda m: json.dumps({"evidence": [
        "Then he left the room.",            # whitespace differs -> normalized match
        '"We will win."',                    # wrapped in quotes -> stripped
        "He said that they would lose.",     # invented
    ]})), cache=None)
    from halluscope.methods.probe import ProbeFindEvidence
    from halluscope.records import Claim
    import asyncio

    found = asyncio.run(ProbeFindEvidence(llm)(Claim(text="He left.", id="c1"), source))
    statuses = [q["status"] for q in found.quotes]
    assert statuses == ["verified", "verified", "rejected"]
    assert [e.span.of(source) for e in found.evidence] == ["Then   he left the room.", "We will win."]
    assert all(e.text == e.span.of(source) for e in found.evidence)


def test_consensus_voting_threshold_and_unreadable_votes():
    ev = Evidence(text="x", span=Span(start=0, end=1))

    def judgment(*verdicts, consensus=0.75):
        votes = [Vote(f"j{i}", 0, v, None if v is not None else "bad reply") for i, v in enumerate(verdicts)]
        return EvidenceJudgment("c1", ev, votes, [], consensus)

    assert judgment(True, True, True, False).accepted is True       # 3 of 4 = 0.75
    assert judgment(True, True, False, False).accepted is False     # 2 of 4
    assert judgment(True, True, False, False, consensus=0.5).accepted is True
    assert judgment(True, True, True, None).accepted is True         # 3 of 3 valid
    assert judgment(True, None, None, None).accepted is None         # too few readable votes
    assert judgment(None).accepted is None and judgment(None).pass_fraction is None


def test_multi_judge_consensus_end_to_end():
    def judge(verdict_for_oxford: str, name: str) -> LLM:
        def reply(messages):
            user = messages[-1]["content"]
            excerpt = _between(user, "EVIDENCE EXCERPT:", "SURROUNDING CONTEXT:")
            verdict = "PASS" if "Warsaw" in excerpt else verdict_for_oxford
            return json.dumps({"reasoning": "", "verdict": verdict})

        return LLM(FakeModel(responder=reply, name=name), cache=None)

    main = LLM(FakeModel(responder=responder()), cache=None)
    judges = [judge("FAIL", "a"), judge("FAIL", "b"), judge("PASS", "c"), judge("PASS", "d")]
    report = Probe(llm=main, judges=judges, consensus=0.75, narrow="never").check(SOURCE, TARGET)
    evals = report.details["steps"]["evidence_evaluation"]
    warsaw = next(e for e in evals if e["claim_id"] == "c1")
    assert warsaw["pass_fraction"] == 1.0 and warsaw["accepted"] is True
    assert [v["judge"] for v in warsaw["votes"]] == ["a", "b", "c", "d"]
    physics = [e for e in evals if e["claim_id"] == "c2"]
    assert all(e["pass_fraction"] == 0.5 and e["accepted"] is False for e in physics)
    assert {v.claim.id: v.label for v in report.verdicts}["c2"] == "unsupported"
    lenient = Probe(llm=main, judges=judges, consensus=0.5, narrow="never").check(SOURCE, TARGET)
    assert {v.claim.id: v.label for v in lenient.verdicts}["c2"] == "supported"


def test_repeated_samples_use_their_own_seed_and_temperature():
    model = FakeModel(responder=responder(default_pass))
    probe = Probe(llm=LLM(model, cache=None), samples=3, narrow="never")
    report = probe.check(SOURCE, TARGET)
    evals = report.details["steps"]["evidence_evaluation"]
    assert all(len(e["votes"]) == 3 for e in evals)
    assert [j.params().seed for j in probe.judges()] == [0, 1, 2]
    assert probe.judges()[1].params().temperature == 0.7


def test_narrowing_on_a_long_source_shows_only_snippets_and_locates_in_full_source():
    filler = " ".join(f"On day {i} the weather in the valley was mild and nothing happened." for i in range(300))
    source = filler + " " + SOURCE + " " + filler
    model = FakeModel(responder=responder(default_pass), context_window=2000)
    report = Probe(llm=LLM(model, cache=None), retriever="bm25", top_k=2, window=1).check(source, TARGET)
    assert report.details["source_mode"] == "retrieval"
    assert report.details["retrieval"]["retriever"] == "bm25"
    finder_prompts = [r[-1]["content"] for r in model.requests if "Find the passages" in r[-1]["content"]]
    assert finder_prompts and all(len(p) < 2500 for p in finder_prompts)
    assert all("excerpts of a longer document" in p for p in finder_prompts)
    warsaw = report.verdicts[0].evidence[0]
    assert warsaw.span.of(source) == "Marie Curie was born in Warsaw in 1867."
    assert report.score == pytest.approx(2 / 3)


def test_decomposition_failure_falls_back_to_sentences_or_unscored():
    def reply(messages):
        user = messages[-1]["content"]
        if "List every assertion" in user or "could not be used" in user:
            return "I am not sure what you mean."
        return responder(default_pass)(messages)

    report = Probe(llm=LLM(FakeModel(responder=reply), cache=None), narrow="never").check(SOURCE, TARGET)
    step = report.details["steps"]["decomposition"]
    assert step["fallback"] == "sentences" and step["error"]
    assert [c.kind for c in report.claims] == ["sentence", "sentence"]
    strict = Probe(llm=LLM(FakeModel(responder=reply), cache=None), on_decompose_error="unscored").check(SOURCE, TARGET)
    assert strict.score is None and "decomposition failed" in strict.unscored_reason


def test_unparseable_evaluation_makes_claim_unscored_not_unsupported():
    def reply(messages):
        user = messages[-1]["content"]
        if "Decide whether" in user or "could not be used" in user:
            return "Hmm, hard to say."
        return responder()(messages)

    report = Probe(llm=LLM(FakeModel(responder=reply), cache=None), narrow="never").check(SOURCE, TARGET)
    labels = {v.claim.id: v.label for v in report.verdicts}
    assert labels["c1"] == "unscored" and labels["c2"] == "unscored"
    assert labels["c3"] == "unsupported"  # no verified passage at all: nothing to judge
    assert report.score == 0.0 and report.subscores["unscored_claims"] == 2
    assert "could not be judged" in report.verdicts[0].reason


# --- parsers -------------------------------------------------------------------------------------------------


def test_parse_verdict_forms():
    assert parse_verdict('{"reasoning": "ok", "verdict": "PASS"}') is True
    assert parse_verdict('{"verdict": "fail"}') is False
    assert parse_verdict("REASONING: the excerpt says so.\nVERDICT: PASS") is True
    assert parse_verdict("Reasoning...\nVerdict: **FAIL**") is False
    assert parse_verdict("PASS") is True and parse_verdict("fail.") is False
    for bad in ("VERDICT: PASS or FAIL", "", "I think it passes the test but fails otherwise", '{"verdict": "maybe"}',
                "The evidence is fine."):
        with pytest.raises(ParseError):
            parse_verdict(bad)


def test_parse_claims_and_evidence_forms():
    assert [c.claim for c in parse_claims('["A is B.", "C is D."]')] == ["A is B.", "C is D."]
    items = parse_claims("> Alice met Bob\nAlice met Bob.\n> in 1990\nThe meeting was in 1990.")
    assert [(i.segment, i.claim) for i in items] == [("Alice met Bob", "Alice met Bob."), ("in 1990", "The meeting was in 1990.")]
    for bad in ('{"claims": []}', '{"other": 1}', "no claims here", ""):
        with pytest.raises(ParseError):
            parse_claims(bad)
    assert parse_evidence('{"evidence": []}') == []
    assert parse_evidence('{"evidence": ["a b c"]}') == ["a b c"]
    assert parse_evidence("Thinking: hmm\nFINAL OUTPUT:\nSegment #1\nThe sky is blue.") == ["The sky is blue."]
    assert parse_evidence("thinking...\nFINAL OUTPUT: None") == []
    for bad in ("Sure! The sky is blue.", '{"foo": 1}', '{"evidence": [1, 2]}', ""):
        with pytest.raises(ParseError):
            parse_evidence(bad)


@pytest.mark.parametrize("parser", [parse_claims, parse_evidence, parse_verdict])
def test_parsers_fuzzed_with_garbled_replies(parser):
    outcomes = {"ok": 0, "error": 0}
    for reply in garbled_replies(1200):
        try:
            parser(reply)
            outcomes["ok"] += 1
        except ParseError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and sum(outcomes.values()) == 1200


def test_garbled_model_end_to_end_never_raises_and_every_failure_has_a_reason():
    replies = garbled_replies(1000, seed=3)
    counter = {"i": 0}

    def reply(messages):
        counter["i"] += 1
        return replies[counter["i"] % len(replies)]

    probe = Probe(llm=LLM(FakeModel(responder=reply), cache=None), narrow="never")
    for k in range(25):
        report = probe.check(SOURCE, TARGET + f" Extra {k}.")
        Report.model_validate_json(report.model_dump_json())
        assert report.score is not None or report.unscored_reason
        for v in report.verdicts:
            assert v.label != "unscored" or v.reason
            if v.label == "unsupported":  # only when the model answered in the expected format
                step = next(f for f in report.details["steps"]["evidence_finding"] if f["claim_id"] == v.claim.id)
                assert step["error"] is None
        for f in report.findings:
            for s in f.target_spans:
                assert 0 <= s.start <= s.end <= len(TARGET) + 10


def test_options_and_validation():
    probe = make_probe(top_k=5, window=2, consensus=0.5)
    opts = probe.options()
    assert opts["top_k"] == 5 and opts["window"] == 2 and opts["consensus"] == 0.5 and opts["judges"] is None
    for bad in ({"samples": 0}, {"consensus": 0}, {"narrow": "sometimes"}, {"max_evidence": 0}):
        with pytest.raises(ValueError):
            make_probe(**bad)
    assert re.search(r"probe_decompose@1", probe.prompt_version)


def test_retrieval_evidence_finder_makes_no_finder_calls():
    model = FakeModel(responder=responder(default_pass))
    report = Probe(llm=LLM(model, cache=None), evidence="retrieval", retriever="bm25", max_evidence=2).check(SOURCE, TARGET)
    assert not any("Find the passages" in r[-1]["content"] for r in model.requests)
    assert report.details["source_mode"] == "retrieved evidence"
    assert report.details["retrieval"]["retriever"] == "bm25"
    for step in report.details["steps"]["evidence_finding"]:
        assert 1 <= len(step["quotes"]) <= 2 and all(q["status"] == "retrieved" for q in step["quotes"])
    for v in report.verdicts:
        assert all(e.span.of(SOURCE) == e.text for e in v.evidence)
    labels = {v.claim.id: v.label for v in report.verdicts}
    assert labels["c1"] == "supported" and labels["c3"] == "unsupported"
    with pytest.raises(ValueError):
        make_probe(evidence="psychic")


def test_echoed_template_placeholders_are_not_claims_or_quotes():
    with pytest.raises(ParseError, match="placeholder"):
        parse_claims('{"claims": [{"segment": "<copied from the TEXT>", "claim": "<assertion>"}]}')
    items = parse_claims('{"claims": [{"segment": "<copied from the TEXT>", "claim": "Ann buys butter."}]}')
    assert [(i.segment, i.claim) for i in items] == [("", "Ann buys butter.")]
    with pytest.raises(ParseError, match="placeholder"):
        parse_evidence('{"evidence": ["<passage copied from the SOURCE>"]}')
