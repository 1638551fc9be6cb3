"""``probe``: quote verification, span mapping, consensus voting, retrieval, strict replies,
swappable verifier, parsers fuzzed, garbled models end to end."""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import halluscope.methods.base as method_base
from halluscope.llm import LLM, ContextOverflowError, FakeModel
from halluscope.llm.fake import label_logprobs
from halluscope.methods import OptionsError, get_method
from halluscope.methods.pipeline import ClaimPipeline
from halluscope.methods.probe import (
    ClaimEntry,
    EvaluationReply,
    EvidenceJudgment,
    EvidenceReply,
    Probe,
    ProbeEvidenceFinder,
    Vote,
    is_template_echo,
    parse_claims,
    place_claims,
)
from halluscope.records import Claim, Evidence, Report, Span, Verdict
from halluscope.report import render_html
from halluscope.stages import Context, register_stage
from halluscope.stages.decomposers import SentenceDecomposer
from halluscope.stages.verifiers import LLMVerifier
from halluscope.text import ParseError
from tests.garble import garbled_replies
from tests.prompt_data import fenced
from tests.reply_fuzz import mutations, parse_each

SOURCE = (
    "Marie Curie was born in Warsaw in 1867. She moved to Paris in 1891 to study physics. "
    "In 1903 she shared the Nobel Prize in Physics. She later won a second Nobel Prize, in Chemistry."
)
TARGET = "Marie Curie, born in Warsaw, won the Nobel Prize in Physics in 1903. She also taught at Oxford."

DECOMPOSITION = json.dumps(
    {
        "claims": [
            {"segment": "Marie Curie, born in Warsaw", "claim": "Marie Curie was born in Warsaw."},
            {
                "segment": "won the Nobel Prize in Physics in 1903",
                "claim": "Marie Curie won the Nobel Prize in Physics in 1903.",
            },
            {"segment": "She also taught at Oxford.", "claim": "Marie Curie taught at Oxford."},
        ]
    }
)

EVIDENCE = {
    "born in Warsaw": ["Marie Curie was born in Warsaw in 1867."],
    "Physics in 1903": [
        "In 1903 she shared the Nobel Prize in Physics.",
        "She moved to Paris in 1891 to study physics.",
        "Curie alone won the 1903 prize for her work on radium.",
    ],  # the last one is invented
    "Oxford": ["She moved to Paris in 1891 to study physics."],  # real, but it does not support the claim
}

# prompt wording, only for one assertion on the first prompt; this file's fakes are keyed by reply type and read
# the fenced data with tests/prompt_data.py
DECOMPOSE = "List every assertion"


def first_user(messages) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def responder(pass_rule=lambda claim, evidence: True, evidence=EVIDENCE) -> dict:
    """A scripted model keyed by the reply each PROBE stage asks for (``FakeModel(by_reply=...)``), reading the
    claim and evidence fenced in the prompt: the claims, quotes per claim, PASS where ``pass_rule`` says."""

    def find(messages):
        claim = fenced(messages, "claim")
        for key, quotes in evidence.items():
            if key in claim:
                return json.dumps({"reasoning": "see source", "evidence": quotes})
        return json.dumps({"reasoning": "nothing", "evidence": []})

    def evaluate(messages):
        verdict = "PASS" if pass_rule(fenced(messages, "claim"), fenced(messages, "evidence")) else "FAIL"
        return json.dumps({"reasoning": "...", "verdict": verdict})

    return {"ClaimsReply": DECOMPOSITION, "EvidenceReply": find, "EvaluationReply": evaluate}


def scripted(script) -> FakeModel:
    """A fake from a ``by_reply`` script (a dict) or a function of the messages."""
    return FakeModel(by_reply=script) if isinstance(script, dict) else FakeModel(responder=script)


def default_pass(claim: str, evidence: str) -> bool:
    return ("Warsaw" in claim and "Warsaw" in evidence) or ("1903" in claim and "1903" in evidence)


def make_probe(reply=None, **options) -> Probe:
    llm = LLM(scripted(reply or responder(default_pass)), cache=None)
    return get_method("probe", llm=llm, **options)  # type: ignore[return-value]


def labels(report: Report) -> dict[str, str]:
    return {v.claim.id: v.label for v in report.verdicts}


