"""The failing fact is the span, and the reason is written from the chosen evidence (``order=verdict_first``): a
flagged sentence with more than one clause is split into atomic facts (the ``factscore`` decomposer, else its
clauses), each scored by the same short reply; the lowest P(supported) below the threshold is the finding's span and
what the evidence is chosen for; the reason is one short reply from that fact and the chosen passage only, replaced by
a plain one built from the passage when it disagrees with the relation, is empty or holds markup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import label_logprobs
from halluscope.methods import get_method
from halluscope.records import Report, Span
from halluscope.text.clauses import clause_of, clause_parts, without_part_at
from halluscope.text.passages import closest_sentences
from halluscope.text.reasons import plain_reason, reason_problem

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE = (EXAMPLES / "source.txt").read_text()
TARGET = (EXAMPLES / "summary.txt").read_text()
SENTENCE = TARGET[TARGET.index("Mayor Elena Ruiz") :].strip()
FACT = "the city will pay for the whole project from its own budget"
TRIP = "Mayor Elena Ruiz said the ferry would cut the trip to the island to about 15 minutes."
GRANT = "Two thirds of the money comes from a regional transport grant, and the rest from the city's own budget."
GOOD_REASON = "The target says the city pays for everything, but a regional transport grant pays two thirds."
EXPLANATION = {"reason": "unused", "evidence": "", "contradicted": False, "fix": ""}


class Script:
    """A fake model for the README example: each yes/no request answered by the first key of ``p_yes`` its CLAIM
    contains (P(yes) scripted); "does this PASSAGE contradict" by the first key of ``contradicts`` the PASSAGE
    contains (else P(yes) 0.05); the reason request by ``reason``; the decomposition by ``facts``."""

    def __init__(
        self,
        p_yes: dict[str, float],
        *,
        facts: list[str] | str | None = None,
        reason: str = GOOD_REASON,
        contradicts: dict[str, float] | None = None,
    ):
        self.asked: list[float] = []
        self.p_yes, self.reason = p_yes, reason
        self.contradicts = {"regional transport grant": 0.9} if contradicts is None else contradicts
        by_reply: dict[str, object] = {"text": self.respond, "ExplainReply": json.dumps(EXPLANATION)}
        if facts is not None:
            by_reply["FactsReply"] = (
                facts if isinstance(facts, str) else json.dumps({"facts": [{"sentence": 1, "fact": f} for f in facts]})
            )
        self.model = FakeModel(by_reply=by_reply, logprobs=self.logprobs)

    def respond(self, messages: list[dict[str, str]]) -> str:
        content = messages[-1]["content"]
        if "Write only that sentence" in content:
            return self.reason
        if "contradict the CLAIM?" in content:
            passage = content.split("PASSAGE:")[-1].split("CLAIM:")[0]
            p = next((v for k, v in self.contradicts.items() if k in passage), 0.05)
        else:
            claim = content.split("CLAIM:")[-1]
            p = next(v for k, v in self.p_yes.items() if k in claim)
        self.asked.append(p)
        return "Yes" if p >= 0.5 else "No"

    def logprobs(self, reply: str):
        if reply not in ("Yes", "No"):
            return None
        return label_logprobs({"Yes": self.asked[-1], "No": 1 - self.asked[-1]})(reply)

    def requests(self, marker: str) -> list[str]:
        return [r[-1]["content"] for r in self.model.requests if marker in r[-1]["content"]]

    def kinds(self) -> list[str]:
        return list(self.model.reply_types)


P_YES = {"own budget": 0.1, "about 15 minutes": 0.9, "Harbor City": 0.9, "18 million": 0.9, "own funds": 0.1}


def check(script: Script, **options) -> Report:
    return get_method("dcr", llm=LLM(script.model), order="verdict_first", **options).check(SOURCE, TARGET)


def flagged(report: Report):
    (verdict,) = [v for v in report.verdicts if v.label != "supported"]
    (finding,) = report.findings
    return verdict, finding


def test_the_span_is_the_failing_facts_characters_and_its_evidence_is_the_grant_sentence() -> None:
    script = Script(P_YES, facts=[TRIP, "The city will pay for the whole project from its own budget."])
    report = check(script)
    verdict, finding = flagged(report)
    at = TARGET.index(FACT)
    assert finding.target_spans == [Span(start=at, end=at + len(FACT))] == verdict.target_spans
    assert verdict.claim.text == SENTENCE  # the claim stays the sentence
    assert finding.evidence_relation == "contradicts" and finding.evidence[0].text == GRANT
    # the evidence is chosen for the fact: its closest sentences are asked about, the grant sentence among them
    asked = script.requests("contradict the CLAIM?")
    assert asked and all("own budget" in a.split("CLAIM:")[-1] and "Mayor" not in a.split("CLAIM:")[-1] for a in asked)
    assert any(GRANT in a for a in asked)
    facts = report.details["verdict_first"]["facts"][verdict.claim.id]
    assert facts["split_by"] == "factscore" and facts["failing"].startswith("The city will pay")
    assert [f["p_supported"] for f in facts["facts"]] == pytest.approx([0.9, 0.1])
    # one decomposition and one short reply per fact, all on the verdict for audit
    assert script.kinds().count("FactsReply") == 1
    scored = claims_scored(verdict)
    assert scored.count(TRIP) == 1 and scored.count("The city will pay for the whole project from its own budget.") == 1


def claims_scored(verdict) -> list[str]:
    """The claims the verdict's short yes/no replies scored (the facts, the fix candidates), fence tags removed."""
    asked = [c.messages[-1]["content"] for c in verdict.calls if "Is the CLAIM supported" in c.messages[-1]["content"]]
    return [a.split("CLAIM:")[-1].split("Is the CLAIM")[0].split(">", 1)[-1].rsplit("</", 1)[0].strip() for a in asked]


