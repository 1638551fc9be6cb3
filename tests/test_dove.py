"""``dove`` (DoveScore) with the scripted fake model: Eq. 5, sorter repair, batching, edge cases, retrieval."""

from __future__ import annotations

import json
import re

import pytest

from halluscope.llm import LLM, ContextOverflowError, FakeModel
from halluscope.methods import get_method
from halluscope.methods.dove import (Dove, DoveSorter, dove_score, order_comparison, parse_batch_judgments,
                                     parse_decomposition, parse_event_order, parse_fact_judgment)
from halluscope.permutations import count_inversions
from halluscope.text import ParseError

SOURCE = "Anna baked a cake in the morning. Then she invited Ben. Ben arrived at six. They ate the cake together."
TARGET = "Ben arrived at six. Anna baked a cake. Anna invited Ben. They ate the cake. Anna is a baker."
EVENTS = ["Ben arrived at six.", "Anna baked a cake.", "Anna invited Ben.", "Anna and Ben ate the cake."]
KEYWORDS = {"Ben arrived at six.": "arrived", "Anna baked a cake.": "baked", "Anna invited Ben.": "invited",
            "Anna and Ben ate the cake.": "ate"}
DECOMPOSITION = json.dumps({"event_facts": EVENTS, "descriptive_facts": ["Anna is a baker."]})


def _sort_reply(user: str) -> str:
    """Order the shown events by where their keyword first appears in the prompt's TEXT."""
    text = user.split("TEXT:\n", 2)[-1].split("\n\nEVENTS:")[0]
    shown = re.findall(r"^(\d+)\. (.+)$", user.split("EVENTS:\n")[-1], re.M)
    return json.dumps([int(n) for n, event in sorted(shown, key=lambda item: text.find(KEYWORDS[item[1]]))])


def _label(fact: str) -> str:
    return "unsupported" if "baker" in fact else "supported"


def first_prompt(messages) -> str:
    """The task prompt (a repair round appends a second user message after it)."""
    return next(m["content"] for m in messages if m["role"] == "user")


def responder(messages) -> str:
    user = first_prompt(messages)
    if "Split the TEXT below" in user:
        return DECOMPOSITION
    if "EVENTS:" in user:
        return _sort_reply(user)
    if "FACTS:" in user:
        facts = re.findall(r"^(\d+)\. (.+)$", user.split("FACTS:\n")[1].split("\n\n")[0], re.M)
        return json.dumps({"results": [{"id": int(n), "reason": f"checked {f}", "evidence": "", "verdict": _label(f)}
                                       for n, f in facts]})
    fact = user.split("FACT:\n")[1].split("\n\n")[0]
    evidence = "Ben arrived at six" if "arrived" in fact else ""
    return json.dumps({"reason": f"checked {fact}", "evidence": evidence, "verdict": _label(fact)})


def dove(responder_fn=responder, **options) -> tuple[Dove, FakeModel]:
    fake = FakeModel(responder=responder_fn)
    return Dove(llm=LLM(fake), **options), fake


# --- Eq. 5 ---------------------------------------------------------------------------------------------------


def test_eq5_hand_cases():
    s = dove_score(4, 4, 1, 0, 1 / 3)
    assert (s.alpha, s.s_e, s.s_d) == (0.8, 1.0, 0.0)
    assert s.s_eo == pytest.approx(2 / 3)
    assert s.score == pytest.approx(0.8 * 1.0 * (2 / 3) + 0.2 * 0.0)

    s = dove_score(2, 1, 2, 2, 1.0)  # half the events right, and those two fully reversed
    assert s.score == pytest.approx(0.5 * 0.5 * 0.0 + 0.5 * 1.0)

    s = dove_score(3, 2, 1, 1, 0.0)
    assert s.score == pytest.approx(0.75 * (2 / 3) * 1.0 + 0.25 * 1.0)


def test_eq5_edge_cases():
    no_events = dove_score(0, 0, 3, 2, None)
    assert no_events.alpha == 0.0 and no_events.score == pytest.approx(2 / 3)
    assert no_events.s_e is None and no_events.s_eo is None and no_events.shuffle_degree is None

    no_descriptive = dove_score(3, 2, 0, 0, 0.0)
    assert no_descriptive.alpha == 1.0 and no_descriptive.s_d is None
    assert no_descriptive.score == pytest.approx(2 / 3)

    with pytest.raises(ValueError):
        dove_score(0, 0, 0, 0, None)  # no facts: undefined, never a made-up number
    with pytest.raises(ValueError):
        dove_score(2, 2, 0, 0, None)  # events need a ShuffleD
    with pytest.raises(ValueError):
        dove_score(2, 3, 0, 0, 0.0)


