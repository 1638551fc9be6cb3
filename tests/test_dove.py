"""``dove`` (DoveScore) with the scripted fake model: Eq. 5, sorter repair, batching, edge cases, retrieval,
strict replies, swapped verifiers."""

from __future__ import annotations

import json
import re

import pytest

from halluscope.llm import LLM, ContextOverflowError, FakeModel
from halluscope.methods import get_method
from halluscope.methods.dove import (
    Dove,
    DoveCheckReply,
    DoveSorter,
    dove_score,
    order_comparison,
    parse_batch_judgments,
    parse_decomposition,
    parse_event_order,
    parse_fact_judgment,
)
from halluscope.permutations import count_inversions
from halluscope.records import Verdict
from halluscope.stages import register_stage, stage_spec
from halluscope.stages.verifiers import LLMVerifier
from halluscope.text import ParseError
from tests.prompt_data import fenced, listing, user_text

SOURCE = "Anna baked a cake in the morning. Then she invited Ben. Ben arrived at six. They ate the cake together."
TARGET = "Ben arrived at six. Anna baked a cake. Anna invited Ben. They ate the cake. Anna is a baker."
EVENTS = ["Ben arrived at six.", "Anna baked a cake.", "Anna invited Ben.", "Anna and Ben ate the cake."]
KEYWORDS = {
    "Ben arrived at six.": "arrived",
    "Anna baked a cake.": "baked",
    "Anna invited Ben.": "invited",
    "Anna and Ben ate the cake.": "ate",
    "They ate the cake.": "ate",
}
DECOMPOSITION = json.dumps({"event_facts": EVENTS, "descriptive_facts": ["Anna is a baker."]})


def _sort_reply(messages) -> str:
    """Order the shown events by where their keyword first appears in the prompt's TEXT."""
    text = fenced(messages, "text")
    shown = sorted(listing(messages, "events"), key=lambda item: text.find(KEYWORDS[item[1]]))
    return json.dumps([n for n, _ in shown])


def _supported(fact: str) -> bool:
    return "baker" not in fact


def check_reply(fact: str, **extra) -> str:
    evidence = "Ben arrived at six" if "arrived" in fact else ""
    return json.dumps({"reason": f"checked {fact}", "evidence": evidence, "supported": _supported(fact), **extra})


def _batch_reply(messages) -> str:
    return json.dumps(
        {
            "results": [
                {"id": n, "reason": f"checked {f}", "evidence": "", "supported": _supported(f)}
                for n, f in listing(messages, "facts")
            ]
        }
    )


# The scripted model keyed by the reply each DoveScore stage asks for (FakeModel(by_reply=...)), reading the data
# fenced in the prompt: the decomposition, event orders by keyword position, facts about a baker unsupported.
SCRIPT = {
    "DoveFactsReply": DECOMPOSITION,
    "DoveOrderReply": _sort_reply,
    "DoveBatchReply": _batch_reply,
    "DoveCheckReply": lambda messages: check_reply(fenced(messages, "fact")),
}


def dove(script=None, **options) -> tuple[Dove, FakeModel]:
    """Dove on a fake scripted by ``script``, a ``by_reply`` dict (default :data:`SCRIPT`)."""
    fake = FakeModel(by_reply=SCRIPT if script is None else script)
    return Dove(llm=LLM(fake, cache=None), **options), fake


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
    assert parse_event_order('{"order": [3, 1]}', EV).order == [2, 0]


def test_sorter_repair_duplicates_invented_missing():
    out = parse_event_order("[2, 2, 9, 1, 3]", EV)
    assert out.order == [1, 0, 2]
    assert out.duplicated == [1] and out.invented == ["9"] and out.missing == [3]


def test_sorter_accepts_event_texts_in_the_list():
    out = parse_event_order('["Tom woke up", "Tom had breakfast", "Tom flew to Mars", "tom brushed his teeth"]', EV)
    assert out.order == [0, 2, 1] and out.invented == ["Tom flew to Mars"] and out.missing == [3]
    assert parse_event_order('{"order": ["4. Tom went for a run", 1]}', EV).order == [3, 0]


