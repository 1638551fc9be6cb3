"""The lexical gate: exact decisions on crafted pairs, the ``gate`` method (no LLM), and the cascade
``-o gate=lexical`` on every claim method (the LLM sees only the claims the gate could not settle)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from typer.testing import CliRunner

from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods.gate import LexicalGate, ngram_coverage
from halluscope.records import Claim, Report, Span, Verdict
from halluscope.stages import Context, UnknownStageError, register_stage
from halluscope.stages.decomposers import SentenceDecomposer
from halluscope.text.lexical import numbers
from tests.prompt_data import fenced

SOURCE = (
    "The harbour ferry leaves the north pier every 20 minutes between 6am and midnight. Tickets cost "
    "3 pounds for adults. The service is run by Harbour Lines, which took it over in May 2019. "
    "The ferry does not run on Christmas Day. Two thirds of the 1,000 commuters use a season ticket."
)


def decide(claim_text: str, source: str = SOURCE):
    target = f"Intro. {claim_text}"
    claim = Claim(text=claim_text, id="c1", target_spans=[Span(start=7, end=7 + len(claim_text))])
    (decision,) = asyncio.run(LexicalGate()([claim], source, target))
    return decision, target


@pytest.mark.parametrize(
    "text, values",
    [
        ("15 minutes", [(15.0,)]),
        ("1,000 people", [(1000.0,)]),
        ("two thirds", [(2 / 3,)]),
        ("2/3", [(2 / 3,)]),
        ("fifteen", [(15.0,)]),
        ("twenty-five", [(25.0,)]),
        ("3 million", [(3.0, 3e6)]),
        ("a quarter", [(0.25,)]),
        ("one of them", []),
        ("the third quarter", []),
        ("50%", [(50.0,)]),
    ],
)
def test_numbers_are_normalised(text, values):
    found = [n.values for n in numbers(text)]
    assert len(found) == len(values)
    for got, want in zip(found, values):  # pytest.approx refuses nested sequences from pytest 9.2 on
        assert tuple(got) == pytest.approx(want)


def test_a_number_the_source_never_mentions_is_unsupported_with_its_span():
    decision, target = decide("The ferry runs every 15 minutes.")
    assert decision.outcome == "unsupported"
    assert [s.of(target) for s in decision.target_spans] == ["15"]
    assert '"15"' in decision.reason
    assert decision.evidence and decision.evidence[0].span.of(SOURCE) == decision.evidence[0].text


@pytest.mark.parametrize(
    "claim",
    [
        "2/3 of the 1000 commuters use a season ticket.",  # "Two thirds" and "1,000" in the source
        "The harbour ferry leaves the north pier every twenty minutes.",  # "20"
    ],
)
def test_numbers_written_differently_still_match(claim):
    decision, _ = decide(claim)
    assert decision.signals["missing_numbers"] == []
    assert decision.outcome != "unsupported"


def test_a_month_and_a_name_the_source_never_mentions_are_unsupported():
    month, target = decide("Harbour Lines took over the service in March 2019.")
    assert month.outcome == "unsupported" and [s.of(target) for s in month.target_spans] == ["March"]
    name, target = decide("The service is run by Harbour Lines and owned by Peter Grant.")
    assert name.outcome == "unsupported" and [s.of(target) for s in name.target_spans] == ["Peter Grant"]
    assert 'name "Peter Grant"' in name.reason


def test_an_honorific_or_a_mentioned_name_is_not_a_new_name():
    decision, _ = decide("Mr Lines runs the Harbour service.", source="Harbour Lines runs the service.")
    assert decision.signals["missing_names"] == []
    dotted, _ = decide("The U.K. team met J. Lines.", source="The UK team met Jo Lines.")
    assert dotted.signals["missing_names"] == []  # "U.K." is one word (= UK); an initial is not a name


@pytest.mark.parametrize(
    "claim, cue",
    [
        ("The ferry runs on Christmas Day.", None),  # the source says it does not
        ("Tickets do not cost 3 pounds for adults.", "not"),  # the source says they do
    ],
)
def test_a_negation_flip_is_contradicted(claim, cue):
    decision, target = decide(claim)
    assert decision.outcome == "contradicted"
    assert decision.evidence[0].relation == "contradicts"
    spans = [s.of(target) for s in decision.target_spans]
    assert spans == ([cue] if cue else [claim])


def test_a_verbatim_claim_is_supported_and_a_paraphrase_is_uncertain():
    verbatim, _ = decide("Tickets cost 3 pounds for adults.")
    assert verbatim.outcome == "supported" and verbatim.score == 1.0
    assert verbatim.evidence[0].relation == "supports" and "Tickets cost 3 pounds" in verbatim.evidence[0].text
    paraphrase, _ = decide("Grown-ups pay three pounds to ride the boat.")
    assert paraphrase.outcome == "uncertain" and paraphrase.reason.startswith("Uncertain")
    assert 0.0 <= paraphrase.score < verbatim.score


def test_a_claim_whose_content_words_are_all_absent_is_unsupported():
    decision, _ = decide("Tourists adore sunset cruises along volcanic beaches.")
    assert decision.outcome == "unsupported" and "content words never occur" in decision.reason


def test_ngram_coverage():
    assert ngram_coverage("a b c d".split(), "x a b c d y".split()) == 1.0
    assert ngram_coverage("a b c d".split(), "a b x c d".split()) == 0.0
    assert ngram_coverage("a b c x".split(), "a b c d".split()) == 0.75


# --- the gate method ------------------------------------------------------------------------------------------

TARGET = (
    "The ferry runs every 15 minutes. Tickets cost 3 pounds for adults. The service is run by Harbour Lines "
    "and owned by Peter Grant. The ferry runs on Christmas Day."
)


def test_gate_method_needs_no_llm_and_flags_with_spans():
    method = get_method("gate")
    assert method.uses_llm is False and method.model_name is None
    report = method.check(SOURCE, TARGET)
    assert report.usage.calls == 0 and report.model is None
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "unsupported", "contradicted"]
    assert {v.decided_by for v in report.verdicts} == {"gate:lexical"}
    spans = [[s.of(TARGET) for s in f.target_spans] for f in report.findings]
    assert spans == [["15"], ["Peter Grant"], ["The ferry runs on Christmas Day."]]
    assert report.subscores["supported"] == 1.0 and report.subscores["unscored"] == 0.0
    assert 0.0 < report.score < 1.0
    assert Report.model_validate_json(report.model_dump_json()) == report


def test_gate_method_labels_uncertain_claims_by_threshold_or_leaves_them_unscored():
    target = "Grown-ups pay three pounds to ride the boat."
    labelled = get_method("gate", threshold=0.0).check(SOURCE, target).verdicts[0]
    assert labelled.label == "supported" and labelled.decided_by == "gate:lexical:threshold"
    left = get_method("gate", uncertain="unscored").check(SOURCE, target).verdicts[0]
    assert left.label == "unscored" and left.reason.startswith("Uncertain")


def test_cli_check_with_the_gate_method_runs_without_a_model(tmp_path):
    from halluscope.cli.main import app

    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    result = CliRunner().invoke(
        app, ["check", "--method", "gate", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--json"]
    )
    assert result.exit_code in (0, 1), result.output
    report = Report.model_validate_json(result.output)
    assert result.exit_code == (1 if report.label == "inconsistent" else 0)  # the documented exit codes
    assert report.findings[0].target_spans[0].of(TARGET) == "15"


# --- the cascade -----------------------------------------------------------------------------------------------

CASCADE_TARGET = (
    "The ferry runs every 15 minutes. Tickets cost 3 pounds for adults. Grown-ups pay three pounds to ride the boat."
)
UNCERTAIN = "Grown-ups pay three pounds to ride the boat."
SUPPORTS = {"DoveCheckReply": json.dumps({"reason": "ok", "evidence": "", "supported": True})}  # dove's verifier


def test_cascade_sends_only_uncertain_claims_to_the_llm():
    fake = FakeModel(by_reply=SUPPORTS)
    dove = get_method("dove", llm=LLM(fake, cache=None), decomposer="sentences", sorter="position", gate="lexical")
    report = dove.check(SOURCE, CASCADE_TARGET)
    assert [fenced(r, "fact") for r in fake.requests] == [UNCERTAIN]  # one call, for the one uncertain claim
    assert report.usage.calls == 1
    assert [v.decided_by for v in report.verdicts] == ["gate:lexical", "gate:lexical", "verifier:dove"]
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "supported"]
    assert report.details["gate"]["settled"] == 2 and report.details["gate"]["sent_to_verifier"] == ["s3"]
    assert report.findings[0].target_spans[0].of(CASCADE_TARGET) == "15"
    assert Report.model_validate_json(report.model_dump_json()) == report


def test_without_a_gate_every_claim_goes_to_the_llm_and_says_so():
    fake = FakeModel(by_reply=SUPPORTS)
    dove = get_method("dove", llm=LLM(fake, cache=None), decomposer="sentences", sorter="position")
    report = dove.check(SOURCE, CASCADE_TARGET)
    assert len(fake.requests) == 3 and "gate" not in report.details
    assert {v.decided_by for v in report.verdicts} == {"verifier:dove"}


def test_verdicts_saved_before_decided_by_existed_still_load():
    old = {"claim": {"text": "x"}, "label": "supported", "reason": "", "score": None, "evidence": [], "calls": []}
    verdict = Verdict.model_validate_json(json.dumps(old))
    assert verdict.decided_by is None and verdict.target_spans == []


def test_an_unknown_gate_fails_when_the_method_is_built():
    with pytest.raises(UnknownStageError, match="lexical"):
        get_method("dcr", llm=LLM(FakeModel(), cache=None), gate="nonsense")


ASKED: list[str] = []


@register_stage("test-counting", "verifier")
class CountingVerifier:
    """Supports every claim it is asked about and records which (test only)."""

    def __init__(self, model, options=None):
        pass

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        return 0

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        ASKED.extend(c.text for c in claims)
        return [Verdict(claim=c, label="supported", reason="counted") for c in claims]


@pytest.mark.parametrize("name", ["dove", "dcr", "factscore", "probe"])
def test_every_claim_method_takes_the_gate(name, monkeypatch):
    ASKED.clear()
    extra = {"dove": {"sorter": "position"}, "factscore": {"describe": False}}.get(name, {})
    method = get_method(name, llm=LLM(FakeModel(), cache=None), gate="lexical", verifier="test-counting", **extra)
    monkeypatch.setattr(method, "make_decomposer", lambda: SentenceDecomposer(method))
    report = method.check(SOURCE, CASCADE_TARGET)
    assert ASKED == [UNCERTAIN]
    assert [v.decided_by for v in report.verdicts] == ["gate:lexical", "gate:lexical", "verifier:test-counting"]
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "supported"]
    assert report.score is not None and report.score < 1.0