def test_order_comparison_is_the_papers_pi():
    # source chronology: events 2, 0, 1, 3; target tells 0, 1, 2, 3
    compared, pi = order_comparison([2, 0, 1, 3], [0, 1, 2, 3])
    assert compared == [0, 1, 2, 3] and pi == [1, 2, 0, 3]
    assert count_inversions(pi) == 2
    compared, pi = order_comparison([2, 0], [0, 1, 2])  # event 1 missing from the source ordering
    assert compared == [0, 2] and pi == [1, 0]


# --- sorter parsing and repair -------------------------------------------------------------------------------

EV = ["Tom woke up", "Tom brushed his teeth", "Tom had breakfast", "Tom went for a run"]


def test_sorter_reply_clean():
    out = parse_event_order("[2, 1, 4, 3]", EV)
    assert out.order == [1, 0, 3, 2] and not (out.missing or out.duplicated or out.invented)


def test_sorter_repair_duplicates_invented_missing():
    out = parse_event_order("[2, 2, 9, 1, 3]", EV)
    assert out.order == [1, 0, 2]
    assert out.duplicated == [1] and out.invented == ["9"] and out.missing == [3]


def test_sorter_accepts_texts_and_bare_lines():
    out = parse_event_order('["Tom woke up", "Tom had breakfast", "Tom flew to Mars", "tom brushed his teeth"]', EV)
    assert out.order == [0, 2, 1] and out.invented == ["Tom flew to Mars"] and out.missing == [3]
    assert parse_event_order("Ordered events: 4, 3, 2, 1", EV).order == [3, 2, 1, 0]
    assert parse_event_order("1. Tom woke up\n2. Tom went for a run\n3. Tom had breakfast", EV).order == [0, 3, 2]
    assert parse_event_order('{"order": [3, 1]}', EV).order == [2, 0]


def test_sorter_reply_that_places_fewer_than_two_events_is_an_error():
    for reply in ("[1]", "[7, 8]", "", "I cannot sort these.", "[1, 1, 1]"):
        with pytest.raises(ParseError):
            parse_event_order(reply, EV)


async def test_sorter_stage_maps_shown_numbers_back():
    sorter = DoveSorter(LLM(FakeModel(responder=lambda m: _sort_reply(m[-1]["content"]))))
    shown = sorter.presentation(EVENTS)
    assert sorted(shown) == list(range(4))
    result = await sorter(EVENTS, SOURCE)
    assert [EVENTS[i] for i in result.order.order] == [
        "Anna baked a cake.", "Anna invited Ben.", "Ben arrived at six.", "Anna and Ben ate the cake."]


# --- other parsers -------------------------------------------------------------------------------------------


def test_parse_decomposition_forms():
    d = parse_decomposition(DECOMPOSITION)
    assert d.events == EVENTS and d.descriptive == ["Anna is a baker."]
    text = "Event Facts List:\n- A left.\n- B arrived.\n\nDescriptive Facts List:\n- A is tall.\n"
    d = parse_decomposition(text)
    assert d.events == ["A left.", "B arrived."] and d.descriptive == ["A is tall."]
    d = parse_decomposition('{"events": ["X won.", "X won."], "descriptive_facts": ["X won.", "Y is red."]}')
    assert d.events == ["X won."] and d.descriptive == ["Y is red."]
    with pytest.raises(ParseError):
        parse_decomposition('{"event_facts": ["only events"]}')
    with pytest.raises(ParseError):
        parse_decomposition('{"event_facts": [1, 2], "descriptive_facts": []}')


def test_parse_fact_judgment_forms():
    assert parse_fact_judgment('{"verdict": "supported", "reason": "r"}').label == "supported"
    assert parse_fact_judgment('{"answer": false}').label == "unsupported"
    assert parse_fact_judgment('{"label": "Contradicted"}').label == "contradicted"
    assert parse_fact_judgment("True. The source says so.").label == "supported"
    assert parse_fact_judgment("Verdict: not supported").label == "unsupported"
    for bad in ("", "Maybe?", '{"verdict": "perhaps"}', "It is hard to say whether this is true."):
        with pytest.raises(ParseError):
            parse_fact_judgment(bad)