def test_end_to_end_steps_spans_and_score():
    report = make_probe(retrieval="never").check(SOURCE, TARGET)
    assert report.score == pytest.approx(2 / 3)
    assert labels(report) == {"c1": "supported", "c2": "supported", "c3": "unsupported"}
    steps = report.details["steps"]
    # step 1: claims mapped to exact target spans
    assert report.claims[2].target_spans[0].of(TARGET) == "She also taught at Oxford."
    assert report.claims[1].target_spans[0].of(TARGET) == "won the Nobel Prize in Physics in 1903"
    assert [c["placed_by"] for c in steps["decomposition"]["claims"]] == ["segment:exact"] * 3
    # step 2: verified quotes carry exact source spans; the invented quote is rejected and recorded
    supported = report.verdicts[0].evidence[0]
    assert supported.span is not None and supported.span.of(SOURCE) == supported.text
    assert supported.relation == "supports"
    finding = {f["claim_id"]: f for f in steps["evidence_finding"]}
    assert [q["status"] for q in finding["c2"]["quotes"]] == ["verified", "verified", "rejected"]
    assert finding["c3"]["outcome"] == "evidence" and finding["c3"]["error"] is None
    assert not finding["c1"]["narrowed"]
    # step 3: one judgment per verified passage (c1: 1, c2: 2, c3: 1)
    evals = steps["evidence_evaluation"]
    assert [e["claim_id"] for e in evals] == ["c1", "c2", "c2", "c3"]
    assert [e["accepted"] for e in evals] == [True, True, False, False]
    # step 4: the claim whose only passage the judges failed is localized, and the report says why
    [found] = report.findings
    assert found.claim_ids == ["c3"] and found.target_spans[0].of(TARGET) == "She also taught at Oxford."
    localization = steps["localization"]
    assert localization["hallucinated_claim_ids"] == ["c3"]
    assert localization["outcomes"] == {"c1": "supported", "c2": "supported", "c3": "unsupported:all_failed"}
    assert "judges failed all 1 passages" in report.verdicts[2].reason
    assert report.subscores["quotes_rejected"] == 1 and report.subscores["quotes_verified"] == 4
    assert report.subscores["unscored_claims"] == 0 and report.subscores["hallucinated_claims"] == 1
    assert report.details["context"]["mode"] == "full" and report.details["source_mode"] == "full"
    # audit: every verdict keeps its prompts and raw replies; the report keeps every exchange
    assert all(v.calls for v in report.verdicts)
    assert DECOMPOSE in report.calls[0].messages[-1]["content"]
    assert report.usage.calls == len(report.calls) == 1 + 3 + 4  # decompose + 3 finder calls + 4 evaluations
    Report.model_validate_json(report.model_dump_json())  # round-trips


def test_place_claims_segment_then_claim_then_similar_sentence_then_unplaced():
    target = "The cat sat on the mat. The dog barked at the mailman all morning."
    entries = [
        ClaimEntry(claim="A cat sat.", segment="The cat sat on the mat."),  # exact segment
        ClaimEntry(claim="The dog barked at the mailman", segment="not in the text"),  # claim wording
        ClaimEntry(claim="In the morning the dog barked loudly at a mailman", segment=""),  # similar sentence
        ClaimEntry(claim="Quantum chromodynamics explains quarks.", segment="nope"),  # nowhere
    ]
    claims, placements = place_claims(entries, target)
    assert claims[0].target_spans[0].of(target) == "The cat sat on the mat."
    assert placements[0]["placed_by"] == "segment:exact"
    assert claims[1].target_spans[0].of(target) == "The dog barked at the mailman"
    assert placements[1]["placed_by"] == "claim:exact"
    assert claims[2].target_spans[0].of(target) == "The dog barked at the mailman all morning."
    assert placements[2]["placed_by"] == "sentence:similar"
    assert claims[3].target_spans == [] and placements[3]["placed_by"] == "unplaced"


def _finder(reply: str) -> ProbeEvidenceFinder:
    return ProbeEvidenceFinder(LLM(FakeModel(by_reply={"EvidenceReply": reply}), cache=None))


def test_quote_verification_accepts_whitespace_and_quote_variants_only():
    source = "He said: \u201cWe will win.\u201d Then   he left the room."
    finder = _finder(
        json.dumps(
            {
                "evidence": [
                    "Then he left the room.",  # whitespace differs -> normalized match
                    '"We will win."',  # wrapped in quotes -> stripped
                    "He said that they would lose.",  # invented
                ]
            }
        )
    )
    found = asyncio.run(finder.search(Claim(text="He left.", id="c1"), Context(text=source), source))
    assert [q["status"] for q in found.quotes] == ["verified", "verified", "rejected"]
    assert [e.span.of(source) for e in found.evidence] == ["Then   he left the room.", "We will win."]
    assert all(e.text == e.span.of(source) for e in found.evidence)
    assert found.outcome == "evidence" and found.step().ok


def test_quotes_from_a_snippet_are_located_in_the_full_source():
    snippet_start = SOURCE.index("She moved")
    snippet_text = SOURCE[snippet_start : SOURCE.index(" She later")]
    span = Span(start=snippet_start, end=snippet_start + len(snippet_text))
    context = Context(text=snippet_text, kind="snippet", span=span)
    finder = _finder(
        json.dumps(
            {"evidence": ["In 1903 she shared the Nobel Prize in Physics.", "Marie Curie was born in Warsaw in 1867."]}
        )
    )  # 2nd: outside the snippet
    found = asyncio.run(finder.search(Claim(text="x", id="c1"), context, SOURCE))
    assert [(q["status"], q["located_in"]) for q in found.quotes] == [("verified", "snippet"), ("verified", "source")]
    assert [e.span.of(SOURCE) for e in found.evidence] == [
        "In 1903 she shared the Nobel Prize in Physics.",
        "Marie Curie was born in Warsaw in 1867.",
    ]
    prompt = finder.messages("x", snippet_text, "snippet")[-1]["content"]
    assert "SOURCE EXCERPT (part of a longer document" in prompt


