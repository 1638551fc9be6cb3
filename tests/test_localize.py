"""localize: description-list and binary parsers, mapping descriptions to spans, styles, the 2-step
control flow (self / method / oracle filters, hint), fuzzing, and one run on the embedded model."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import label_logprobs
from halluscope.methods import OptionsError, get_method
from halluscope.methods.localize import (
    _HINTS as HINTS,
)
from halluscope.methods.localize import (
    BINARY_PROMPT,
    FINAL_MARKER,
    LOCALIZE_PROMPTS,
    Localize,
    description_score,
    parse_binary_verdict,
    parse_final_output,
    parse_localization,
)
from halluscope.records import Example, Report
from halluscope.text import ParseError
from halluscope.text.descriptions import is_none_answer, spans_for_description
from tests.conftest import fake_llm
from tests.garble import garbled_replies
from tests.reply_fuzz import cut, mutations, parse_each, replace, stray, wrap

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets."
TARGET = "Alice founded Acme in 1999. Acme makes rockets and cars."
FOUND = [
    'The text says "in 1999", but the source says 2001.',
    'The text says Acme makes "cars", which the source does not mention.',
]
ANSWER = json.dumps({"inconsistencies": FOUND})
NONE = '{"inconsistencies": []}'
COT = f"Step 1: the year. The source says 2001.\nStep 2: cars are not mentioned.\n{FINAL_MARKER}\n{ANSWER}"
# Replies that state no answer in the declared format: each of these used to be scored (the earlier
# rule: "any non-empty line is a finding"; 25/25 junk replies scored).
JUNK = [
    "Sure! I can help with that.",
    'A. The text says "in 1999", but the source says 2001.',
    "1. one\n2) two\n- three",
    "Here are the inconsistencies:\n\nA.\nDescription: The year is wrong.",
    "None",
    "No inconsistencies found.",
    '["one", "two"]',
    "[]",
    '{"inconsistencies": "none found"}',
    '{"inconsistencies": ["<description>"]}',
    '{"inconsistencies": ["...", "N/A"]}',
    '{"inconsistencies": ["None", "The year is wrong."]}',
    '{"items": ["The year is wrong."]}',
    '{"inconsistencies": [1, 2]}',
    '{"inconsistencies": ["The year',
    "I cannot help with that.",
    "{}",
    "null",
    "Final Output: the summary is fine",
    "Everything looks consistent to me.",
    '{"inconsistencies": ["The text says the bridge opened \\"in 1990\\", but the source says it opened in 1992."]}',
]


# ---------------------------------------------------------------------------------------------- parsers


def test_parse_the_declared_list():
    assert parse_localization(ANSWER) == FOUND
    assert parse_localization(NONE) == []  # the explicit "no inconsistency" answer
    assert parse_localization('{"inconsistencies": ["None"]}') == []  # "None" stated inside the list
    assert parse_localization('Here:\n```json\n{"inconsistencies": ["  a   b "]}\n```') == ["a b"]


def test_parse_drops_echoed_placeholders_beside_real_descriptions():
    assert parse_localization('{"inconsistencies": ["<description>", "The year is wrong."]}') == ["The year is wrong."]


# Verbatim replies of the embedded SmolLM2-135M model to the zero-shot prompt (cat/dog pair): the schema's
# example with its two years swapped, then a fragment.
EXAMPLE_COPY = (
    '{\n  "inconsistencies": ["The text says the bridge opened in 1992, but the source says it opened in 1990."]\n}\n'
)


def test_copies_of_the_prompt_examples_are_no_answer():
    with pytest.raises(ParseError, match="example"):
        parse_localization(EXAMPLE_COPY, target="The dog sat on the mat.")
    few_shot_copy = json.dumps(
        {"inconsistencies": ['The text gives the cost as "4m-pound", but the source says the work costs 2.5m pounds.']}
    )
    with pytest.raises(ParseError, match="example"):
        parse_final_output(f"{FINAL_MARKER}\n{few_shot_copy}", target=TARGET)
    # ... unless the description points at words of the target: then it is about this target
    bridge = "The bridge opened in 1992 after a long delay."
    assert parse_localization(EXAMPLE_COPY, target=bridge) == [
        "The text says the bridge opened in 1992, but the source says it opened in 1990."
    ]
    mixed = json.dumps({"inconsistencies": [json.loads(EXAMPLE_COPY)["inconsistencies"][0], FOUND[0]]})
    assert parse_localization(mixed, target=TARGET) == [FOUND[0]]


@pytest.mark.parametrize("reply", JUNK)
def test_parse_refuses_replies_that_are_not_the_declared_format(reply):
    with pytest.raises(ParseError):
        parse_localization(reply)
    with pytest.raises(ParseError):
        parse_final_output(reply)


@pytest.mark.parametrize(
    "reply",
    [
        "None",
        "None.",
        "**None**",
        "No inconsistencies found.",
        "There are no factual inconsistencies in the summary.",
        "N/A",
    ],
)
def test_none_phrases(reply):
    assert is_none_answer(reply)
    assert parse_localization(json.dumps({"inconsistencies": [reply]})) == []


def test_parse_after_marker_uses_the_last_marker_line():
    assert parse_final_output(COT) == FOUND
    reply = f"I will give the {FINAL_MARKER} at the end.\n**{FINAL_MARKER}**\n```json\n{NONE}\n```"
    assert parse_final_output(reply) == []
    for bad in (
        ANSWER,  # no marker
        f"{FINAL_MARKER}   ",  # nothing after it
        f"{FINAL_MARKER}\nA. The year is wrong.",  # a lettered list is not the declared format
        f"{FINAL_MARKER}\nNone",
        f"{FINAL_MARKER} the text is fine {NONE}",  # prose before the object
        f'{FINAL_MARKER}\n{{"inconsistencies": ["The year',
    ):  # cut off
        with pytest.raises(ParseError):
            parse_final_output(bad)


# A verbatim reply of the embedded SmolLM2-135M model to the CoT prompt (160-token cap): no marker, a runaway list.
REAL_COT_REPLY = (
    "\n".join(
        f"{i}. The text is about a former Rangers owner and ex-chief executive {name}."
        for i, name in enumerate(
            [
                "Charles Green",
                "Craig Whyte",
                "Craig Green",
                "Craig Whyte",
                "Charles Green",
                "Craig Whyte",
                "Craig Green",
            ],
            1,
        )
    )
    + "\n8. The text is about a former Rangers owner and ex-chief executive Craig"
)


def test_real_embedded_reply_is_no_answer():
    with pytest.raises(ParseError, match="Final Output"):
        parse_final_output(REAL_COT_REPLY)
    with pytest.raises(ParseError):  # it used to read as a zero-shot list of 8 findings
        parse_localization(REAL_COT_REPLY)


def test_parse_binary_verdict():
    assert parse_binary_verdict("It matches.\nFinal answer: yes") is True
    assert parse_binary_verdict("Reasoning.\n**Final answer:** no.") is False
    for bad in (
        "",
        "no",
        "Maybe.",
        "The answer is unclear",
        "The reason step is to conclude the answer.",
        # a verdict in words used to count; it is not the declared last line
        "The text is consistent with the source documents it is based on.",
        "Let me see.\nThe summary is not consistent with the source.",
        "Final answer: yes\nbut I am not sure",
        "Final answer: not no",
        "Final answer: yes or no",
        # two verdicts, the first with text after it on its line: ambiguous, not "the last one wins"
        "Final answer: yes... on reflection\nFinal Answer: **No**",
    ):
        with pytest.raises(ParseError):
            parse_binary_verdict(bad)


LOCALIZE_EDITS = (cut, stray('{}[]",:\n'), wrap("Sure, here you go. "), replace(("inconsistencies", "problems")))


def test_parsers_on_garbled_replies_some_parse_some_fail():
    valid = [ANSWER, NONE, COT, f"Thinking.\n{FINAL_MARKER}\n{NONE}", "Checks.\nFinal answer: no"]
    replies = (
        garbled_replies(1000, seed=7)
        + JUNK
        + [REAL_COT_REPLY]
        + valid
        + mutations(valid, 600 - len(valid), seed=1, edits=LOCALIZE_EDITS)
    )
    for name, parse in (
        ("zero_shot", parse_localization),
        ("cot", parse_final_output),
        ("binary", parse_binary_verdict),
    ):
        parsed, refused = parse_each(parse, replies)
        for reply, value in parsed:
            if name != "binary":  # a finding only from a reply that lists it
                squeezed = "".join(reply.replace('\\"', '"').split())  # syntax repair may have joined lines
                assert all("".join(d.split()) in squeezed for d in value)
            else:
                assert "final answer" in reply.lower()
        assert parsed and refused, name
    for reply in replies:  # never raises, whatever the text
        spans_for_description(reply, TARGET)


# ------------------------------------------------------------------------------------------------ spans


def test_quoted_phrases_are_located():
    spans = spans_for_description("The text says “in 1999” but the source says 2001.", TARGET)
    assert [s.of(TARGET) for s in spans] == ["in 1999"]


def test_quotes_from_the_source_are_not_pinned():
    assert spans_for_description('The source says "in the year two thousand and one".', TARGET) == []


def test_claimed_clause_is_located_without_quotes():
    spans = spans_for_description(
        "The summary states that Acme makes rockets and cars, but cars are not mentioned.", TARGET
    )
    assert [s.of(TARGET) for s in spans] == ["Acme makes rockets and cars"]


def test_description_without_anchor_stays_a_description():
    assert spans_for_description("The company is misidentified.", TARGET) == []


# ------------------------------------------------------------------------------------------------ styles


def test_description_score():
    assert [description_score(n) for n in range(4)] == [1.0, 0.5, pytest.approx(1 / 3), 0.25]


def test_cot_end_to_end_with_spans():
    report = get_method("localize", llm=fake_llm(COT)).check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3) and report.label == "inconsistent"
    assert [[s.of(TARGET) for s in f.target_spans] for f in report.findings] == [["in 1999"], ["cars"]]
    assert report.subscores == {"descriptions": 2.0, "located": 2.0}
    assert FINAL_MARKER in report.calls[0].messages[-1]["content"]


@pytest.mark.parametrize("style", ["zero_shot", "few_shot"])
def test_json_styles_end_to_end(style):
    report = get_method("localize", llm=fake_llm(ANSWER), style=style).check(SOURCE, TARGET)
    assert report.score == pytest.approx(1 / 3) and [f.description for f in report.findings] == FOUND
    assert '"inconsistencies"' in report.calls[0].messages[-1]["content"]


def test_empty_list_scores_one():
    report = get_method("localize", llm=fake_llm(NONE), style="zero_shot").check(SOURCE, TARGET)
    assert report.score == 1.0 and report.label == "consistent" and report.findings == []


@pytest.mark.parametrize("style", ["zero_shot", "few_shot", "cot"])
@pytest.mark.parametrize("junk", JUNK)
def test_junk_replies_are_unscored_with_no_finding(style, junk):
    report = get_method("localize", llm=fake_llm(junk, junk), style=style).check(SOURCE, TARGET)
    assert report.score is None and "localization reply unusable" in report.unscored_reason
    assert report.findings == [] and [c.reply for c in report.calls] == [junk, junk]


def _user(style: str, hint: bool = False, variant: int = 1) -> str:
    return LOCALIZE_PROMPTS[(style, hint, variant)].render(source="S", target="T")[-1]["content"]


@pytest.mark.parametrize("variant", [1, 2])
def test_styles_render_distinct_prompts(variant):
    few, zero, cot = (_user(style, variant=variant) for style in ("few_shot", "zero_shot", "cot"))
    assert "Example 3" in few and "Example 1" not in zero
    assert '{"inconsistencies": []}' in few  # the worked examples answer in the declared format
    assert "empty list" in zero and FINAL_MARKER not in zero and "$" not in few
    assert FINAL_MARKER in cot and '"inconsistencies"' in cot and "nothing before or after" not in cot
    for style in ("zero_shot", "few_shot", "cot"):  # hinted: the statement first, no "none" rule in the task
        hinted = _user(style, hint=True, variant=variant)
        assert hinted.startswith(HINTS[variant]) and "empty list" not in hinted
        assert "the words of the TEXT" in hinted  # descriptions quote the target in every wording


def test_the_two_variants_carry_the_papers_differences():
    # zero-shot: v1 defines an inconsistency as unverifiable only; v2 adds "contradicts" and states the none rule first
    z1, z2 = _user("zero_shot"), _user("zero_shot", variant=2)
    assert "cannot be verified" in z1 and "contradicts" not in z1.split("SOURCE:")[0]
    assert "contradicts or that cannot be verified" in z2
    assert z2.index("empty list") < z2.index("A factual inconsistency")
    assert z1.index("empty list") > z1.index("A factual inconsistency")
    # few-shot: v2 is a structured brief naming the kinds of detail and numbered rules
    f1, f2 = _user("few_shot"), _user("few_shot", variant=2)
    assert "Rules:\n1." in f2 and "name, place, number, event" in f2 and "Rules:" not in f1
    assert "INCONSISTENCIES:" in f2 and "ANSWER:" in f1
    # CoT: v1 is one instruction and no "none" rule in its task; v2 numbered steps, contradicted / not verifiable
    c1, c2 = _user("cot"), _user("cot", variant=2)
    assert "1. Read the TEXT" in c2 and "contradicted" in c2 and "not verifiable" in c2
    assert "1. Read the TEXT" not in c1 and "If you found no factual inconsistency" not in c1
    assert "If you found no factual inconsistency" in c2
    assert len({p.ref() for p in LOCALIZE_PROMPTS.values()}) == len(LOCALIZE_PROMPTS) == 12


@pytest.mark.parametrize("variant", [1, 2])
def test_variant_option_picks_the_prompt(variant):
    model = FakeModel([COT])
    report = Localize(llm=LLM(model), variant=variant).check(SOURCE, TARGET)
    assert (
        model.requests[0][-1]["content"]
        == LOCALIZE_PROMPTS[("cot", False, variant)].render(source=SOURCE, target=TARGET)[-1]["content"]
    )
    assert report.details["prompt_variant"] == variant and "prompt_variant_note" not in report.details
    assert Localize(llm=fake_llm(), variant=str(variant)).opts.variant == variant  # -o variant=2 from the CLI


def test_auto_variant_in_a_single_check_uses_variant_one_and_says_so():
    method = Localize(llm=fake_llm(COT))
    assert method.opts.variant == "auto" and method.variant == 1
    assert method.prompt_version.startswith("localize_cot@3#")
    report = method.check(SOURCE, TARGET)
    assert report.details["prompt_variant"] == 1 and "bench" in report.details["prompt_variant_note"]


def test_missing_marker_gets_one_repair_then_unscored():
    llm = fake_llm(ANSWER, "still no marker")
    report = get_method("localize", llm=llm, style="cot").check(SOURCE, TARGET)
    assert report.score is None and FINAL_MARKER in report.unscored_reason
    assert [c.reply for c in report.calls] == [ANSWER, "still no marker"]
    assert FINAL_MARKER in report.calls[1].messages[-1]["content"]  # the repair request restates the format


def test_repair_round_recovers():
    report = get_method("localize", llm=fake_llm("A. The year is wrong.", COT), style="cot").check(SOURCE, TARGET)
    assert len(report.findings) == 2 and len(report.calls) == 2


# ---------------------------------------------------------------------------------------------- 2-step


def test_self_filter_consistent_skips_localization():
    llm = fake_llm("All details match.\nFinal answer: yes")
    report = get_method("localize", llm=llm, filter="self").check(SOURCE, TARGET)
    assert report.score == 1.0 and report.usage.calls == 1 and len(report.calls) == 1
    assert report.details["filter"] == {"kind": "self", "consistent": True}
    assert report.details["localized"] is False


@pytest.mark.parametrize("hint", [False, True])
def test_self_filter_inconsistent_then_localizes(hint):
    model = FakeModel(["The year differs.\nFinal answer: no", COT])
    report = Localize(llm=LLM(model), filter="self", hint=hint).check(SOURCE, TARGET)
    assert report.usage.calls == 2 and len(report.findings) == 2 and len(report.calls) == 2
    second = model.requests[1][-1]["content"]
    assert second.startswith(HINTS[1]) is hint
    assert report.details["filter"]["consistent"] is False and report.details["localized"] is True


def test_hinted_localizer_may_still_find_nothing():
    report = Localize(llm=fake_llm("Final answer: no", f"{FINAL_MARKER}\n{NONE}"), filter="self", hint=True).check(
        SOURCE, TARGET
    )
    assert report.score == 1.0 and report.findings == []


@pytest.mark.parametrize("reply", ["hmm", "The text is not consistent with the source.", "no"])
def test_self_filter_without_the_declared_answer_is_unscored(reply):
    report = get_method("localize", llm=fake_llm(reply, reply), filter="self").check(SOURCE, TARGET)
    assert report.score is None and "filter failed" in report.unscored_reason
    assert len(report.calls) == 2 and report.findings == []


def test_method_filter_uses_its_threshold():
    # rouge needs no LLM; its precision here is high, so with a low threshold the target passes the filter
    passed = get_method("localize", llm=fake_llm(), filter="rouge", filter_threshold=0.1).check(SOURCE, TARGET)
    assert passed.score == 1.0 and passed.details["filter"]["method"] == "rouge"
    assert passed.usage.calls == 0
    flagged = get_method("localize", llm=fake_llm(COT), filter="rouge", filter_threshold=0.99).check(SOURCE, TARGET)
    assert flagged.details["filter"]["consistent"] is False and len(flagged.findings) == 2


def test_method_filter_with_an_llm_method_counts_its_calls():
    llm = fake_llm('{"reason": "wrong year", "score": 2}', COT)
    report = get_method("localize", llm=llm, filter="geval").check(SOURCE, TARGET)
    assert report.usage.calls == 2 and len(report.calls) == 2
    assert report.details["filter"]["score"] == 0.25


def test_oracle_filter_uses_gold_labels_in_the_harness():
    method = Localize(llm=fake_llm(COT), filter="oracle", hint=True)
    consistent = Example(id="a", source=SOURCE, target=TARGET, label=1)
    inconsistent = Example(id="b", source=SOURCE, target=TARGET, descriptions=["wrong year"])

    first = asyncio.run(method.acheck_example(consistent))
    assert first.score == 1.0 and first.usage.calls == 0
    second = asyncio.run(method.acheck_example(inconsistent))
    assert second.usage.calls == 1 and second.details["filter"] == {"kind": "oracle", "consistent": False}
    assert second.calls[0].messages[-1]["content"].startswith(HINTS[1])
    unlabeled = asyncio.run(method.acheck_example(Example(id="c", source=SOURCE, target=TARGET)))
    assert unlabeled.score is None and "no gold label" in unlabeled.unscored_reason


def test_oracle_filter_outside_the_harness_is_unscored():
    report = Localize(llm=fake_llm(), filter="oracle").check(SOURCE, TARGET)
    assert report.score is None and "labelled examples" in report.unscored_reason


def test_option_validation():
    for bad in (
        {"hint": True},
        {"style": "tree_of_thought"},
        {"filter": "no_such_method"},
        {"filter": "localize"},
        {"nonsense": 1},
    ):
        with pytest.raises(OptionsError):
            Localize(llm=fake_llm(), **bad)
    assert Localize(llm=fake_llm(), filter="none").opts.filter is None
    version = Localize(llm=fake_llm(), filter="self").prompt_version
    assert version.startswith("localize_cot@3#") and ",localize_binary_filter@2#" in version
    assert Localize(llm=fake_llm(), variant=2, style="few_shot").prompt_version.startswith("localize_few_shot_v2@1#")
    for bad in ({"variant": 3}, {"variant": "best"}):
        with pytest.raises(OptionsError):
            Localize(llm=fake_llm(), **bad)
    docs = {row["name"]: row["doc"] for row in Localize.Options.option_rows()}
    assert {"style", "filter", "hint", "filter_threshold", "filter_options", "score", "variant"} == set(docs)
    assert all(docs.values())


# ---------------------------------------------------------------------------------------------- fuzzing


@pytest.mark.parametrize(
    "options", [{"style": "zero_shot"}, {"style": "few_shot"}, {"style": "cot"}, {"filter": "self", "hint": True}]
)
def test_garbled_replies_some_scored_some_not_and_no_finding_without_one(options):
    rng = random.Random(13)
    garbage = garbled_replies(1000, seed=13) + JUNK + [REAL_COT_REPLY]
    cot = options.get("style", "cot") == "cot"
    valid = [COT, f"Reasoning.\n{FINAL_MARKER}\n{NONE}"] if cot else [ANSWER, NONE]

    # the self filter and the cot localization both ask for free text about the same data: a filter request is
    # told by the template that made it (its user message as rendered), not by its wording
    filter_request = BINARY_PROMPT.render(source=SOURCE, target=TARGET)[-1]["content"]

    def reply(messages):
        if rng.random() < 0.5:
            return rng.choice(garbage)
        if next(m["content"] for m in messages if m["role"] == "user") == filter_request:
            return rng.choice(["Checked.\nFinal answer: no", "Checked.\nFinal answer: yes"])
        return rng.choice(valid)

    method = Localize(llm=LLM(FakeModel(by_reply={"LocalizationReply": reply, "text": reply}), cache=None), **options)
    outcomes = {"scored": 0, "unscored": 0}
    for _ in range(60):
        report = method.check(SOURCE, TARGET)
        assert isinstance(report, Report)
        outcomes["scored" if report.score is not None else "unscored"] += 1
        if report.score is None:
            assert report.findings == []
            continue
        if report.details.get("localized"):
            deciding = report.calls[-1].reply  # every finding comes from the reply that was accepted
            assert deciding in valid
            parse = parse_final_output if cot else parse_localization
            assert [f.description for f in report.findings] == parse(deciding)
        else:
            assert report.findings == [] and report.calls[-1].reply.endswith("Final answer: yes")
        for f in report.findings:
            assert all(0 <= s.start <= s.end <= len(TARGET) for s in f.target_spans)
    assert outcomes["scored"] > 0 and outcomes["unscored"] > 0


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_localize_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("localize", config=config, style="zero_shot").check(
        "The cat sat on the mat.", "The dog sat on the mat."
    )
    assert report.usage.calls >= 1
    if report.score is not None:
        assert report.score == description_score(len(report.findings))


# -- the 2-step filter's probability ---------------------------------------------------------------------------------


def filter_model(*replies: str, p_yes: float) -> FakeModel:
    """Replies in order; a yes/no in the filter's reasoning is certain, its final answer has P(yes) = ``p_yes``."""
    return FakeModel(
        list(replies), logprobs=label_logprobs([{"yes": 0.99, "no": 0.01}, {"yes": p_yes, "no": 1 - p_yes}])
    )