def test_parse_batch_judgments():
    reply = json.dumps({"results": [{"id": 1, "verdict": "supported"}, {"id": "2", "verdict": "false"},
                                    {"id": 3, "verdict": "supported"}, {"id": 3, "verdict": "contradicted"},
                                    {"id": 9, "verdict": "supported"}, {"id": 4, "verdict": "??"}]})
    answers = parse_batch_judgments(reply, 4)
    assert {i: a.label for i, a in answers.items()} == {0: "supported", 1: "unsupported"}  # 3 ambiguous, 4 bad
    with pytest.raises(ParseError):
        parse_batch_judgments('{"results": []}', 2)


# --- end to end with the fake --------------------------------------------------------------------------------


def test_end_to_end_scores_and_findings():
    method, fake = dove()
    report = method.check(SOURCE, TARGET)
    assert report.score == pytest.approx(0.8 * (2 / 3))
    assert report.subscores == pytest.approx({"S_E": 1.0, "S_D": 0.0, "S_EO": 2 / 3, "alpha": 0.8, "ShuffleD": 1 / 3})
    order_findings = [f for f in report.findings if f.kind == "event_order"]
    assert len(order_findings) == 2
    named = {tuple(f.claim_ids) for f in order_findings}
    assert named == {("E1", "E2"), ("E1", "E3")}  # "arrived" told before "baked" and before "invited"
    first = order_findings[0]
    assert [s.of(TARGET) for s in first.target_spans][0] == "Ben arrived at six."
    unsupported = [f for f in report.findings if f.kind == "unsupported"]
    assert len(unsupported) == 1 and unsupported[0].target_spans[0].of(TARGET) == "Anna is a baker."
    arrived = next(v for v in report.verdicts if v.claim.id == "E1")
    assert arrived.evidence and arrived.evidence[0].span.of(SOURCE) == "Ben arrived at six"
    assert report.usage.calls == 1 + 5 + 2 == len(fake.requests)
    assert all(v.calls for v in report.verdicts)  # prompts and raw replies kept for audit
    assert report.details["order"]["source_order"] == ["E2", "E3", "E1", "E4"]


def test_truth_in_source_order_scores_one():
    truth = "Anna baked a cake. Anna invited Ben. Ben arrived at six. They ate the cake."

    def truthful(messages):
        user = messages[-1]["content"]
        if "Split the TEXT below" in user:
            return json.dumps({"event_facts": EVENTS, "descriptive_facts": []})
        return responder(messages)

    report = dove(truthful)[0].check(SOURCE, truth)
    assert report.score == 1.0 and report.subscores["S_EO"] == 1.0
    assert not report.findings


def test_batched_checker_gives_the_same_verdicts_as_per_fact():
    per_fact, fake_one = dove(batch_size=1)
    batched, fake_batch = dove(batch_size=3)
    a, b = per_fact.check(SOURCE, TARGET), batched.check(SOURCE, TARGET)
    assert [(v.claim.id, v.label) for v in a.verdicts] == [(v.claim.id, v.label) for v in b.verdicts]
    assert a.score == b.score and a.subscores == b.subscores
    assert len(fake_batch.requests) < len(fake_one.requests)  # 2 batch calls instead of 5 fact calls
    assert b.usage.calls == 1 + 2 + 2


def test_batch_falls_back_to_per_fact_for_unanswered_facts():
    def partial(messages):
        user = messages[-1]["content"]
        if "FACTS:" in user:  # answers only fact 1 of each batch
            return json.dumps({"results": [{"id": 1, "verdict": "supported", "reason": "ok"}]})
        return responder(messages)

    report = dove(partial, batch_size=5)[0].check(SOURCE, TARGET)
    labels = {v.claim.id: v.label for v in report.verdicts}
    assert labels == {"E1": "supported", "E2": "supported", "E3": "supported", "E4": "supported", "D1": "unsupported"}
    assert report.usage.calls == 1 + 1 + 4 + 2


def test_target_order_from_decomposition_saves_a_call():
    method, fake = dove(target_order="decomposition")
    report = method.check(SOURCE, TARGET)
    assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert len(fake.requests) == 1 + 5 + 1