def test_consensus_voting_threshold_and_unreadable_votes():
    ev = Evidence(text="x", span=Span(start=0, end=1))

    def judgment(*verdicts, consensus=0.75):
        votes = [Vote(f"j{i}", 0, v, None if v is not None else "bad reply") for i, v in enumerate(verdicts)]
        return EvidenceJudgment("c1", ev, votes, [], consensus)

    assert judgment(True, True, True, False).accepted is True  # 3 of 4 = 0.75 (the paper)
    assert judgment(True, True, False, False).accepted is False  # 2 of 4
    assert judgment(True, True, False, False, consensus=0.5).accepted is True
    assert judgment(True, True, True, None).accepted is True  # 3 of 3 valid
    assert judgment(True, None, None, None).accepted is None  # too few readable votes
    # one rule with the gold builder: the share of ALL votes (2 PASS of 3 votes < 0.75, though 2 of 2 valid)
    assert judgment(True, True, None).accepted is False and judgment(True, True, None).pass_fraction == 2 / 3
    assert judgment(None).accepted is None and judgment(None).pass_fraction is None


def test_multi_judge_consensus_end_to_end():
    def judge(verdict_for_others: str, name: str) -> LLM:
        def reply(messages):
            excerpt = fenced(messages, "evidence")
            verdict = "PASS" if "Warsaw" in excerpt else verdict_for_others
            return json.dumps({"reasoning": "", "verdict": verdict})

        return LLM(FakeModel(by_reply={"EvaluationReply": reply}, name=name), cache=None)

    main = LLM(FakeModel(by_reply=responder()), cache=None)
    judges = [judge("FAIL", "a"), judge("FAIL", "b"), judge("PASS", "c"), judge("PASS", "d")]
    report = Probe(llm=main, judges=judges, consensus=0.75, retrieval="never").check(SOURCE, TARGET)
    assert report.details["verifier"]["judges"] == ["a", "b", "c", "d"]
    assert Probe(llm=main, judges=judges).options()["judges"] == ["a", "b", "c", "d"]
    evals = report.details["steps"]["evidence_evaluation"]
    warsaw = next(e for e in evals if e["claim_id"] == "c1")
    assert warsaw["pass_fraction"] == 1.0 and warsaw["accepted"] is True
    assert [v["judge"] for v in warsaw["votes"]] == ["a", "b", "c", "d"]
    physics = [e for e in evals if e["claim_id"] == "c2"]
    assert all(e["pass_fraction"] == 0.5 and e["accepted"] is False for e in physics)
    assert labels(report)["c2"] == "unsupported"
    lenient = Probe(llm=main, judges=judges, consensus=0.5, retrieval="never").check(SOURCE, TARGET)
    assert labels(lenient)["c2"] == "supported"


def test_repeated_samples_use_their_own_seed_and_temperature():
    probe = make_probe(samples=3, retrieval="never")
    report = probe.check(SOURCE, TARGET)
    assert all(len(e["votes"]) == 3 for e in report.details["steps"]["evidence_evaluation"])
    judges = probe.verifier.evaluator.judges
    assert [j.params().seed for j in judges] == [0, 1, 2]
    assert judges[1].params().temperature == 0.7 and judges[0].params().temperature == 0.0


def _long_source() -> str:
    filler = " ".join(f"On day {i} the weather in the valley was mild and nothing happened." for i in range(300))
    return filler + " " + SOURCE + " " + filler


def test_auto_retrieval_on_a_long_source_shows_only_snippets_and_locates_in_full_source():
    source = _long_source()
    model = FakeModel(by_reply=responder(default_pass), context_window=2000)
    report = Probe(llm=LLM(model, cache=None), retriever="bm25", top_k=2, window=1).check(source, TARGET)
    context = report.details["context"]
    assert context["mode"] == "retrieval" and "does not fit" in context["why"] and context["retriever"] == "bm25"
    assert report.details["source_mode"] == "retrieval"
    finder_prompts = [first_user(r) for r, kind in zip(model.requests, model.reply_types) if kind == "EvidenceReply"]
    assert finder_prompts and all(len(p) < 2500 for p in finder_prompts)
    assert all("SOURCE EXCERPT" in p for p in finder_prompts)
    warsaw = report.verdicts[0].evidence[0]
    assert warsaw.span.of(source) == "Marie Curie was born in Warsaw in 1867."
    assert report.score == pytest.approx(2 / 3)
    for step in report.details["steps"]["evidence_finding"]:
        assert step["narrowed"] and step["snippets"]
        assert all(c["context"]["kind"] == "snippet" for c in step["contexts"])