def test_sorter_reply_must_be_the_declared_list():
    """Prose, bare number lines, bulleted lists, other keys, booleans and numbers in strings are no order."""
    for reply in (
        "Ordered events: 4, 3, 2, 1",
        "1. Tom woke up\n2. Tom went for a run\n3. Tom had breakfast",
        '{"events": [2, 1]}',
        "[true, false]",
        '{"order": "2, 1"}',
    ):
        with pytest.raises(ParseError):
            parse_event_order(reply, EV)
    out = parse_event_order('["2", 1, 3]', EV)  # a number in a string names no event: recorded as invented
    assert out.order == [0, 2] and out.invented == ["2"]


def test_sorter_reply_that_places_fewer_than_two_events_is_an_error():
    for reply in ("[1]", "[7, 8]", "", "I cannot sort these.", "[1, 1, 1]", '["...", "<event>", 2]'):
        with pytest.raises(ParseError):
            parse_event_order(reply, EV)


async def test_sorter_stage_maps_shown_numbers_back():
    sorter = DoveSorter(
        LLM(FakeModel(by_reply={"DoveOrderReply": _sort_reply})), DoveSorter.Options(sorter_input="shuffled")
    )
    shown = sorter.presentation(EVENTS)
    assert sorted(shown) == list(range(4))
    result = await sorter(EVENTS, SOURCE)
    assert [EVENTS[i] for i in result.value.order] == [
        "Anna baked a cake.",
        "Anna invited Ben.",
        "Ben arrived at six.",
        "Anna and Ben ate the cake.",
    ]


# --- decomposer and fact-checker replies ---------------------------------------------------------------------


def test_parse_decomposition_is_strict():
    d = parse_decomposition(DECOMPOSITION)
    assert d.events == EVENTS and d.descriptive == ["Anna is a baker."]
    d = parse_decomposition(
        '{"event_facts": ["X won.", "X won.", "..."], "descriptive_facts": ["X won.", "Y is red."]}'
    )
    assert d.events == ["X won."] and d.descriptive == ["Y is red."] and d.dropped == ["..."]
    assert parse_decomposition('{"event_facts": [], "descriptive_facts": []}').events == []  # no facts: a valid reply
    for bad in (
        '{"event_facts": ["only events"]}',
        '{"event_facts": [1, 2], "descriptive_facts": []}',
        '{"events": ["X won."], "descriptive_facts": []}',
        "Event Facts List:\n- A left.\n\nDescriptive Facts List:\n- A is tall.\n",
        '{"event_facts": [{"fact": "A left."}], "descriptive_facts": []}',
        '{"event_facts": ["<event fact>", "N/A"], "descriptive_facts": ["…"]}',
    ):
        with pytest.raises(ParseError):
            parse_decomposition(bad)


def test_decomposition_that_copies_the_prompts_examples_is_refused():
    copied = json.dumps(
        {"event_facts": ["The committee rejected the proposal."], "descriptive_facts": ["Copper conducts electricity."]}
    )
    examples = ["The committee rejected the proposal.", "Copper conducts electricity."]
    with pytest.raises(ParseError):
        parse_decomposition(copied, examples, target="Ben arrived at six.")
    kept = parse_decomposition(copied, examples, target="The committee rejected the proposal.")
    assert kept.events == ["The committee rejected the proposal."] and kept.descriptive == []


def test_parse_fact_judgment_reads_only_a_stated_boolean():
    assert parse_fact_judgment('{"reason": "r", "evidence": "", "supported": true}').label == "supported"
    assert parse_fact_judgment('{"supported": false}').label == "unsupported"
    assert parse_fact_judgment('{"supported": false, "contradicted": true}').label == "contradicted"
    assert parse_fact_judgment('{"reason": null, "evidence": null, "supported": true}').label == "supported"
    for bad in (
        "",
        "Maybe?",
        "Supported? No.",
        "True. The source says so.",
        "Verdict: not supported",
        '{"supported": null}',
        '{"supported": "yes"}',
        '{"supported": 1}',
        '{"verdict": "supported"}',
        '{"answer": false}',
        '{"supported": true, "contradicted": true}',
        '{"x": {"supported": true}}',
        '{"reason": "The source says so", "supported": tr',
    ):
        with pytest.raises(ParseError):
            parse_fact_judgment(bad)