def test_no_facts_is_unscored():
    report = dove(lambda m: '{"event_facts": [], "descriptive_facts": []}')[0].check(SOURCE, TARGET)
    assert report.score is None and "no facts" in report.unscored_reason


def test_only_descriptive_facts():
    def desc(messages):
        if "Split the TEXT below" in messages[-1]["content"]:
            return json.dumps({"event_facts": [], "descriptive_facts": ["Anna is a baker.", "Ben is Anna's friend."]})
        return json.dumps({"verdict": "unsupported" if "baker" in messages[-1]["content"] else "supported"})

    method, fake = dove(desc)
    report = method.check(SOURCE, TARGET)
    assert report.score == 0.5 and report.subscores["alpha"] == 0.0 and report.subscores["S_EO"] is None
    assert not any("EVENTS:" in r[-1]["content"] for r in fake.requests)  # no sorter call


def test_fewer_than_two_verified_events_needs_no_sorter():
    def one_true(messages):
        user = messages[-1]["content"]
        if "FACT:" in user and "Split" not in user:
            fact = user.split("FACT:\n")[1].split("\n\n")[0]
            return json.dumps({"verdict": "supported" if "baked" in fact else "unsupported"})
        return responder(messages)

    method, fake = dove(one_true)
    report = method.check(SOURCE, TARGET)
    assert report.subscores["S_EO"] == 1.0 and report.subscores["ShuffleD"] == 0.0
    assert report.subscores["S_E"] == 0.25
    assert report.score == pytest.approx(0.8 * 0.25)
    assert "fewer than two" in report.details["order"]["note"]
    assert not any("EVENTS:" in r[-1]["content"] for r in fake.requests)


def test_sorter_failure_is_unscored_with_subscores_kept():
    def broken_sorter(messages):
        if "EVENTS:" in first_prompt(messages):
            return "I think they all happen at once."
        return responder(messages)

    report = dove(broken_sorter)[0].check(SOURCE, TARGET)
    assert report.score is None and "sorter" in report.unscored_reason
    assert report.subscores["S_E"] == 1.0 and report.subscores["S_EO"] is None
    assert sum("EVENTS:" in c.messages[-1]["content"] or "could not be used" in c.messages[-1]["content"]
               for c in report.calls) == 2  # one call, one repair round


def test_sorter_that_drops_an_event_compares_the_rest():
    def dropping(messages):
        user = messages[-1]["content"]
        if "EVENTS:" in user:
            order = json.loads(_sort_reply(user))
            shown = dict(re.findall(r"^(\d+)\. (.+)$", user.split("EVENTS:\n")[-1], re.M))
            if "Then she invited Ben" in user:  # source-side: drop "invited", add a duplicate and an invention
                order = [n for n in order if shown[str(n)] != "Anna invited Ben."]
                order = order + [order[0], 42]
            return json.dumps(order)
        return responder(messages)

    report = dove(dropping)[0].check(SOURCE, TARGET)
    order = report.details["order"]
    assert order["source_sorter"]["missing"] == ["E3"]
    assert order["source_sorter"]["invented"] == ["42"] and len(order["source_sorter"]["duplicated"]) == 1
    assert order["compared_events"] == 3
    assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)  # arrived before baked: 1 of 3 pairs


def test_unscored_facts_are_left_out_and_listed():
    def flaky(messages):
        user = messages[-1]["content"]
        if ("FACT:\nAnna is a baker." in user) or ("could not be used" in user and "baker" in str(messages)):
            return "hmm"
        return responder(messages)

    report = dove(flaky)[0].check(SOURCE, TARGET)
    assert report.details["unscored_facts"][0]["id"] == "D1"
    assert report.subscores["alpha"] == 1.0 and report.subscores["S_D"] is None
    assert report.score == pytest.approx(2 / 3)
    assert next(v for v in report.verdicts if v.claim.id == "D1").label == "unscored"


def test_long_source_goes_through_retrieval():
    """A small context window forces retrieval: every fact is checked against retrieved snippets."""
    long_source = " ".join(f"Filler sentence number {i} talks about the weather." for i in range(200)) + " " + SOURCE
    fake = FakeModel(responder=responder, context_window=1500)  # FakeModel counts words as tokens
    method = Dove(llm=LLM(fake), top_k=2, window=0, retriever="bm25")
    report = method.check(long_source, TARGET)
    assert report.details["context"]["mode"] == "retrieval"
    assert "does not fit" in report.details["context"]["why"]
    assert all(len(r[-1]["content"]) < len(long_source) for r in fake.requests)  # never the whole source
    assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert report.score == pytest.approx(0.8 * (2 / 3))