def test_retrieval_always_with_top_k_and_window_shows_the_snippets_used():
    report = make_probe(retrieval="always", top_k=3, window=1, retriever="bm25").check(SOURCE, TARGET)
    context = report.details["context"]
    assert context["mode"] == "retrieval" and context["why"] == "requested (retrieval=always)"
    assert context["top_k"] == 3 and context["window"] == 1
    assert set(context["snippets"]) == {"c1", "c2", "c3"}
    for snippets in context["snippets"].values():
        assert 1 <= len(snippets) <= 3 and all("span" in s for s in snippets)
    # c3 is unsupported on every snippet: all of them were tried; c1 stops at the first supporting one
    assert len(context["per_snippet"]["c3"]) == len(context["snippets"]["c3"])
    assert context["per_snippet"]["c1"][-1]["label"] == "supported"
    assert labels(report) == {"c1": "supported", "c2": "supported", "c3": "unsupported"}


def test_cli_retrieval_options_on_probe(tmp_path, monkeypatch):
    from halluscope.cli.main import app

    monkeypatch.setattr(
        method_base, "get_llm", lambda config: LLM(FakeModel(by_reply=responder(default_pass)), cache=None)
    )
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    result = CliRunner().invoke(
        app,
        [
            "check",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--method",
            "probe",
            "-o",
            "retrieval=always",
            "-o",
            "top_k=3",
            "-o",
            "window=1",
            "-o",
            "retriever=bm25",
            "--json",
        ],
    )
    assert result.exit_code in (0, 1), result.output
    report = Report.model_validate_json(result.output)
    assert result.exit_code == (1 if report.label == "inconsistent" else 0)  # the documented exit codes
    assert report.details["context"]["mode"] == "retrieval" and report.details["context"]["snippets"]["c1"]
    bad = CliRunner().invoke(
        app,
        [
            "check",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--method",
            "probe",
            "-o",
            "narrow=always",
        ],
    )
    assert bad.exit_code == 2 and "retrieval" in bad.output


def test_context_overflow_switches_to_snippets_and_keeps_only_their_steps():
    script = responder(default_pass)
    find = script["EvidenceReply"]

    def find_in_snippets_only(messages):
        if fenced(messages, "source").strip() == SOURCE.strip():  # the whole source: too long
            raise ContextOverflowError("prompt too long for this model")
        return find(messages)

    report = make_probe(script | {"EvidenceReply": find_in_snippets_only}, retriever="bm25", top_k=1, window=0).check(
        SOURCE, TARGET
    )
    assert report.details["context"]["mode"] == "retrieval" and "overflow" in report.details["context"]["why"]
    assert all(step["narrowed"] for step in report.details["steps"]["evidence_finding"])
    assert report.score is not None


def test_a_claim_unchecked_on_some_snippet_and_unsupported_on_the_others_stays_unscored():
    def find(messages):
        claim, snippet = fenced(messages, "claim"), fenced(messages, "source")
        if "Paris" in snippet:
            return '{"reasoning": "the passage about Par'  # cut off: this snippet could not be checked
        if "Warsaw" in claim and "Warsaw" in snippet:
            return json.dumps({"evidence": ["Marie Curie was born in Warsaw in 1867."]})
        return '{"reasoning": "nothing here", "evidence": []}'

    reply = responder(default_pass) | {"EvidenceReply": find}
    report = make_probe(reply, retrieval="always", top_k=4, window=0, retriever="bm25").check(SOURCE, TARGET)
    assert labels(report) == {"c1": "supported", "c2": "unscored", "c3": "unscored"}
    assert report.verdicts[2].reason.startswith("1 of 4 snippets could not be judged and none supports the claim")
    assert "evidence finding failed" in report.verdicts[2].reason
    per_snippet = report.details["context"]["per_snippet"]["c3"]
    assert sorted(t["label"] for t in per_snippet) == ["unscored", "unsupported", "unsupported", "unsupported"]
    assert report.score == 1.0 and not report.findings


def test_decomposition_failure_falls_back_to_sentences_or_unscored():
    reply = responder(default_pass) | {"ClaimsReply": "I am not sure what you mean."}
    report = make_probe(reply, retrieval="never").check(SOURCE, TARGET)
    step = report.details["steps"]["decomposition"]
    assert step["fallback"] == "sentences" and step["error"]
    assert [c.kind for c in report.claims] == ["sentence", "sentence"]
    strict = make_probe(reply, on_decompose_error="unscored").check(SOURCE, TARGET)
    assert strict.score is None and "decomposition failed" in strict.unscored_reason
    assert strict.details["steps"]["decomposition"]["error"] and len(strict.calls) == 2


# --- strict replies --------------------------------------------------------------------------------------------


def _with_evidence_reply(evidence_reply: str, verdict_reply: str | None = None):
    """Every evidence-finding reply (and its repair) is ``evidence_reply``; verdicts as scripted."""

    script = responder(default_pass) | {"EvidenceReply": evidence_reply}
    if verdict_reply is not None:
        script["EvaluationReply"] = verdict_reply
    return script