def test_parse_batch_judgments_one_entry_per_fact():
    reply = json.dumps(
        {
            "results": [
                {"id": 1, "supported": True},
                {"id": "2", "supported": False},
                {"id": 3, "supported": True},
                {"id": 3, "supported": False},
                {"id": 4, "supported": "??"},
                {"id": 5, "supported": False, "contradicted": True},
            ]
        }
    )
    answers = parse_batch_judgments(reply, 6)
    assert {i: a.label for i, a in answers.judged.items()} == {0: "supported", 4: "contradicted"}
    assert set(answers.missing) == {1, 2, 3, 5}
    assert "2 entries" in answers.missing[2] and "unusable" in answers.missing[3]
    assert "no entry" in answers.missing[1] and "no entry" in answers.missing[5]
    bare = parse_batch_judgments('[{"id": 2, "supported": true}]', 2)
    assert list(bare.judged) == [1]
    for bad in (
        '{"results": []}',
        '{"items": [{"id": 1, "supported": true}]}',
        "[]",
        "1. yes\n2. no",
        '{"results": [{"id": 0, "supported": true}, {"id": 1, "supported": true}]}',  # numbering shifted
        '{"results": [{"id": 1, "supported": true}, {"id": 9, "supported": true}]}',
    ):
        with pytest.raises(ParseError):
            parse_batch_judgments(bad, 2)


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
    assert first.target_spans[0].of(TARGET) == "Ben arrived at six."
    unsupported = [f for f in report.findings if f.kind == "unsupported"]
    assert len(unsupported) == 1 and unsupported[0].target_spans[0].of(TARGET) == "Anna is a baker."
    arrived = next(v for v in report.verdicts if v.claim.id == "E1")
    assert arrived.evidence and arrived.evidence[0].span.of(SOURCE) == "Ben arrived at six"
    assert report.usage.calls == 1 + 5 + 2 == len(fake.requests) == len(report.calls)
    assert all(v.calls for v in report.verdicts)  # prompts and raw replies kept for audit
    assert report.details["order"]["source_order"] == ["E2", "E3", "E1", "E4"]
    assert report.details["stages"] == {
        "decomposer": "dove",
        "context_selector": "retrieval",
        "verifier": "dove",
        "sorter": "dove.sort",
    }
    assert report.details["context"]["mode"] == "full"


def test_inputs_are_fenced_in_every_prompt():
    method, fake = dove()
    method.check(SOURCE, TARGET)
    for request in fake.requests:
        user = next(m["content"] for m in request if m["role"] == "user")  # the task prompt
        assert re.search(r"<(target|source|text)_\w+>", user), user[:80]


def test_truth_in_source_order_scores_one():
    truth = "Anna baked a cake. Anna invited Ben. Ben arrived at six. They ate the cake."

    truthful = SCRIPT | {"DoveFactsReply": json.dumps({"event_facts": EVENTS, "descriptive_facts": []})}
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
    partial = SCRIPT | {  # each batch reply answers only its fact 1
        "DoveBatchReply": json.dumps({"results": [{"id": 1, "supported": True, "reason": "ok"}]})
    }
    report = dove(partial, batch_size=5)[0].check(SOURCE, TARGET)
    labels = {v.claim.id: v.label for v in report.verdicts}
    assert labels == {"E1": "supported", "E2": "supported", "E3": "supported", "E4": "supported", "D1": "unsupported"}
    assert report.usage.calls == 1 + 1 + 4 + 2


def test_batch_fact_without_a_verdict_is_unscored_with_both_reasons():
    def batch_without_baker(messages):
        return json.dumps(
            {"results": [{"id": n, "supported": True} for n, f in listing(messages, "facts") if "baker" not in f]}
        )

    # only the baker fact is checked alone: first its reply, then its repair round's
    partial = SCRIPT | {
        "DoveBatchReply": batch_without_baker,
        "DoveCheckReply": ["Supported? No.", '{"supported": null}'],
    }
    report = dove(partial, batch_size=5)[0].check(SOURCE, TARGET)
    baker = next(v for v in report.verdicts if v.claim.id == "D1")
    assert baker.label == "unscored"
    assert "batch reply has no entry for fact 5" in baker.reason and "alone:" in baker.reason
    assert [c.reply for c in baker.calls][-2:] == ["Supported? No.", '{"supported": null}']
    assert report.details["unscored_facts"] == [{"id": "D1", "reason": baker.reason}]
    assert report.subscores["alpha"] == 1.0 and report.score == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "reply,label",
    [
        ('{"supported": false}', "unsupported"),
        ('{"supported": false, "contradicted": true, "reason": "r"}', "contradicted"),
        ('{"supported": null}', "unscored"),
        ("Supported? No.", "unscored"),
        ("No problem!", "unscored"),
        ('{"verdict": "supported"}', "unscored"),
        ('{"supported": "no"}', "unscored"),
        ('{"x": [{"y": {"supported": true}}]}', "unscored"),
    ],
)
def test_fact_checker_reply_forms_end_to_end(reply, label):
    scripted = {
        "DoveFactsReply": json.dumps({"event_facts": [], "descriptive_facts": ["Anna is a baker."]}),
        "DoveCheckReply": reply,
    }
    report = dove(scripted)[0].check(SOURCE, TARGET)
    (verdict,) = report.verdicts
    assert verdict.label == label
    if label == "unscored":
        assert report.score is None and "could be checked" in report.unscored_reason
        assert verdict.reason.startswith("fact checker: unparseable reply after 2 attempt(s)")
        assert [c.reply for c in verdict.calls] == [reply, reply]  # the raw replies are kept
        assert not report.findings
    else:
        assert report.score == 0.0 and report.findings[0].kind == label