def test_context_overflow_from_backend_switches_to_retrieval():
    def overflowing(messages):
        if "Filler" in messages[-1]["content"] and len(messages[-1]["content"]) > 3000:
            raise ContextOverflowError("prompt too long")
        return responder(messages)

    long_source = " ".join(f"Filler sentence number {i} talks about the weather." for i in range(150)) + " " + SOURCE
    report = Dove(llm=LLM(FakeModel(responder=overflowing)), top_k=2, window=0, retriever="bm25").check(
        long_source, TARGET)
    assert report.details["context"]["mode"] == "retrieval"
    assert "overflow" in report.details["context"]["why"]
    assert report.score == pytest.approx(0.8 * (2 / 3))


def test_registered_and_options_validated():
    method = get_method("dove", llm=LLM(FakeModel(default="{}")), batch_size=4)
    assert method.options()["batch_size"] == 4
    with pytest.raises(ValueError):
        Dove(llm=LLM(FakeModel(default="{}")), batch_size=0)
    with pytest.raises(ValueError):
        Dove(llm=LLM(FakeModel(default="{}")), target_order="random")  # type: ignore[arg-type]


def test_report_round_trips_as_json():
    from halluscope.records import Report

    report = dove()[0].check(SOURCE, TARGET)
    assert Report.model_validate_json(report.model_dump_json()) == report


def test_sentence_decomposer_needs_no_decomposition_call():
    def no_decomposition(messages):
        assert "Split the TEXT below" not in first_prompt(messages)
        user = first_prompt(messages)
        if "EVENTS:" in user:
            keys = {"Ben arrived at six.": "arrived", "Anna baked a cake.": "baked", "They ate the cake.": "ate"}
            text = user.split("TEXT:\n", 2)[-1].split("\n\nEVENTS:")[0]
            shown = re.findall(r"^(\d+)\. (.+)$", user.split("EVENTS:\n")[-1], re.M)
            return json.dumps({"order": [int(n) for n, e in sorted(shown, key=lambda i: text.find(keys[i[1]]))]})
        return json.dumps({"verdict": "supported", "reason": "stated"})

    method, fake = dove(no_decomposition, decomposer="sentences", target_order="decomposition")
    target = "Ben arrived at six. Anna baked a cake. They ate the cake."
    report = method.check(SOURCE, target)
    assert [c.text for c in report.claims] == ["Ben arrived at six.", "Anna baked a cake.", "They ate the cake."]
    assert [c.target_spans[0].of(target) for c in report.claims] == [c.text for c in report.claims]
    assert report.subscores["alpha"] == 1.0 and report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert len(fake.requests) == 3 + 1


def test_position_sorter_needs_no_sorter_call():
    def checks_only(messages):
        assert "EVENTS:" not in first_prompt(messages)
        return responder(messages)

    for target_order in ("sorter", "decomposition"):
        method, fake = dove(checks_only, sorter="position", target_order=target_order, retriever="bm25")
        report = method.check(SOURCE, TARGET)
        assert report.details["order"]["source_order"] == ["E2", "E3", "E1", "E4"]
        assert report.details["order"]["source_sentence_of_event"] == [2, 0, 1, 3]
        assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)
        assert len(fake.requests) == 1 + 5


async def test_position_sorter_ties_and_unmatched_events():
    from halluscope.methods.dove import PositionSorter
    from halluscope.retrieval import RetrievalConfig, SourceIndex

    index = SourceIndex.build(SOURCE, RetrievalConfig(retriever="bm25"))
    result = await PositionSorter(index)(["Ben arrived.", "Quantum zebras yodel.", "Anna baked.", "Anna baked a cake."])
    assert result.order.order == [2, 3, 0]  # the two "baked" events tie on sentence 0 and keep their order
    assert result.order.missing == [1]
    failed = await PositionSorter(index)(["Quantum zebras yodel.", "Purple volcanoes sing."])
    assert failed.order is None and "only 0 of 2" in failed.error