def test_the_failing_fact_ranks_the_grant_sentence_first_where_the_sentence_does_not() -> None:
    assert closest_sentences(FACT, SOURCE, 1)[0].text == GRANT
    assert closest_sentences(SENTENCE, SOURCE, 1)[0].text.startswith("Mayor Elena Ruiz said the ferry")


def test_the_lowest_probability_fact_below_the_threshold_fails_and_fact_max_bounds_the_calls() -> None:
    facts = [
        "Mayor Elena Ruiz said it would cut the trip to the island to about 15 minutes",
        "the city will pay for the whole project",
        "from its own budget",
        "the ferry is new",
    ]
    p = {"whole project": 0.3, "own budget": 0.2, "about 15 minutes": 0.9, "ferry is new": 0.1, "Harbor City": 0.9}
    p["18 million"] = 0.9
    script = Script(p, facts=facts)
    verdict, _ = flagged(check(script, fact_max=3))
    fact_scores = [c for c in claims_scored(verdict) if c in facts]
    assert len(fact_scores) == 3  # the fourth fact is past fact_max: never scored
    assert verdict.target_spans[0].of(TARGET) == "from its own budget"  # P 0.2, below the other fact's 0.3


def test_a_sentence_of_one_clause_keeps_its_span_and_makes_no_extra_call() -> None:
    target = "The project will be paid for from the city's own funds."
    calls = []
    for options in ({}, {"fact_max": 0}):
        script = Script(P_YES, facts=["The project is paid for.", "The city pays."])
        method = get_method("dcr", llm=LLM(script.model), order="verdict_first", reason_from_evidence=False, **options)
        report = method.check(SOURCE, target)
        verdict, finding = flagged(report)
        assert finding.target_spans == [Span(start=0, end=len(target))] and verdict.target_spans == []
        assert "FactsReply" not in script.kinds() and "facts" not in report.details["verdict_first"]
        calls.append(len(script.model.requests))
    assert calls[0] == calls[1]