def test_target_order_from_decomposition_saves_a_call():
    method, fake = dove(target_order="decomposition")
    report = method.check(SOURCE, TARGET)
    assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert len(fake.requests) == 1 + 5 + 1


def test_no_facts_is_unscored():
    report = dove({"DoveFactsReply": '{"event_facts": [], "descriptive_facts": []}'})[0].check(SOURCE, TARGET)
    assert report.score is None and "found no claims" in report.unscored_reason


def test_decomposer_failure_is_unscored_with_the_raw_replies():
    report = dove({"DoveFactsReply": "Event Facts:\n- Ben arrived."})[0].check(SOURCE, TARGET)
    assert report.score is None and "decomposer: unparseable reply" in report.unscored_reason
    assert len(report.calls) == 2 and report.calls[0].reply == "Event Facts:\n- Ben arrived."


def test_only_descriptive_facts():
    desc = {
        "DoveFactsReply": json.dumps(
            {"event_facts": [], "descriptive_facts": ["Anna is a baker.", "Ben is Anna's friend."]}
        ),
        "DoveCheckReply": lambda m: json.dumps({"supported": "baker" not in fenced(m, "fact")}),
    }
    method, fake = dove(desc)
    report = method.check(SOURCE, TARGET)
    assert report.score == 0.5 and report.subscores["alpha"] == 0.0 and report.subscores["S_EO"] is None
    assert "DoveOrderReply" not in fake.reply_types  # no sorter call


def test_fewer_than_two_verified_events_needs_no_sorter():
    one_true = SCRIPT | {"DoveCheckReply": lambda m: json.dumps({"supported": "baked" in fenced(m, "fact")})}
    method, fake = dove(one_true)
    report = method.check(SOURCE, TARGET)
    assert report.subscores["S_EO"] == 1.0 and report.subscores["ShuffleD"] == 0.0
    assert report.subscores["S_E"] == 0.25
    assert report.score == pytest.approx(0.8 * 0.25)
    assert "fewer than two" in report.details["order"]["note"]
    assert "DoveOrderReply" not in fake.reply_types


def test_sorter_failure_is_unscored_with_subscores_kept():
    method, fake = dove(SCRIPT | {"DoveOrderReply": "I think they all happen at once."})
    report = method.check(SOURCE, TARGET)
    assert report.score is None and "sorter" in report.unscored_reason
    assert report.subscores["S_E"] == 1.0 and report.subscores["S_EO"] is None
    assert fake.reply_types.count("DoveOrderReply") == 2  # one call, one repair round


def test_sorter_that_drops_an_event_compares_the_rest():
    def dropping(messages):
        order = json.loads(_sort_reply(messages))
        shown = dict(listing(messages, "events"))
        if "Then she invited Ben" in fenced(messages, "text"):  # source side: drop "invited", repeat one, invent one
            order = [n for n in order if shown[n] != "Anna invited Ben."]
            order = order + [order[0], 42]
        return json.dumps(order)

    report = dove(SCRIPT | {"DoveOrderReply": dropping})[0].check(SOURCE, TARGET)
    order = report.details["order"]
    assert order["source_sorter"]["missing"] == ["E3"]
    assert order["source_sorter"]["invented"] == ["42"] and len(order["source_sorter"]["duplicated"]) == 1
    assert order["compared_events"] == 3
    assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)  # arrived before baked: 1 of 3 pairs