@pytest.mark.parametrize(
    "bad",
    [
        '{"reas',
        "I found [nothing]",
        '{"reasoning": "x", "evidence": ["In 1903 she',
        "Sure! Here are the passages.",
        '{"passages": ["x"]}',
        '{"evidence": "In 1903"}',
        "[]",
        '{"evidence": ["<passage>", "[quote]", "..."]}',
    ],
)
def test_an_unusable_evidence_reply_makes_the_claim_unscored_not_unsupported(bad):
    report = make_probe(_with_evidence_reply(bad), retrieval="never").check(SOURCE, TARGET)
    assert report.score is None and not report.findings
    assert all(v.label == "unscored" and v.reason.startswith("evidence finding failed") for v in report.verdicts)
    assert set(report.details["steps"]["localization"]["outcomes"].values()) == {"unscored:unusable_reply"}
    assert all(f["error"] for f in report.details["steps"]["evidence_finding"])
    assert all(len(v.calls) == 2 and v.calls[-1].reply == bad for v in report.verdicts)  # raw replies kept


def test_claims_whose_quotes_were_all_invented_are_unscored_with_the_reason():
    invented = json.dumps(
        {"reasoning": "x", "evidence": ["Curie taught chemistry at Oxford.", "Oxford hired her in 1910."]}
    )
    report = make_probe(_with_evidence_reply(invented), retrieval="never").check(SOURCE, TARGET)
    assert report.score is None and not report.findings
    for v in report.verdicts:
        assert v.label == "unscored" and v.reason == "all 2 quoted passages were not found in the source"
    assert set(report.details["steps"]["localization"]["outcomes"].values()) == {"unscored:all_quotes_rejected"}
    assert report.subscores["quotes_rejected"] == 6 and report.subscores["unscored_claims"] == 3


def test_quotes_wrapped_in_the_prompts_own_fence_tags_are_verified_not_rejected():
    script = responder(default_pass)
    find = script["EvidenceReply"]

    def find_in_tags(messages):  # what the 1.5B model does: each quote keeps the <source_KEY> tags around it
        key = re.search(r"<source_([0-9a-f]{10})>", first_user(messages)).group(1)
        reply = json.loads(find(messages))
        reply["evidence"] = [f"<source_{key}>{q}</source_{key}>" for q in reply["evidence"]]
        return json.dumps(reply)

    report = make_probe(script | {"EvidenceReply": find_in_tags}, retrieval="never").check(SOURCE, TARGET)
    plain = make_probe(retrieval="never").check(SOURCE, TARGET)
    assert labels(report) == labels(plain) == {"c1": "supported", "c2": "supported", "c3": "unsupported"}
    assert report.score == plain.score
    finding = {f["claim_id"]: f for f in report.details["steps"]["evidence_finding"]}
    assert [q["status"] for q in finding["c2"]["quotes"]] == ["verified", "verified", "rejected"]  # invented: still
    assert [e.text for e in report.verdicts[0].evidence] == ["Marie Curie was born in Warsaw in 1867."]


def test_only_an_explicit_empty_list_or_every_fail_makes_a_claim_unsupported():
    empty = make_probe(
        _with_evidence_reply('{"reasoning": "nothing relevant", "evidence": []}'), retrieval="never"
    ).check(SOURCE, TARGET)
    assert empty.score == 0.0 and all(v.label == "unsupported" for v in empty.verdicts)
    assert set(empty.details["steps"]["localization"]["outcomes"].values()) == {"unsupported:no_evidence"}
    assert "no passage of the source" in empty.verdicts[0].reason
    failed = make_probe(responder(lambda claim, evidence: False), retrieval="never").check(SOURCE, TARGET)
    assert failed.score == 0.0 and len(failed.findings) == 3
    assert set(failed.details["steps"]["localization"]["outcomes"].values()) == {"unsupported:all_failed"}


@pytest.mark.parametrize(
    "vote",
    [
        "NOT PASS",
        "pass?",
        "The excerpt supports it, so PASS.",
        "VERDICT: PASS",
        '{"verdict": "NOT PASS"}',
        '{"verdict": "pass?"}',
        '{"verdict": true}',
        '{"verdict": ["PASS"]}',
        '{"reasoning": "PASS"}',
        '{"verdict": "PASS or FAIL"}',
    ],
)
def test_a_vote_without_an_exact_label_is_invalid(vote):
    report = make_probe(
        _with_evidence_reply(
            json.dumps({"evidence": ["In 1903 she shared the Nobel Prize in Physics."]}), verdict_reply=vote
        ),
        retrieval="never",
    ).check(SOURCE, TARGET)
    assert report.score is None and not report.findings
    assert all(v.label == "unscored" and "could not be judged" in v.reason for v in report.verdicts)
    votes = [v for e in report.details["steps"]["evidence_evaluation"] for v in e["votes"]]
    assert votes and all(v["verdict"] is None and v["error"] for v in votes)