def test_without_a_usable_decomposition_the_clauses_are_the_facts() -> None:
    for options, facts in (({}, "not json at all"), ({"fact_decomposer": "clauses"}, None)):
        script = Script(P_YES, facts=facts)
        report = check(script, **options)
        verdict, finding = flagged(report)
        at = TARGET.index(FACT)
        assert finding.target_spans == [Span(start=at, end=at + len(FACT))]
        note = report.details["verdict_first"]["facts"][verdict.claim.id]
        assert note["split_by"] == "clauses"
        assert script.kinds().count("FactsReply") == (2 if facts else 0)  # one reply and its repair request
        # the removal candidate drops the failing clause
        assert verdict.fix_candidates[0].text == SENTENCE[: SENTENCE.index(", and")] + "."


def test_a_reworded_fact_is_located_at_the_clause_it_comes_from() -> None:
    script = Script(P_YES, facts=["The ferry would cut the trip to about 15 minutes.", "The city pays from own funds."])
    verdict, finding = flagged(check(script))
    at = TARGET.index(FACT)
    assert finding.target_spans == [Span(start=at, end=at + len(FACT))]
    assert report_fact(verdict) == "The city pays from own funds."


def report_fact(verdict) -> str:
    """The one claim the relation questions ("does this PASSAGE contradict the CLAIM?") were about."""
    asked = [c.messages[-1]["content"] for c in verdict.calls if "contradict the CLAIM?" in c.messages[-1]["content"]]
    (claim,) = {a.split("CLAIM:")[-1].split("Does the PASSAGE")[0].split(">", 1)[-1].rsplit("</", 1)[0] for a in asked}
    return claim.strip()


def test_a_fact_that_cannot_be_located_keeps_the_sentence_span_but_chooses_the_evidence() -> None:
    script = Script(P_YES, facts=[TRIP, "Harbor City finances the ferry from its own budget alone."])
    verdict, finding = flagged(check(script))
    assert verdict.target_spans == [] and finding.target_spans == verdict.claim.target_spans
    assert all("finances the ferry" in a.split("CLAIM:")[-1] for a in script.requests("contradict the CLAIM?"))


def reason_call(verdict):
    (call,) = [c for c in verdict.calls if "Write only that sentence" in c.messages[-1]["content"]]
    return call


def test_the_reason_is_written_from_the_fact_and_the_passage_only() -> None:
    script = Script(P_YES, facts=[TRIP, FACT])
    report = check(script)
    verdict, finding = flagged(report)
    assert verdict.reason == finding.description == GOOD_REASON
    prompt = reason_call(verdict).messages[-1]["content"]
    passage, claim = prompt.split("PASSAGE:")[1].split("CLAIM:")
    assert GRANT in passage and FACT in claim
    others = [s for s in SOURCE.replace("\n", " ").split(". ") if s and s.rstrip(".") not in GRANT]
    assert not [s for s in others if s in prompt]  # no other source sentence
    assert "Mayor" not in prompt and SENTENCE not in prompt  # nor the rest of the flagged sentence
    assert "reason_replaced" not in report.details["verdict_first"]


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("The SOURCE states that the city will pay for the whole project from its own budget.", "states the claim"),
        ("The claim is supported by the passage.", "calls the claim supported"),
        ("The source does not mention who pays for the project.", "does not mention"),
        ("The target is wrong about the payment.", "names nothing"),
        ("", "empty"),
        ("<claim_d9e042ef58>x</claim_d9e042ef58> a regional grant pays two thirds", "fence tag"),
    ],
)
def test_a_reason_that_contradicts_the_relation_is_replaced_by_the_plain_one(reply: str, why: str) -> None:
    script = Script(P_YES, facts=[TRIP, FACT], reason=reply)
    report = check(script)
    verdict, finding = flagged(report)
    plain = f'The source says "{GRANT}"; the target says "{FACT}".'
    assert verdict.reason == finding.description == plain
    assert why in report.details["verdict_first"]["reason_replaced"][verdict.claim.id]
    assert reason_call(verdict).reply == reply  # the raw reply stays for audit


