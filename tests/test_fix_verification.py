"""A fix is shown only after it is re-verified (``order=verdict_first``): each candidate -- the explanation's fix, and
the flagged sentence without the part that holds words the source never uses -- is scored by the same short yes/no
reply against the same source context; only one answered yes with P(supported) at least ``explain_below``, that
differs from the flagged text and holds no markup is shown, with its probability. Quotes the source does not hold
are never shown as located evidence."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import label_logprobs
from halluscope.methods import get_method
from halluscope.records import Report
from halluscope.text.clauses import without_unsupported_part

SOURCE = (
    "The city will build a ferry. Two thirds of the money comes from a regional transport grant. "
    "The ferry starts in May."
)
TARGET = "The city will build a ferry. The ferry starts in May and the city pays for the whole project."
FLAGGED = "The ferry starts in May and the city pays for the whole project."
GOOD_FIX = "The ferry starts in May and a regional grant pays two thirds of the money."
REMOVED = "The ferry starts in May."


def explanation(fix: str, evidence: str = "Two thirds of the money comes from a regional transport grant.") -> str:
    return json.dumps(
        {"reason": "The source says a grant pays two thirds.", "evidence": evidence, "contradicted": True, "fix": fix}
    )


def fake(
    p_yes: dict[str, float],
    fix: str,
    *,
    probabilities: bool = True,
    evidence: str | None = None,
    contradicts: dict[str, float] | None = None,
    relation_reply: str | None = None,
) -> FakeModel:
    """Answers each yes/no request by the text after its last ``CLAIM:`` (the first key of ``p_yes`` that text
    equals, after stripping fence tags and whitespace; else the first key it contains), with P(yes) scripted. A
    question whether a PASSAGE contradicts the claim is answered by the first key of ``contradicts`` the passage
    contains (else P(yes) 0.05)."""
    asked: list[float] = []

    def responder(messages):
        content = messages[-1]["content"]
        if "contradict the CLAIM?" in content and relation_reply is not None:
            asked.append(0.5)
            return relation_reply
        if "contradict the CLAIM?" in content:
            passage = content.split("PASSAGE:")[-1].split("CLAIM:")[0]
            asked.append(next((v for k, v in (contradicts or {}).items() if k in passage), 0.05))
            return "Yes" if asked[-1] >= 0.5 else "No"
        claim = content.split("CLAIM:")[-1].split("Is the CLAIM")[0]
        inner = claim.split(">", 1)[-1].rsplit("</", 1)[0].strip()
        p = p_yes[inner] if inner in p_yes else next(v for k, v in p_yes.items() if k in claim)
        asked.append(p)
        return "Yes" if p >= 0.5 else "No"

    def logprobs(reply: str):
        return label_logprobs({"Yes": asked[-1], "No": 1 - asked[-1]})(reply) if reply in ("Yes", "No") else None

    reply = explanation(fix) if evidence is None else explanation(fix, evidence)
    return FakeModel(by_reply={"text": responder, "ExplainReply": reply}, logprobs=logprobs if probabilities else None)


FIX_ONLY = {"fact_max": 0, "reason_from_evidence": False}
"""The fix's re-verification alone: the flagged sentence not split into facts, the explanation's reason kept (both are
tested in tests/test_failing_fact.py), so the calls counted here are the claims', the fixes' and the relation's."""


def check(model: FakeModel, **options) -> Report:
    return get_method("dcr", llm=LLM(model), order="verdict_first", **{**FIX_ONLY, **options}).check(SOURCE, TARGET)


def flagged_verdict(report: Report):
    (verdict,) = [v for v in report.verdicts if v.label != "supported"]
    return verdict


def short_calls(model: FakeModel) -> int:
    """The short replies that score a claim or a fix (not the questions whether a passage contradicts)."""
    return sum(
        kind == "text" and "contradict the CLAIM?" not in r[-1]["content"]
        for r, kind in zip(model.requests, model.reply_types)
    )


def relation_calls(model: FakeModel) -> int:
    return sum("contradict the CLAIM?" in r[-1]["content"] for r in model.requests)


def test_a_fix_the_scorer_rejects_is_never_shown_and_stays_unverified_in_the_report() -> None:
    bad_fix = "The ferry starts in May and the city pays for the whole project itself."
    model = fake({FLAGGED: 0.1, bad_fix: 0.2, REMOVED: 0.3, "build a ferry": 0.9}, bad_fix)
    report = check(model)
    verdict = flagged_verdict(report)
    assert verdict.fix is None and not verdict.fix_verified and verdict.fix_probability is None
    assert "no verified fix" in (verdict.fix_rejected or "")
    assert [(c.text, c.origin, c.verified) for c in verdict.fix_candidates] == [
        (REMOVED, "removed", False),  # the better-scored one first
        (bad_fix, "model", False),
    ]
    assert [c.probability for c in verdict.fix_candidates] == pytest.approx([0.3, 0.2])
    (finding,) = report.findings
    assert finding.fix is None and len(finding.fix_candidates) == 2
    # every call is a call of the report: 2 claims + 2 candidates short, the relation questions, 1 explanation
    assert short_calls(model) == 4 and report.usage.calls == 5 + relation_calls(model)
    round_trip = Report.model_validate_json(report.model_dump_json())
    assert round_trip.findings[0].fix_candidates == finding.fix_candidates