def test_evaluation_reply_reads_only_the_stated_label():
    assert EvaluationReply.parse('{"reasoning": "ok", "verdict": "PASS"}').verdict == "PASS"
    assert EvaluationReply.parse('{"verdict": "fail"}').verdict == "FAIL"
    assert EvaluationReply.parse('Sure:\n```json\n{"verdict": " Pass "}\n```').verdict == "PASS"
    for bad in (
        "PASS",
        "fail.",
        "VERDICT: PASS",
        '{"verdict": "maybe"}',
        '{"verdict": "NOT PASS"}',
        '{"verdict": "FAILED"}',
        '{"verdict": "pass?"}',
        '{"verdict": null}',
        '{"verdict": "PASS", ',
        "",
    ):
        with pytest.raises(ParseError):
            EvaluationReply.parse(bad)


def test_evidence_reply_forms():
    assert EvidenceReply.parse('{"evidence": []}').evidence == []
    assert EvidenceReply.parse('{"reasoning": "r", "evidence": [" a b c "]}').evidence == ["a b c"]
    assert EvidenceReply.parse('{"evidence": ["a b c", "...", "<passage>"]}').evidence == ["a b c"]
    for bad in (
        "Sure! The sky is blue.",
        '{"foo": 1}',
        '{"evidence": [1, 2]}',
        "",
        "I found [nothing]",
        '{"reas',
        "[]",
        '["The sky is blue."]',
        "Thinking: hmm\nFINAL OUTPUT:\nThe sky is blue.",
        '{"evidence": ["[passage]", "{quote}", "(passage)", "…", "N/A"]}',
    ):
        with pytest.raises(ParseError):
            EvidenceReply.parse(bad)


@pytest.mark.parametrize(
    "text",
    [
        "<claim>",
        "[claim]",
        "{claim}",
        "(claim)",
        "...",
        "…",
        "N/A",
        "n/a",
        "  ",
        "<...>",
        "[...]",
        "---",
        "None",
        "the assertion as one short sentence",
        "The museum opened in 1998.",
    ],
)
def test_template_echoes_are_recognized(text):
    from halluscope.methods.probe.decompose import CLAIM_EXAMPLES

    assert is_template_echo(text, CLAIM_EXAMPLES)


@pytest.mark.parametrize(
    "text",
    [
        "Marie Curie was born in Warsaw.",
        "(The museum opened in 1998.)",
        "[1] A is B.",
        "NASA launched it.",
        "<b>Bold</b> claims exist.",
    ],
)
def test_real_claims_are_not_template_echoes(text):
    assert not is_template_echo(text)


def test_placeholder_claims_are_dropped_and_never_scored():
    echo = json.dumps(
        {
            "claims": [
                {"segment": s, "claim": s} for s in ("<claim>", "[claim]", "{claim}", "(claim)", "...", "…", "N/A")
            ]
        }
    )
    with pytest.raises(ParseError, match="placeholder"):
        parse_claims(echo)
    with pytest.raises(ParseError, match="no claims"):
        parse_claims('{"claims": []}')
    items = parse_claims(
        '{"claims": [{"segment": "<copied from the TEXT>", "claim": "Ann buys butter."}, '
        '{"segment": "...", "claim": "..."}]}'
    )
    assert [(i.segment, i.claim) for i in items] == [("", "Ann buys butter.")]
    # the prompt's own example counts only when the target really says it
    example = '{"claims": [{"segment": "opened in 1998", "claim": "The museum opened in 1998."}]}'
    with pytest.raises(ParseError):
        parse_claims(example, "Ann buys butter.")
    assert parse_claims(example, "The museum opened in 1998 to the public.")[0].claim == "The museum opened in 1998."
    # a decomposer that echoes only placeholders falls back to the target's sentences; none is scored as "..."
    report = make_probe(responder(default_pass) | {"ClaimsReply": echo}, retrieval="never").check(SOURCE, TARGET)
    assert report.details["steps"]["decomposition"]["fallback"] == "sentences"
    assert all(not is_template_echo(c.text) for c in report.claims)


def test_the_verifier_never_scores_a_placeholder_claim():
    probe = make_probe()
    claims = [
        Claim(text="...", id="c1"),
        Claim(text="[claim]", id="c2"),
        Claim(text="Marie Curie was born in Warsaw.", id="c3"),
    ]
    verdicts = asyncio.run(probe.verifier(claims, Context(text=SOURCE), SOURCE))
    assert [v.label for v in verdicts] == ["unscored", "unscored", "supported"]
    assert "placeholder" in verdicts[0].reason