def test_a_fact_the_source_does_not_mention_gets_the_closest_passage_in_its_plain_reason() -> None:
    script = Script(P_YES, facts=[TRIP, FACT], reason="The passage contradicts the claim.", contradicts={})
    verdict, finding = flagged(check(script))
    assert finding.evidence_relation == "not_mentioned"
    closest = f'the closest passage says "{GRANT}"'
    assert verdict.reason == f'The source does not mention it; {closest}; the target says "{FACT}".'


def test_the_reason_prompt_is_overridden_from_prompts_dir(tmp_path: Path) -> None:
    from halluscope.config import Config

    custom = "$task Be brief. Write only that sentence.\nP: $passage\nC: $claim"
    (tmp_path / "verdict_first_reason.txt").write_text(custom)
    script = Script(P_YES, facts=[TRIP, FACT])
    method = get_method("dcr", llm=LLM(script.model), config=Config(prompts_dir=tmp_path), order="verdict_first")
    verdict, _ = flagged(method.check(SOURCE, TARGET))
    assert verdict.reason == GOOD_REASON
    assert "Be brief." in reason_call(verdict).messages[-1]["content"]


def test_reason_from_evidence_false_keeps_the_explanations_reason_and_makes_no_reason_call() -> None:
    script = Script(P_YES, facts=[TRIP, FACT])
    verdict, _ = flagged(check(script, reason_from_evidence=False))
    assert verdict.reason == "unused" and not script.requests("Write only that sentence")


@pytest.mark.parametrize(
    ("reason", "relation", "problem"),
    [
        ("A regional grant pays two thirds; the target says the city pays all.", "contradicts", None),
        ("The source never mentions who pays for the ferry at all.", "not_mentioned", None),
        ("The source says the city pays, not the whole project.", "contradicts", "names nothing"),
        ("The source says that the city pays for the whole project from its own budget.", "not_mentioned", "states"),
        ("The source contradicts it: a grant pays.", "not_mentioned", "contradicts what it does not mention"),
        ("Wrong.", "contradicts", "fewer than"),
        ("SOURCE:\nThe grant pays two thirds.", "contradicts", "header"),
    ],
)
def test_reason_problem(reason: str, relation: str, problem: str | None) -> None:
    found = reason_problem(reason, relation, FACT, GRANT)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_plain_reason_forms() -> None:
    assert plain_reason("contradicts", "A.", "B") == 'The source says "A."; the target says "B".'
    assert plain_reason("not_mentioned", None, "B") == 'The source does not mention it; the target says "B".'


def test_clauses_of_a_sentence_and_the_one_a_fact_comes_from() -> None:
    parts = [SENTENCE[a:b] for a, b in clause_parts(SENTENCE)]
    assert parts == [SENTENCE[: SENTENCE.index(", and")], FACT]
    assert clause_parts("The ferry starts in May.") == [(0, 23)]
    at = SENTENCE.index(FACT)
    assert without_part_at(SENTENCE, at, at + len(FACT)) == parts[0] + "."
    assert without_part_at(SENTENCE, 0, 5) == "The city will pay for the whole project from its own budget."
    assert clause_of("The city will pay from its own budget.", SENTENCE) == (at, at + len(FACT))
    assert clause_of("Harbor City finances the ferry alone.", SENTENCE) is None  # too few of its words in either
    assert clause_of("The ferry starts in May.", "The ferry starts in May.") is None  # one part: nothing to narrow


def test_the_removal_fix_drops_the_failing_facts_clause_not_the_one_with_more_unknown_words() -> None:
    source = "The council approved the ferry 7 to 2."
    target = "The council approved the ferry 9 to 0, and locals cheered loudly at the harbour."
    script = Script({"9 to 0": 0.1, "cheered": 0.6}, reason="")
    method = get_method("dcr", llm=LLM(script.model), order="verdict_first", fact_decomposer="clauses")
    verdict, finding = flagged(method.check(source, target))
    assert finding.target_spans[0].of(target) == "The council approved the ferry 9 to 0"
    removed = [c.text for c in verdict.fix_candidates if c.origin == "removed"]
    assert removed == ["Locals cheered loudly at the harbour."]  # the word count alone would drop the other clause
    assert verdict.reason.startswith('The source does not mention it; the closest passage says "The council')