def test_a_verified_fix_is_shown_with_its_probability_the_best_one_wins() -> None:
    model = fake({FLAGGED: 0.1, GOOD_FIX: 0.8, REMOVED: 0.95, "build a ferry": 0.9}, GOOD_FIX)
    report = check(model)
    verdict = flagged_verdict(report)
    assert (verdict.fix, verdict.fix_verified) == (REMOVED, True)
    assert verdict.fix_probability == pytest.approx(0.95)
    assert [c.verified for c in verdict.fix_candidates] == [True, True]
    (finding,) = report.findings
    assert (finding.fix, finding.fix_verified) == (REMOVED, True)
    assert finding.fix_probability == pytest.approx(0.95)


def test_a_fix_below_the_threshold_that_flagged_the_claim_is_not_shown() -> None:
    """The bar is ``explain_below``: a fix answered yes at P(supported) 0.6 passes at 0.5, not at 0.7."""
    p = {FLAGGED: 0.1, GOOD_FIX: 0.6, REMOVED: 0.2, "build a ferry": 0.9}
    assert flagged_verdict(check(fake(p, GOOD_FIX))).fix == GOOD_FIX
    strict = flagged_verdict(check(fake(p, GOOD_FIX), explain_below=0.7))
    assert strict.fix is None and strict.fix_candidates[0].text == GOOD_FIX and not strict.fix_candidates[0].verified


def test_without_probabilities_the_yes_answer_verifies() -> None:
    model = fake({FLAGGED: 0.1, GOOD_FIX: 0.9, REMOVED: 0.2, "build a ferry": 0.9}, GOOD_FIX, probabilities=False)
    verdict = flagged_verdict(check(model))
    assert (verdict.fix, verdict.fix_verified, verdict.fix_probability) == (GOOD_FIX, True, None)


@pytest.mark.parametrize(
    "fix",
    [
        FLAGGED,  # the flagged text copied back
        "  the ferry starts in may and the city pays for the whole project.  ",  # the same, other case and spacing
        "<claim_d9e042ef58>The ferry starts in May and a grant pays.</claim_d9e042ef58>",  # a fence tag
        "<corrected sentence>",  # a format slot
    ],
)
def test_a_fix_identical_to_the_flagged_text_or_with_markup_is_never_shown_or_scored(fix: str) -> None:
    model = fake({FLAGGED: 0.1, REMOVED: 0.2, "build a ferry": 0.9, "grant pays": 0.99}, fix)
    report = check(model)
    verdict = flagged_verdict(report)
    assert verdict.fix is None and [c.origin for c in verdict.fix_candidates] == ["removed"]
    assert short_calls(model) == 3  # the two claims and the removed-part candidate: the rejected one is not scored
    assert verdict.fix_rejected and verdict.fix_rejected.startswith("not shown")
    assert all("<" not in c.text for c in verdict.fix_candidates)