def test_unscored_facts_are_left_out_and_listed():
    def flaky(messages):
        fact = fenced(messages, "fact")
        return "hmm" if "baker" in fact else check_reply(fact)

    report = dove(SCRIPT | {"DoveCheckReply": flaky})[0].check(SOURCE, TARGET)
    assert report.details["unscored_facts"][0]["id"] == "D1"
    assert report.subscores["alpha"] == 1.0 and report.subscores["S_D"] is None
    assert report.score == pytest.approx(2 / 3)
    assert next(v for v in report.verdicts if v.claim.id == "D1").label == "unscored"


# --- retrieval --------------------------------------------------------------------------------------------------


def test_long_source_goes_through_retrieval():
    """A small context window forces retrieval: every fact is checked against retrieved snippets."""
    long_source = " ".join(f"Filler sentence number {i} talks about the weather." for i in range(200)) + " " + SOURCE
    fake = FakeModel(by_reply=SCRIPT, context_window=1500)  # FakeModel counts words as tokens
    method = Dove(llm=LLM(fake, cache=None), top_k=2, window=0, retriever="bm25")
    report = method.check(long_source, TARGET)
    context = report.details["context"]
    assert context["mode"] == "retrieval" and "does not fit" in context["why"]
    assert all(len(r[-1]["content"]) < len(long_source) for r in fake.requests)  # never the whole source
    assert set(context["snippets"]) == {"E1", "E2", "E3", "E4", "D1"} and context["sorter_excerpts"] >= 1
    assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert report.score == pytest.approx(0.8 * (2 / 3))


def test_context_overflow_from_backend_switches_to_retrieval():
    def overflowing(reply):
        """The scripted reply, but a backend overflow for a prompt carrying the long source whole."""

        def answer(messages):
            if "Filler" in messages[-1]["content"] and len(messages[-1]["content"]) > 3000:
                raise ContextOverflowError("prompt too long")
            return reply(messages) if callable(reply) else reply

        return answer

    long_source = " ".join(f"Filler sentence number {i} talks about the weather." for i in range(150)) + " " + SOURCE
    fake = FakeModel(by_reply={kind: overflowing(reply) for kind, reply in SCRIPT.items()})
    report = Dove(llm=LLM(fake, cache=None), top_k=2, window=0, retriever="bm25").check(long_source, TARGET)
    assert report.details["context"]["mode"] == "retrieval"
    assert "overflow" in report.details["context"]["why"]
    assert report.score == pytest.approx(0.8 * (2 / 3))


def _source_with_distractors() -> str:
    """SOURCE in the middle of mild-weather filler, with a look-alike of each event far away from it."""

    def filler(a: int, b: int) -> list[str]:
        return [f"The weather was mild on day {i}." for i in range(a, b)]

    return " ".join(
        filler(0, 40)
        + ["Anna baked bread for the market."]
        + filler(40, 80)
        + ["Ben arrived at the station."]
        + filler(80, 120)
        + [SOURCE]
        + filler(120, 160)
        + ["Anna invited Tom to the market."]
        + filler(160, 200)
        + ["They ate the soup."]
        + filler(200, 240)
    )


@pytest.mark.parametrize("window,narrowed", [(1000, False), (400, True), (300, None)])
def test_source_side_sorter_reads_excerpts_narrowed_to_fit(window, narrowed):
    """With retrieval the source-side sorter reads the facts' snippets merged in source order; when they do
    not fit, the top sentence per event without a window; when even that does not fit, no order (unscored)."""
    fake = FakeModel(by_reply=SCRIPT, context_window=window)
    report = Dove(llm=LLM(fake, cache=None), top_k=3, window=2, retriever="bm25").check(
        _source_with_distractors(), TARGET
    )
    context = report.details["context"]
    if narrowed is None:
        assert report.score is None and "do not fit" in report.unscored_reason and report.subscores["S_E"] == 1.0
        return
    sort_prompts = [r for r, kind in zip(fake.requests, fake.reply_types) if kind == "DoveOrderReply"]
    sorted_text = next(t for t in (fenced(p, "text") for p in sort_prompts) if "Then she invited" in t)
    assert (context["sorter_top_k"], context["sorter_window"]) == ((1, 0) if narrowed else (3, 2))
    if narrowed:
        assert sorted_text == SOURCE and context["sorter_excerpts"] == 1
    else:
        assert "Ben arrived at the station." in sorted_text and "[...]" in sorted_text
    assert report.score is not None