def test_the_web_report_lists_the_unscored_claims():
    invented = json.dumps({"evidence": ["Curie taught chemistry at Oxford."]})

    script = responder(default_pass)
    find = script["EvidenceReply"]

    def find_or_invent(messages):
        return invented if "Oxford" in fenced(messages, "claim") else find(messages)

    report = make_probe(script | {"EvidenceReply": find_or_invent}, retrieval="never").check(SOURCE, TARGET)
    assert labels(report) == {"c1": "supported", "c2": "supported", "c3": "unscored"}
    assert report.score == 1.0 and not report.findings  # a rejected quote never flags a sentence
    page = render_html(report, SOURCE, TARGET)
    assert "1 unscored claims" in page
    data = json.loads(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1)
    )
    assert data["verdicts"][2]["reason"] == "all 1 quoted passages were not found in the source"


# --- swappable stages --------------------------------------------------------------------------------------


@register_stage("test_keyword", "verifier")
class KeywordVerifier(LLMVerifier):
    """Test-only: supported when the claim's last word occurs in the context (one LLM call per claim)."""

    reply_tokens = 16

    def messages(self, claims, context_text):
        return [{"role": "user", "content": f"KEYWORD CHECK {claims[0].text}"}]

    async def __call__(self, claims, context, source):
        out = []
        for claim in claims:
            await self.llm.generate(self.messages([claim], context.text))
            word = re.findall(r"\w+", claim.text)[-1]
            label = "supported" if word.lower() in context.text.lower() else "unsupported"
            out.append(Verdict(claim=claim, label=label, reason=f"keyword {word!r}"))
        return out


def test_probe_with_another_verifier_runs_end_to_end():
    model = FakeModel(by_reply={"ClaimsReply": DECOMPOSITION}, default="ok")
    probe = Probe(llm=LLM(model, cache=None), verifier="test_keyword", retrieval="never")
    report = probe.check(SOURCE, TARGET)
    assert labels(report) == {"c1": "supported", "c2": "supported", "c3": "unsupported"}
    assert report.details["stages"]["verifier"] == "test_keyword" and "verifier" not in report.details
    assert [f.claim_ids for f in report.findings] == [["c3"]]
    assert report.details["steps"]["evidence_finding"] == [] and report.details["steps"]["decomposition"]["claims"]
    assert not {"EvidenceReply", "EvaluationReply"} & set(model.reply_types)  # neither finding nor evaluation asked
    assert "probe_find_evidence" not in probe.prompt_version


class _SentenceMethod(ClaimPipeline):
    """Test-only claim method (sentences, keyword verifier) to swap PROBE's verifier into."""

    name = "test_sentences"
    default_verifier = "test_keyword"

    def make_decomposer(self):
        return SentenceDecomposer()


@pytest.mark.parametrize("method", ["test_sentences", "factscore", "dove", "dcr"])
def test_probe_verifier_in_another_claim_method(method):
    """PROBE's verifier inside another claim method. The method's own decomposer is replaced by the sentence
    splitter (its prompts are not PROBE's business); everything after it -- the method's pipeline,
    aggregation and findings -- runs as that method defines it."""
    from halluscope.methods import method_class

    base = _SentenceMethod if method == "test_sentences" else method_class(method)
    if not issubclass(base, ClaimPipeline):
        pytest.skip(f"{method} is not a claim pipeline yet")
    swapped = type(f"Sentences{base.__name__}", (base,), {"make_decomposer": lambda self: SentenceDecomposer()})
    target = "Marie Curie was born in Warsaw. She taught at Oxford."
    model = FakeModel(by_reply=responder(default_pass))
    report = swapped(llm=LLM(model, cache=None), verifier="probe", retrieval="never").check(SOURCE, target)
    assert report.details["stages"]["verifier"] == "probe"
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    assert report.verdicts[0].evidence[0].span.of(SOURCE) == "Marie Curie was born in Warsaw in 1867."
    assert "judges failed all 1 passages" in report.verdicts[1].reason
    assert {"EvidenceReply", "EvaluationReply"} <= set(model.reply_types)
    assert report.score is not None
    flagged = [s.of(target) for f in report.findings for s in f.target_spans]
    assert "She taught at Oxford." in flagged and "Marie Curie was born in Warsaw." not in flagged


# --- parsers fuzzed, garbled models -------------------------------------------------------------------------

VALID_REPLIES = [
    DECOMPOSITION,
    json.dumps({"claims": [{"claim": "A met B."}]}),
    json.dumps({"reasoning": "r", "evidence": ["Marie Curie was born in Warsaw in 1867."]}),
    '{"evidence": []}',
    '{"reasoning": "r", "verdict": "PASS"}',
    '{"verdict": "fail"}',
]


FUZZ = garbled_replies(1200) + VALID_REPLIES + mutations(VALID_REPLIES, 300)


@pytest.mark.parametrize(
    "parser", [parse_claims, EvidenceReply.parse, EvaluationReply.parse], ids=["claims", "evidence", "evaluation"]
)
def test_parsers_fuzzed_with_garbled_replies(parser):
    parsed, refused = parse_each(parser, FUZZ, (ParseError, ValidationError))
    assert parsed and refused