def test_the_cli_prints_a_verified_fix_once_with_its_probability_or_no_verified_fix(monkeypatch, tmp_path) -> None:
    import halluscope.methods as methods
    from halluscope.cli.main import app

    real = methods.get_method
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    args = ["check", "--method", "dcr", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--no-progress"]

    def run(model: FakeModel) -> str:
        given = {"llm": LLM(model), "order": "verdict_first", **FIX_ONLY}
        monkeypatch.setattr(methods, "get_method", lambda name, **kw: real(name, **{**kw, **given}))
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, result.output
        return result.output

    shown = run(fake({FLAGGED: 0.1, GOOD_FIX: 0.93, REMOVED: 0.2, "build a ferry": 0.9}, GOOD_FIX))
    assert shown.count(GOOD_FIX) == 1 and f"fix: {GOOD_FIX} (verified, P(supported) 0.93)" in shown
    none = run(fake({FLAGGED: 0.1, GOOD_FIX: 0.3, REMOVED: 0.2, "build a ferry": 0.9}, GOOD_FIX))
    assert "fix: no verified fix" in none and GOOD_FIX not in none


def test_verify_fix_false_shows_the_explanations_fix_unchecked_and_is_recorded() -> None:
    model = fake({FLAGGED: 0.1, "build a ferry": 0.9}, GOOD_FIX)
    report = check(model, verify_fix=False)
    verdict = flagged_verdict(report)
    assert (verdict.fix, verdict.fix_verified, verdict.fix_candidates) == (GOOD_FIX, False, [])
    assert short_calls(model) == 2
    method = get_method("dcr", llm=LLM(model), order="verdict_first", verify_fix=False)
    assert method.options()["verify_fix"] is False
    assert "verify_fix" not in get_method("dcr", llm=LLM(model), order="verdict_first").options()


def test_a_quote_not_in_the_source_is_never_shown_as_located_evidence() -> None:
    invented = "The city pays for everything out of its own pocket."
    model = fake({FLAGGED: 0.1, GOOD_FIX: 0.9, REMOVED: 0.2, "build a ferry": 0.9}, GOOD_FIX, evidence=invented)
    verdict = flagged_verdict(check(model))
    assert verdict.evidence and all(e.text != invented for e in verdict.evidence)
    assert all(e.span is not None and e.span.of(SOURCE) == e.text for e in verdict.evidence)
    assert not any(invented in r[-1]["content"] for r in model.requests if "contradict the CLAIM?" in r[-1]["content"])


def test_the_part_removed_is_the_one_with_words_the_source_never_uses() -> None:
    assert without_unsupported_part(FLAGGED, SOURCE) == REMOVED
    assert without_unsupported_part("Acme pays, and the city will build a ferry.", SOURCE) == (
        "The city will build a ferry."
    )
    assert without_unsupported_part("The ferry starts in June.", SOURCE) is None  # one clause: nothing to drop
    assert without_unsupported_part("The ferry starts in May and the city will build a ferry.", SOURCE) is None


# -- the relation, read from probabilities ---------------------------------------------------------------------

GRANT = "Two thirds of the money comes from a regional transport grant."
P_FIXED = {FLAGGED: 0.1, GOOD_FIX: 0.9, REMOVED: 0.2, "build a ferry": 0.9}


def test_a_fact_no_passage_contradicts_is_not_mentioned_with_the_closest_passage_as_context(monkeypatch, tmp_path):
    """The explanation says "contradicted", but no passage is likely to contradict the claim: unsupported, not
    mentioned, the closest passage shown as related context (not as contradicting evidence)."""
    model = fake(P_FIXED, GOOD_FIX, contradicts={})
    report = check(model)
    verdict = flagged_verdict(report)
    assert (verdict.label, verdict.evidence_relation) == ("unsupported", "not_mentioned")
    closest = verdict.evidence[0]
    assert closest.relation == "related" and closest.text == GRANT  # the quote the source holds verbatim first
    assert relation_calls(model) == 3  # the quote and the claim's two closest source sentences
    (finding,) = report.findings
    assert finding.evidence_relation == "not_mentioned"
    from halluscope.cli.check import Texts, finding_lines

    lines = "\n".join(finding_lines(1, finding, Texts(source=SOURCE, target=TARGET)))
    assert "evidence: not mentioned in the source" in lines and "contradicts" not in lines
    assert f'closest passage at source:1:30: "{GRANT}"' in lines


def test_a_contradicted_fact_shows_the_passage_most_likely_to_contradict_it() -> None:
    model = fake(P_FIXED, GOOD_FIX, contradicts={"build a ferry": 0.6, "Two thirds": 0.95, "starts in May": 0.3})
    verdict = flagged_verdict(check(model))
    assert (verdict.label, verdict.evidence_relation) == ("contradicted", "contradicts")
    chosen = verdict.evidence[0]
    assert (chosen.text, chosen.relation) == (GRANT, "contradicts") and chosen.span.of(SOURCE) == GRANT
    # under 0.5 for every passage: not contradicted, however sure the explanation was
    below = flagged_verdict(check(fake(P_FIXED, GOOD_FIX, contradicts={"Two thirds": 0.45})))
    assert (below.label, below.evidence_relation) == ("unsupported", "not_mentioned")


def test_without_probabilities_a_yes_answer_contradicts() -> None:
    model = fake(P_FIXED, GOOD_FIX, probabilities=False, contradicts={"Two thirds": 0.9})
    verdict = flagged_verdict(check(model))
    assert (verdict.label, verdict.evidence[0].text) == ("contradicted", GRANT)


def test_relation_candidates_bounds_the_questions_and_zero_keeps_the_explanations_flag() -> None:
    one = fake(P_FIXED, GOOD_FIX)
    check(one, relation_candidates=1)
    assert relation_calls(one) == 2  # the quote and one source sentence
    off = fake(P_FIXED, GOOD_FIX)
    verdict = flagged_verdict(check(off, relation_candidates=0))
    assert relation_calls(off) == 0 and verdict.label == "contradicted" and verdict.evidence_relation is None
    method = get_method("dcr", llm=LLM(off), order="verdict_first", relation_candidates=0)
    assert method.options()["relation_candidates"] == 0
    assert "relation_candidates" not in get_method("dcr", llm=LLM(off), order="verdict_first").options()


def test_when_no_passage_can_be_asked_the_explanations_relation_stays_and_the_reason_says_so() -> None:
    model = fake(P_FIXED, GOOD_FIX, relation_reply="Perhaps", probabilities=False)
    verdict = flagged_verdict(check(model))
    assert verdict.label == "contradicted" and verdict.evidence_relation is None
    assert "no passage's relation could be read" in verdict.reason