def test_retrieval_options_show_the_snippets_used():
    method, fake = dove(retrieval="always", top_k=3, window=1, retriever="bm25", batch_size=4)
    report = method.check(SOURCE, TARGET)
    context = report.details["context"]
    assert context["mode"] == "retrieval" and context["why"] == "requested (retrieval=always)"
    assert (context["top_k"], context["window"]) == (3, 1)
    for snippets in context["snippets"].values():
        assert 1 <= len(snippets) <= 3 and all(s["kind"] == "snippet" and "span" in s for s in snippets)
    assert "DoveBatchReply" not in fake.reply_types  # batch_size applies to the whole source only
    assert report.score == pytest.approx(0.8 * (2 / 3))


def test_cli_retrieval_options(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import halluscope.methods.base as method_base
    from halluscope.cli.main import app
    from halluscope.records import Report

    monkeypatch.setattr(method_base, "get_llm", lambda config: LLM(FakeModel(by_reply=SCRIPT), cache=None))
    (tmp_path / "s.txt").write_text(SOURCE, encoding="utf-8")
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
            "dove",
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
    assert report.details["context"]["mode"] == "retrieval" and len(report.details["context"]["snippets"]) == 5
    assert report.score == pytest.approx(0.8 * (2 / 3))


# --- options, stages, swapped verifiers ------------------------------------------------------------------------


def test_registered_and_options_validated():
    method = get_method("dove", llm=LLM(FakeModel(default="{}")), batch_size=4)
    assert method.options()["batch_size"] == 4
    with pytest.raises(ValueError):
        Dove(llm=LLM(FakeModel(default="{}")), batch_size=0)
    with pytest.raises(ValueError):
        Dove(llm=LLM(FakeModel(default="{}")), target_order="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Valid options"):
        Dove(llm=LLM(FakeModel(default="{}")), nonsense=1)
    assert stage_spec("decomposer", "dove") and stage_spec("verifier", "dove")
    assert "dove_check_batch" in method.prompt_version
    assert "dove_check_batch" not in Dove(llm=LLM(FakeModel(default="{}"))).prompt_version


def test_report_round_trips_as_json():
    from halluscope.records import Report

    report = dove()[0].check(SOURCE, TARGET)
    assert Report.model_validate_json(report.model_dump_json()) == report


@register_stage("test_dove_keyword", "verifier")
class KeywordVerifier(LLMVerifier):
    """Test-only verifier: supported when the fact's keyword occurs in the context (one call per fact)."""

    reply_tokens = 8

    def messages(self, claims, context_text):
        return [{"role": "user", "content": f"KEYWORD CHECK {claims[0].text}"}]

    async def __call__(self, claims, context, source):
        out = []
        for claim in claims:
            await self.llm.generate(self.messages([claim], context.text))
            word = KEYWORDS.get(claim.text, "baker")
            label = "supported" if word in context.text else "unsupported"
            out.append(Verdict(claim=claim, label=label, reason=f"keyword {word!r}"))
        return out


def test_swapped_verifier_runs_dove_end_to_end():
    only_decompose_and_sort = {"DoveFactsReply": DECOMPOSITION, "DoveOrderReply": _sort_reply, "text": "ok"}
    method, fake = dove(only_decompose_and_sort, verifier="test_dove_keyword")
    report = method.check(SOURCE, TARGET)
    assert not {"DoveCheckReply", "DoveBatchReply"} & set(fake.reply_types)  # dove's own fact checker is never asked
    assert report.details["stages"]["verifier"] == "test_dove_keyword"
    assert {v.claim.id: v.label for v in report.verdicts} == {
        "E1": "supported",
        "E2": "supported",
        "E3": "supported",
        "E4": "supported",
        "D1": "unsupported",
    }
    assert report.score == pytest.approx(0.8 * (2 / 3)) and report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert sum(user_text(r).startswith("KEYWORD CHECK") for r in fake.requests) == fake.reply_types.count("text") == 5
    assert "dove_check" not in method.prompt_version and "dove_sort" in method.prompt_version


def test_factscore_verifier_in_dove():
    def factscore_judgment(messages):
        if "baker" in fenced(messages, "fact"):
            inconsistency = 'The fact says "baker"; the source does not say so.'
            return json.dumps({"supported": False, "inconsistencies": [inconsistency]})
        return json.dumps({"supported": True, "inconsistencies": []})

    factscore_replies = {
        "DoveFactsReply": DECOMPOSITION,
        "DoveOrderReply": _sort_reply,
        "FactJudgmentReply": factscore_judgment,
    }
    method, fake = dove(factscore_replies, verifier="factscore")
    report = method.check(SOURCE, TARGET)
    assert not {"DoveCheckReply", "DoveBatchReply"} & set(fake.reply_types)  # dove's own fact checker is never asked
    assert report.details["stages"]["verifier"] == "factscore"
    assert report.score == pytest.approx(0.8 * (2 / 3))
    (unsupported,) = [f for f in report.findings if f.kind == "unsupported"]
    assert "baker" in unsupported.description and unsupported.target_spans[0].of(TARGET) == "Anna is a baker."


def test_dove_verifier_named_explicitly_is_the_default():
    a, b = dove()[0].check(SOURCE, TARGET), dove(verifier="dove")[0].check(SOURCE, TARGET)
    assert a.score == b.score and a.details["stages"] == b.details["stages"]


def test_dove_verifier_in_another_claim_method():
    """The ``dove`` verifier takes claims + one context: it runs inside factscore too."""
    replies = {
        "FactsReply": json.dumps(
            {"facts": [{"sentence": 1, "fact": "Ben arrived at six."}, {"sentence": 5, "fact": "Anna is a baker."}]}
        ),
        "DoveCheckReply": SCRIPT["DoveCheckReply"],
    }
    report = get_method("factscore", llm=LLM(FakeModel(by_reply=replies), cache=None), verifier="dove").check(
        SOURCE, TARGET
    )
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"] and report.score == 0.5


# --- no-LLM variants ---------------------------------------------------------------------------------------------


def test_sentence_decomposer_needs_no_decomposition_call():
    no_decomposition = {
        "DoveOrderReply": lambda m: json.dumps({"order": json.loads(_sort_reply(m))}),
        "DoveCheckReply": json.dumps({"supported": True, "reason": "stated"}),
    }
    method, fake = dove(no_decomposition, decomposer="sentences", target_order="decomposition")
    target = "Ben arrived at six. Anna baked a cake. They ate the cake."
    report = method.check(SOURCE, target)
    assert [c.text for c in report.claims] == ["Ben arrived at six.", "Anna baked a cake.", "They ate the cake."]
    assert [c.target_spans[0].of(target) for c in report.claims] == [c.text for c in report.claims]
    assert report.subscores["alpha"] == 1.0 and report.subscores["ShuffleD"] == pytest.approx(1 / 3)
    assert len(fake.requests) == 3 + 1 and "DoveFactsReply" not in fake.reply_types
    assert "dove_decompose" not in method.prompt_version


def test_position_sorter_needs_no_sorter_call():
    checks_only = {kind: reply for kind, reply in SCRIPT.items() if kind != "DoveOrderReply"}
    for target_order in ("sorter", "decomposition"):
        method, fake = dove(checks_only, sorter="position", target_order=target_order, retriever="bm25")
        report = method.check(SOURCE, TARGET)
        assert report.details["order"]["source_order"] == ["E2", "E3", "E1", "E4"]
        assert report.details["order"]["source_sentence_of_event"] == [2, 0, 1, 3]
        assert report.subscores["ShuffleD"] == pytest.approx(1 / 3)
        assert len(fake.requests) == 1 + 5 and "DoveOrderReply" not in fake.reply_types
        assert report.details["stages"]["sorter"] == "dove.position_sort"


async def test_position_sorter_ties_and_unmatched_events():
    from halluscope.stages import build_stage

    sorter = build_stage("sorter", "position", options={"retriever": "bm25"})
    result = await sorter(["Ben arrived.", "Quantum zebras yodel.", "Anna baked.", "Anna baked a cake."], SOURCE)
    assert result.value.order == [2, 3, 0]  # the two "baked" events tie on sentence 0 and keep their order
    assert result.value.missing == [1]
    failed = await sorter(["Quantum zebras yodel.", "Purple volcanoes sing."], SOURCE)
    assert failed.value is None and "only 0 of 2" in failed.error


def test_check_reply_schema_drives_the_prompt():
    rendered = Dove().prompt(Dove.prompts[1]).render(source="S", fact="F")[-1]["content"]
    assert '"supported": true or false' in rendered and DoveCheckReply.format_instructions() in rendered


def test_last_batch_of_one_fact_uses_the_one_fact_prompt():
    method, fake = dove(batch_size=2)  # 5 facts: batches of 2, 2 and 1
    report = method.check(SOURCE, TARGET)
    assert fake.reply_types.count("DoveBatchReply") == 2 and fake.reply_types.count("DoveCheckReply") == 1
    assert len(fake.requests) == 1 + 3 + 2 and report.score == pytest.approx(0.8 * (2 / 3))


def test_sorter_reply_that_copies_the_prompts_example_is_an_echo():
    with pytest.raises(ParseError, match="example"):
        parse_event_order('{"order": [2, 4, 3, 1]}', EV[:2], example=(2, 4, 3, 1))
    assert parse_event_order('{"order": [2, 4, 3, 1]}', EV, example=(2, 4, 3, 1)).order == [1, 3, 2, 0]

    echoing = SCRIPT | {
        "DoveFactsReply": json.dumps({"event_facts": EVENTS[1:], "descriptive_facts": []}),
        "DoveOrderReply": '{"order": [2, 4, 3, 1]}',
    }
    report = dove(echoing)[0].check(SOURCE, TARGET)
    assert report.score is None and "copies the prompt's example order" in report.unscored_reason


def test_a_batch_call_gets_the_reply_room_of_its_single_calls():
    from halluscope.llm import GenerateParams
    from halluscope.llm.fake import reply_type
    from halluscope.methods.batching import batch_reply_budget
    from halluscope.methods.dove.stages import CHECK_REPLY_TOKENS
    from halluscope.stages.verifiers import reply_budget

    budgets: list[int | None] = []

    class Recording(FakeModel):
        async def generate(self, messages, params):
            if reply_type(params) == "DoveBatchReply":
                budgets.append(params.max_tokens)
            return await super().generate(messages, params)

    # a client cap below three facts' worth of reply: the batch must still get each fact's single-call room
    llm = LLM(Recording(by_reply=SCRIPT), cache=None, default_params=GenerateParams(max_tokens=300))
    Dove(llm=llm, batch_size=3).check(SOURCE, TARGET)
    assert budgets and budgets[0] == batch_reply_budget(llm, CHECK_REPLY_TOKENS, 3, overhead=64)
    assert budgets[0] >= 3 * reply_budget(llm, CHECK_REPLY_TOKENS)  # never less room per fact than alone


async def test_a_placeholder_claim_in_a_batch_is_unscored_even_when_the_batch_reply_judges_it():
    """Claims from another decomposer may be template slots: the batch reply's verdict on one is not used."""
    from halluscope.methods.dove import DoveFactChecker
    from halluscope.records import Claim
    from halluscope.stages import Context

    reply = json.dumps(
        {"results": [{"id": i, "reason": "stated", "evidence": "", "supported": True} for i in (1, 2, 3)]}
    )
    fake = FakeModel(default=reply)
    checker = DoveFactChecker(LLM(fake, cache=None), DoveFactChecker.Options(batch_size=3))
    claims = [Claim(text="The ferry was approved."), Claim(text="<fact>"), Claim(text="The council met.")]
    verdicts = await checker(claims, Context(text=SOURCE), SOURCE)
    assert [v.label for v in verdicts] == ["supported", "unscored", "supported"]
    assert "template placeholder" in verdicts[1].reason and len(fake.requests) == 1
    assert all(len(v.calls) == 1 for v in verdicts)  # the batch call, recorded on each of its units


async def test_sorter_input_order_is_the_decomposition_order_by_default_and_shuffled_as_an_option():
    from halluscope.methods import get_method

    seen: list[list[str]] = []

    def respond(messages):
        seen.append([t for _, t in listing(messages, "events")])
        return _sort_reply(messages)

    paper = get_method("dove", llm=LLM(FakeModel(by_reply={"DoveOrderReply": respond})))
    assert paper.opts.sorter_input == "decomposition"
    await paper.sorter(EVENTS, SOURCE)
    assert seen[-1] == EVENTS  # shown as listed: the paper's sorter input
    shuffled = get_method("dove", llm=LLM(FakeModel(by_reply={"DoveOrderReply": respond})), sorter_input="shuffled")
    await shuffled.sorter(EVENTS, SOURCE)
    assert sorted(seen[-1]) == sorted(EVENTS) and seen[-1] != EVENTS