def test_garbled_model_end_to_end_never_raises_and_only_explicit_replies_flag_claims():
    replies = FUZZ[:]
    random.Random(5).shuffle(replies)
    counter = {"i": 0}

    def reply(messages):
        counter["i"] += 1
        return replies[counter["i"] % len(replies)]

    probe = make_probe(reply, retrieval="never")
    judged = unscored = 0
    for k in range(40):
        report = probe.check(SOURCE, TARGET + f" Extra {k}.")
        Report.model_validate_json(report.model_dump_json())
        outcomes = report.details["steps"]["localization"]["outcomes"]
        for v in report.verdicts:
            if v.label == "unsupported":  # only after a valid evidence reply: an explicit [] or every passage failed
                assert outcomes[v.claim.id] in ("unsupported:no_evidence", "unsupported:all_failed")
            judged += v.label != "unscored"
            unscored += v.label == "unscored"
        for f in report.findings:
            for s in f.target_spans:
                assert 0 <= s.start <= s.end <= len(TARGET) + 10
    assert judged > 0 and unscored > 0


def test_concurrent_checks_on_one_instance_keep_their_own_steps():
    probe = make_probe(retrieval="never")
    targets = [TARGET, "Marie Curie was born in Warsaw. She also taught at Oxford."]
    reports = asyncio.run(probe.acheck_many([(SOURCE, t) for t in targets] * 2, concurrency=4))
    for report in reports:
        ids = {c.id for c in report.claims}
        steps = report.details["steps"]
        assert {f["claim_id"] for f in steps["evidence_finding"]} == ids
        assert len(steps["evidence_finding"]) == len(ids) == 3


# --- options ------------------------------------------------------------------------------------------------


def test_options_and_validation():
    probe = make_probe(top_k=5, window=2, consensus=0.5)
    opts = probe.options()
    assert opts["top_k"] == 5 and opts["window"] == 2 and opts["consensus"] == 0.5 and opts["judges"] is None
    for bad in (
        {"samples": 0},
        {"consensus": 0},
        {"retrieval": "sometimes"},
        {"max_evidence": 0},
        {"narrow": "always"},
        {"retrieval": True},
    ):
        with pytest.raises(OptionsError, match="Valid options"):
            make_probe(**bad)
    assert make_probe(judges="gpt-a, gpt-b").options()["judges"] == ["gpt-a", "gpt-b"]
    assert re.search(r"probe_decompose@2#\w+,probe_find_evidence@2#\w+,probe_evaluate@2#\w+", probe.prompt_version)
    assert "probe_find_evidence" not in make_probe(evidence_finder="top_sentences").prompt_version
    with pytest.raises(
        OptionsError, match="evidence=retrieval is no longer an option of probe: write evidence_finder="
    ):
        make_probe(evidence="retrieval")


def test_retrieval_evidence_finder_makes_no_finder_calls():
    model = FakeModel(by_reply=responder(default_pass))
    probe = Probe(llm=LLM(model, cache=None), evidence_finder="top_sentences", retriever="bm25", max_evidence=2)
    report = probe.check(SOURCE, TARGET)
    assert "EvidenceReply" not in model.reply_types
    finder = report.details["verifier"]["evidence_finder"]
    assert finder == {"name": "top_sentences", "max_evidence": 2, "retriever": "bm25"}
    assert report.details["context"]["mode"] == "full"
    for step in report.details["steps"]["evidence_finding"]:
        assert len(step["quotes"]) == 2 and all(q["status"] == "retrieved" for q in step["quotes"])
    for v in report.verdicts:
        assert all(e.span.of(SOURCE) == e.text for e in v.evidence)
    assert labels(report)["c1"] == "supported" and labels(report)["c3"] == "unsupported"
    snippets = Probe(
        llm=LLM(FakeModel(by_reply=responder(default_pass)), cache=None),
        evidence_finder="top_sentences",
        retriever="bm25",
        retrieval="always",
        top_k=1,
        window=0,
        max_evidence=2,
    ).check(SOURCE, TARGET)
    for step in snippets.details["steps"]["evidence_finding"]:  # one-sentence snippets: one sentence each
        assert len(step["quotes"]) == 1 and step["narrowed"]


def test_probe_verdicts_carry_the_best_passages_p_pass_and_findings_its_complement():
    """P(PASS) of each vote from the judge's token probabilities; a claim's P(supported) is its best passage's."""

    def logprobs(reply: str):
        p = 0.9 if '"PASS"' in reply else 0.3  # P(PASS) at the verdict token
        return label_logprobs({"PASS": p, "FAIL": 1 - p})(reply) if '"verdict"' in reply else None

    script = responder(default_pass)
    llm = LLM(FakeModel(by_reply=script, logprobs=logprobs), cache=None)
    report = get_method("probe", llm=llm, retrieval="never").check(SOURCE, TARGET)
    assert [v.support_probability for v in report.verdicts] == pytest.approx([0.9, 0.9, 0.3])
    assert report.score == pytest.approx((0.9 + 0.9 + 0.3) / 3) and report.details["score"]["label_score"] == 2 / 3
    (finding,) = report.findings
    assert finding.confidence == pytest.approx(0.7)