def test_self_filter_records_p_consistent_and_scores_with_it():
    model = filter_model("Is the year right? yes.\nFinal answer: yes", p_yes=0.7)
    report = get_method("localize", llm=LLM(model), filter="self").check(SOURCE, TARGET)
    assert model.params[0].top_logprobs  # the filter asks for the candidates
    assert report.details["filter"] == {"kind": "self", "consistent": True, "p_consistent": pytest.approx(0.7)}
    assert report.score == pytest.approx(0.7) and report.threshold == 0.5 and report.label == "consistent"
    assert report.details["score"]["kind"] == "probability" and report.subscores["label_score"] == 1.0


def test_self_filter_no_localizes_and_the_probability_is_the_score():
    model = filter_model("Is the year right? yes.\nFinal answer: no", COT, p_yes=0.2)
    report = get_method("localize", llm=LLM(model), filter="self").check(SOURCE, TARGET)
    assert len(report.findings) == 2 and report.score == pytest.approx(0.2) and report.label == "inconsistent"
    assert report.details["score"]["label_score"] == pytest.approx(1 / 3)
    # score=label: the descriptions' 1/(1+n) at the method's own threshold, from the same replies
    model = filter_model("Is the year right? yes.\nFinal answer: no", COT, p_yes=0.2)
    label = get_method("localize", llm=LLM(model), filter="self", score="label").check(SOURCE, TARGET)
    assert label.score == pytest.approx(1 / 3) and label.threshold == 0.75 and label.details["score"]["kind"] == "label"
    assert get_method("localize", llm=LLM(model), filter="self", score="label").options()["score"] == "label"
    assert "score" not in get_method("localize", llm=LLM(model), filter="self").options()


def test_no_probability_is_invented_for_localize():
    # no filter: no label is read, the score stays 1/(1+n) and says why
    plain = get_method("localize", llm=fake_llm(COT)).check(SOURCE, TARGET)
    assert plain.score == pytest.approx(1 / 3) and "no label is read" in plain.details["score"]["why"]
    # a backend without log-probabilities: the label score, or unscored when the probability was required
    report = get_method("localize", llm=fake_llm("Final answer: yes"), filter="self").check(SOURCE, TARGET)
    assert report.score == 1.0 and "no token log-probabilities" in report.details["score"]["why"]
    strict = get_method("localize", llm=fake_llm("Final answer: yes"), filter="self", score="probability")
    report = strict.check(SOURCE, TARGET)
    assert report.score is None and report.unscored_reason.startswith("score=probability, but")
