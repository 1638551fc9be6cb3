"""DCR: AMC arithmetic (DCR paper App. I), strict DCE/AMC parsers, the method end to end with the fake model,
long-source switching (the shared retrieval protocol), a swapped verifier, fuzzing with garbled replies, and
one run on the embedded model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from halluscope.llm import LLM, ContextOverflowError, FakeModel
from halluscope.methods import OptionsError, get_method
from halluscope.methods.dcr import DCR, amc_score, parse_amc, parse_dce_sentences, parse_dce_single
from halluscope.records import Report, Verdict
from halluscope.stages import register_stage
from halluscope.text import ParseError
from halluscope.text.verdict_words import verdict_mark
from tests.conftest import fake_llm
from tests.garble import garbled_replies
from tests.prompt_data import fenced
from tests.reply_fuzz import mutations, parse_each

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets. Bob joined Acme in 2005."
TARGET = "Alice founded Acme in 1999. Acme makes rockets. It is based in Paris."


def dce(*items, is_consistent=False) -> str:
    return json.dumps({"sentences": [{"id": i, "reason": r} for i, r in items], "is_consistent": is_consistent})


def marks(*values) -> str:
    return json.dumps({"marks": list(values)})


# ------------------------------------------------------------------------------------------ arithmetic


def test_amc_appendix_i_example():
    # reasons: ["The two paragraphs are not consistent.", "This sentence is consistent.", "...not consistent."]
    result = amc_score([-1, 1, -1], [False, True, True])
    assert result.alpha == 1.0 and result.beta == -1.0
    assert result.z == 0.0
    assert result.score == 0.5
    assert result.k == 3


def test_amc_all_sentence_level_is_the_mean_mark():
    result = amc_score([1, 1, -1], [True, True, True])
    assert (result.alpha, result.beta) == (0.0, 0.0)
    assert result.z == pytest.approx(1 / 3)
    assert result.score == pytest.approx(2 / 3)


def test_amc_positive_paragraph_reason_is_removed_too():
    result = amc_score([1, -1, -1], [False, True, True])
    assert (result.alpha, result.beta) == (-1.0, -1.0)
    assert result.z == -1.0 and result.score == 0.0


def test_amc_edge_cases_have_no_score():
    assert amc_score([], []).score is None  # no sentences
    only_paragraph = amc_score([-1, 1], [False, False])
    assert only_paragraph.z is None and only_paragraph.score is None
    assert (only_paragraph.alpha, only_paragraph.beta) == (0.0, -2.0)


def test_amc_rejects_bad_input():
    with pytest.raises(ValueError):
        amc_score([1, -1], [True])
    with pytest.raises(ValueError):
        amc_score([0], [True])


# --------------------------------------------------------------------------------------------- parsers


def test_parse_dce_sentences_ids_and_reasons_about_the_whole_text():
    reply = json.dumps(
        {
            "sentences": [
                {"id": None, "reason": "The two paragraphs are not consistent."},
                {"id": 1, "reason": "Inconsistent: 2001, not 1999."},
                {"id": 2, "reason": "Consistent: stated."},
                {"id": 2, "reason": "Consistent: said twice."},
            ],
            "is_consistent": False,
        }
    )
    parsed = parse_dce_sentences(reply, 3)
    assert [r.unit for r in parsed.reasons] == [None, 0, 1, 1]
    assert parsed.is_consistent is False


def test_parse_dce_sentences_fenced_reply_with_prose():
    reply = "Here is the evaluation:\n```json\n" + dce((1, "Inconsistent: x"), (2, "Consistent: y")) + "\n```"
    assert [r.text for r in parse_dce_sentences(reply, 3).reasons] == ["Inconsistent: x", "Consistent: y"]


def test_parse_dce_sentences_drops_placeholder_reasons():
    reply = dce((1, "Inconsistent: wrong year."), (2, "..."), (3, "<why this sentence is or is not consistent>"))
    assert [(r.unit, r.text) for r in parse_dce_sentences(reply, 3).reasons] == [(0, "Inconsistent: wrong year.")]


# Each of these used to be read (positionally, by quoted sentence text, under another key, from a string id or
# a nested object); now only the declared schema is a DCE reply.
@pytest.mark.parametrize(
    "reply, why",
    [
        ("", "empty"),
        ("no json here", "no JSON"),
        ('{"sentences": [], "is_consistent": true}', "no reason"),
        ('{"sentences": [{"id": 1}], "is_consistent": true}', "reason"),
        ('["Consistent: a", "Consistent: b", "Inconsistent: c"]', "no JSON object"),
        ('{"sentences": [{"id": 1, "reason": "Consistent: a"}]}', "is_consistent"),
        ('{"sentences": [{"id": 1, "reason": "Consistent: a"}], "is_consistent": "false"}', "is_consistent"),
        ('{"sentences": [{"id": "[1]", "reason": "Consistent: a"}], "is_consistent": true}', "id"),
        (
            '{"sentences": [{"sentence": "Acme makes rockets.", "reason": "Consistent: a"}], "is_consistent": true}',
            "id",
        ),
        ('{"sentences": [{"id": 7, "reason": "Consistent: a"}], "is_consistent": true}', "sentence 7"),
        ('{"sentences": [{"id": 0, "reason": "Consistent: a"}], "is_consistent": true}', "sentence 0"),
        ('{"sentences": [{"id": true, "reason": "Consistent: a"}], "is_consistent": true}', "id"),
        ('{"sentences": [{"id": 1, "reason": {"reason": "Consistent: a"}}], "is_consistent": true}', "reason"),
        ('{"reasons": ["Consistent: a", "Consistent: b", "Consistent: c"], "is_consistent": true}', "sentences"),
        (
            '{"sentences": [{"id": 1, "reason": "N/A"}, {"id": 2, "reason": "<why>"}], "is_consistent": true}',
            "placeholder",
        ),
        ('{"sentences": [{"id": 1, "reason": "Consistent: a"}, {"id": 2, "reason": "Consis', "cut off"),
    ],
)
def test_parse_dce_sentences_rejects_what_is_not_the_declared_reply(reply, why):
    with pytest.raises(ParseError, match=why):
        parse_dce_sentences(reply, 3)


def test_parse_dce_single_is_strict():
    parsed = parse_dce_single('{"reason": "Consistent: ok", "is_consistent": true}')
    assert [(r.unit, r.text) for r in parsed.reasons] == [(0, "Consistent: ok")] and parsed.is_consistent is True
    for bad in (
        '{"is_consistent": true}',
        '{"reason": "Consistent: ok"}',
        '{"reason": "", "is_consistent": true}',
        '{"reason": "Consistent: ok", "is_consistent": "yes"}',
        '{"reason": "N/A", "is_consistent": true}',
        # the paper's nesting {"reason": {"sentence": ..., "reason": ...}}: not a reason string
        '{"reason": {"sentence": "x", "reason": "Inconsistent: y"}, "is_consistent": false}',
    ):
        with pytest.raises(ParseError):
            parse_dce_single(bad)


def test_parse_amc_accepts_exactly_marks_with_one_integer_per_reason():
    assert parse_amc('{"marks": [1, -1, 1, -1]}', 4) == [1, -1, 1, -1]
    assert parse_amc('```json\n{"marks": [-1]}\n```', 1) == [-1]
    for bad in (
        '{"marks": [1, -1]}',
        '{"marks": [1, -1, 1, 1]}',  # not exactly 3
        '{"marks": [1, 0, 1]}',
        '{"marks": [true, 1, 1]}',
        '{"marks": [1.0, 1, 1]}',
        '{"marks": ["+1", "-1", "1"]}',
        '{"marks": ["positive", "negative", "consistent"]}',
        '{"answer": [-1, 1, 1]}',
        '{"scores": [1, 1, 1]}',  # any list under another key (used to be read)
        '{"reason": ["..."], "marks": [-1, 1, 1]}',  # anything beside the marks
        "[1, -1, 1]",  # a bare list (used to be read)
        '{"marks": "1, -1, 1"}',
        '{"marks": [1, -1, 1',
        "nothing",
    ):
        with pytest.raises(ParseError):
            parse_amc(bad, 3)


@pytest.mark.parametrize(
    "reason, mark",
    [
        ("Inconsistent: the source says 2001.", -1),
        ("This sentence is not consistent with the article.", -1),
        ("Consistent: stated in the source.", 1),
        ("This sentence is consistent with the article.", 1),
        ("**Verdict: inconsistent** - wrong year", -1),
        ("1. The source does not support the source, so the sentence is inconsistent.", -1),
        ("The source supports the text, and the source is consistent with the text.", 1),
        ("The article does not mention the date. Otherwise it is consistent.", -1),
        ("The year is not consistent with the article", -1),
    ],
)
def test_verdict_mark(reason, mark):
    assert verdict_mark(reason) == mark


@pytest.mark.parametrize("reason", ["The article mentions Paris.", "1.1.1.1.1.1.1.1.", "Paris. It is consistent."])
def test_verdict_mark_refuses_to_guess(reason):
    with pytest.raises(ParseError):
        verdict_mark(reason)


# Verbatim replies of the embedded SmolLM2-135M model captured during benchmark runs (json_mode on, 160-token cap).
REAL_DCE_TRUNCATED = '{"sentences": [{"id": 1, "reason": "' + "1." * 71
REAL_DCE_BROKEN = (
    '{\n"sentences": [{"id": 1, "reason": "The sentence is consistent with the source\'s consistent message, so it '
    'is a consistent sentence.", "text": "The sentence is consistent with the source\'s consistent message, so it is '
    'a consistent sentence.", "is_consistent": false},\n"sentences[2]: The sentence is inconsistent with the '
    'source\'s inconsistent message, so it is inconsistent with the source\'s inconsistent message.", "text: "\n,'
    '"is_consistent: false"\n,"is_consistent_message_is_a_consistent_message_is_a_consistent_message_is'
)
REAL_AMC_RUNAWAY = '{"marks": [' + "1, " * 52


def test_real_embedded_replies_are_unusable():
    # all three used to give reasons or marks; none states a complete verdict
    with pytest.raises(ParseError, match="cut off"):
        parse_dce_sentences(REAL_DCE_TRUNCATED, 1)
    with pytest.raises(ParseError):
        parse_dce_sentences(REAL_DCE_BROKEN, 3)
    with pytest.raises(ParseError):
        parse_amc(REAL_AMC_RUNAWAY, 1)
    with pytest.raises(ParseError):  # "1.1.1..." carries no verdict: unscored, not guessed
        verdict_mark("1." * 71)


VALID_REPLIES = [
    dce((1, "Inconsistent: 2001, not 1999."), (2, "Consistent: stated."), (3, "Consistent: Paris.")),
    json.dumps(
        {
            "sentences": [{"id": None, "reason": "Not consistent overall."}, {"id": 2, "reason": "Consistent."}],
            "is_consistent": False,
        }
    ),
    json.dumps({"reason": "Inconsistent: the year is wrong.", "is_consistent": False}),
    json.dumps({"reason": "Consistent: all stated.", "is_consistent": True}),
    marks(1, -1, 1),
    marks(-1),
    marks(1, 1, 1),
]


FUZZ = garbled_replies(1000) + VALID_REPLIES + mutations(VALID_REPLIES, 400)


@pytest.mark.parametrize("name", ["dce_sentences", "dce_single", "amc_1", "amc_3", "verdict_mark"])
def test_parsers_on_garbled_replies_some_parse_some_fail(name):
    parse = {
        "dce_sentences": lambda t: parse_dce_sentences(t, 3),
        "dce_single": parse_dce_single,
        "amc_1": lambda t: parse_amc(t, 1),
        "amc_3": lambda t: parse_amc(t, 3),
        "verdict_mark": verdict_mark,
    }[name]
    parsed, refused = parse_each(parse, FUZZ)
    assert parsed and refused


# ------------------------------------------------------------------------------------------ the method


def test_dcr_end_to_end_sentence_level():
    llm = fake_llm(
        dce(
            (1, "Inconsistent: the source says 2001, not 1999."),
            (2, "Consistent: stated."),
            (3, "Consistent: Paris is stated."),
        ),
        marks(-1, 1, 1),
    )
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score == pytest.approx(2 / 3)
    assert report.label == "inconsistent"  # threshold 1.0: any flagged sentence
    assert report.subscores["Z"] == pytest.approx(1 / 3)
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "supported"]
    assert len(report.findings) == 1
    finding = report.findings[0]
    assert finding.target_spans[0].of(TARGET) == "Alice founded Acme in 1999."
    assert "2001" in finding.description and finding.claim_ids == ["s1"]
    assert report.usage.calls == 2 and len(report.calls) == 2
    assert "Alice founded Acme in 1999." in report.calls[0].messages[-1]["content"]
    assert "[3] It is based in Paris." in report.calls[0].messages[-1]["content"]
    assert report.details["context"]["mode"] == "full" and report.details["dce_is_consistent"] is False
    assert report.details["stages"] == {"decomposer": "sentences", "context_selector": "retrieval", "verifier": "dcr"}


APPENDIX_I_REPLY = json.dumps(
    {
        "sentences": [
            {"id": None, "reason": "The two paragraphs are not consistent."},
            {"id": 1, "reason": "This sentence is consistent."},
            {"id": 2, "reason": "This sentence is not consistent."},
        ],
        "is_consistent": False,
    }
)


def test_dcr_default_is_the_papers_alpha_beta_zero_over_every_mark():
    # DCR paper §4 ("we set both alpha and beta in Eq. (3) to 0"): every mark AMC gives counts, k = 3
    report = get_method("dcr", llm=fake_llm(APPENDIX_I_REPLY, marks(-1, 1, -1))).check(
        SOURCE, "Alice founded Acme. Acme makes cars."
    )
    assert DCR.Options().amc_weights == "paper" and report.details["amc_weights"] == "paper"
    assert (report.subscores["alpha"], report.subscores["beta"], report.subscores["k"]) == (0.0, 0.0, 3.0)
    assert report.subscores["Z"] == pytest.approx(-1 / 3) and report.score == pytest.approx(1 / 3)
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]


def test_dcr_appendix_i_case_end_to_end():
    # amc_weights=auto: App. I's example, the reason about the whole text is taken out (alpha = 1, beta = -1)
    target = "Alice founded Acme. Acme makes cars."
    report = get_method("dcr", llm=fake_llm(APPENDIX_I_REPLY, marks(-1, 1, -1)), amc_weights="auto").check(
        SOURCE, target
    )
    assert report.subscores["alpha"] == 1.0 and report.subscores["beta"] == -1.0
    assert report.score == 0.5 and report.details["amc_weights"] == "auto"
    assert report.details["other_reasons"] == [
        {"reason": "The two paragraphs are not consistent.", "mark": -1, "sentence": None}
    ]


def test_dcr_keeps_the_negative_of_two_reasons_for_one_sentence():
    reply = dce((1, "Consistent: fine."), (1, "Inconsistent: but the year is wrong."), (2, "Consistent: ok"))
    target = "Acme was founded in 1999. It makes rockets."
    report = get_method("dcr", llm=fake_llm(reply, marks(1, -1, 1)), amc_weights="auto").check(SOURCE, target)
    assert [v.label for v in report.verdicts] == ["unsupported", "supported"]
    assert report.score == 0.5
    assert (report.subscores["alpha"], report.subscores["beta"]) == (-1.0, -1.0)
    assert report.details["other_reasons"] == [{"reason": "Consistent: fine.", "mark": 1, "sentence": 1}]
    # the paper's weights count all three marks: Z = (1 - 1 + 1) / 3
    paper = get_method("dcr", llm=fake_llm(reply, marks(1, -1, 1))).check(SOURCE, target)
    assert [v.label for v in paper.verdicts] == ["unsupported", "supported"]
    assert paper.score == pytest.approx(2 / 3) and (paper.subscores["alpha"], paper.subscores["beta"]) == (0.0, 0.0)


def test_dcr_only_reasons_about_the_whole_text_is_unscored():
    reply = json.dumps(
        {"sentences": [{"id": None, "reason": "The summary is not consistent overall."}], "is_consistent": False}
    )
    for weights in ("paper", "auto"):
        report = get_method("dcr", llm=fake_llm(reply, marks(-1)), amc_weights=weights).check(SOURCE, TARGET)
        assert report.score is None
        assert all(v.label == "unscored" for v in report.verdicts)
        if weights == "auto":
            assert "not about a single sentence" in report.unscored_reason
            assert (report.subscores["alpha"], report.subscores["beta"], report.subscores["k"]) == (1.0, -1.0, 1.0)
        else:
            assert "3 of 3 sentences have no mark" in report.unscored_reason and "Z" not in report.subscores


def test_dcr_missing_sentence_is_unscored_not_padded():
    llm = fake_llm(dce((1, "Inconsistent: wrong year"), (2, "Consistent: ok")), marks(-1, 1))
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    # the paper's Z is over all k sentences: a sentence without a mark leaves it undefined (never 0, never +1)
    assert report.score is None and "1 of 3 sentences have no mark (sentence 3" in report.unscored_reason
    assert report.verdicts[2].label == "unscored" and "no reason" in report.verdicts[2].reason
    assert report.subscores["unscored_units"] == 1.0 and report.subscores["judged"] == 2.0
    assert [f.claim_ids for f in report.findings] == [["s1"]]  # the judged sentence's finding stays
    llm = fake_llm(dce((1, "Inconsistent: wrong year"), (2, "Consistent: ok")), marks(-1, 1))
    auto = get_method("dcr", llm=llm, amc_weights="auto").check(SOURCE, TARGET)
    assert auto.score == 0.5  # auto: k shrinks to the judged sentences
    assert auto.subscores["judged"] == 2.0 and auto.subscores["units"] == 3.0


def test_dcr_rule_amc_makes_no_extra_call():
    llm = fake_llm(dce((1, "Inconsistent: wrong year"), (2, "Consistent: ok"), (3, "This sentence is consistent.")))
    report = get_method("dcr", llm=llm, amc="rule").check(SOURCE, TARGET)
    assert report.score == pytest.approx(2 / 3)
    assert report.usage.calls == 1


def test_dcr_rule_amc_reason_without_a_verdict_is_unscored():
    reply = dce((1, "Inconsistent: wrong year"), (2, "Hmm."), (3, "Consistent: ok"))
    report = get_method("dcr", llm=fake_llm(reply), amc="rule", amc_weights="auto").check(SOURCE, TARGET)
    assert report.verdicts[1].label == "unscored" and "verdict" in report.verdicts[1].reason, report.verdicts[1].reason
    assert report.score == 0.5
    paper = get_method("dcr", llm=fake_llm(reply), amc="rule").check(SOURCE, TARGET)
    assert paper.score is None and "sentence 2" in paper.unscored_reason


def test_dcr_amc_failure_keeps_raw_replies_and_is_unscored():
    # the AMC reply that used to be read ({"answer": [...]}, the paper's key) is not the declared schema
    llm = fake_llm(
        dce((1, "Inconsistent: x"), (2, "Consistent: y"), (3, "Consistent: z")),
        json.dumps({"answer": [-1, 1, 1]}),
        marks(1),
    )
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score is None and "AMC failed" in report.unscored_reason
    assert all(v.label == "unscored" and "AMC failed" in v.reason for v in report.verdicts)
    assert [c.reply for c in report.calls][-2:] == [json.dumps({"answer": [-1, 1, 1]}), marks(1)]  # both kept
    assert not report.findings


def test_dcr_dce_repair_round_then_success():
    llm = fake_llm(
        "I think it is fine", dce((1, "Consistent: a"), (2, "Consistent: b"), (3, "Consistent: c")), marks(1, 1, 1)
    )
    report = get_method("dcr", llm=llm).check(SOURCE, TARGET)
    assert report.score == 1.0 and report.label == "consistent"
    assert report.usage.calls == 3


def test_dcr_paragraph_level():
    reply = json.dumps({"reason": "Inconsistent: the year is wrong.", "is_consistent": False})
    report = get_method("dcr", llm=fake_llm(reply, marks(-1)), level="paragraph").check(SOURCE, TARGET)
    assert report.score == 0.0
    assert report.claims[0].kind == "paragraph"
    assert report.findings[0].target_spans[0].of(TARGET) == TARGET.strip()
    prompt = report.calls[0].messages[-1]["content"]
    assert "TEXT:\n<target_" in prompt and TARGET in prompt
    assert report.details["stages"]["decomposer"] == "paragraph"


def test_dcr_options_are_typed():
    for bad in ({"level": "word"}, {"amc": "maybe"}, {"retrieval": True}, {"top_k": 0}):
        with pytest.raises(OptionsError):
            DCR(llm=fake_llm(), **bad)
    with pytest.raises(OptionsError, match="Valid options: .*amc"):  # RAI is the `improve` method
        DCR(llm=fake_llm(), improve=1)
    opts = DCR(llm=fake_llm(), retrieval="always", top_k=3, window=1).options()
    assert (opts["retrieval"], opts["top_k"], opts["window"], opts["amc"]) == ("always", 3, 1, "llm")
    assert "level" not in opts and "decomposer" not in opts  # the paper's level is the decomposer, recorded when given
    assert DCR(llm=fake_llm(), level="paragraph").options()["decomposer"] == "paragraph"
    assert (opts["amc_weights"], opts["batch_size"]) == ("paper", 1)
    for bad in ({"amc_weights": "app_i"}, {"batch_size": 0}):
        with pytest.raises(OptionsError):
            DCR(llm=fake_llm(), **bad)
    assert all(DCR.Options.model_fields[name].description for name in ("amc", "amc_weights", "batch_size"))
    version = DCR(llm=fake_llm()).prompt_version
    assert "dcr_dce_sentence@" in version and "dcr_amc@" in version and "rai_" not in version
    assert "dcr_amc@" not in DCR(llm=fake_llm(), amc="rule").prompt_version


def test_dcr_does_not_import_improve():
    import ast

    import halluscope.methods.dcr as dcr_module

    tree = ast.parse(Path(dcr_module.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any("improve" in (m or "") for m in imported)


# ---------------------------------------------------------------------------------------- long sources


def _judge_excerpt(messages):
    sentence, excerpt = fenced(messages, "sentence"), fenced(messages, "source")
    if "1999" in sentence or "Paris" in sentence and "Paris" not in excerpt:
        return json.dumps({"reason": "Inconsistent: not supported by the excerpt.", "is_consistent": False})
    return json.dumps({"reason": "Consistent: the excerpt says so.", "is_consistent": True})


# keyed by the reply each stage asks for: DCE on one excerpt, then AMC marking the first assessment
EXCERPT_SCRIPT = {
    "DceSingleReply": _judge_excerpt,
    "AmcReply": lambda messages: marks(-1 if fenced(messages, "reasons").startswith("1. Inconsistent") else 1),
}


def test_dcr_retrieval_on_request():
    llm = LLM(FakeModel(by_reply=EXCERPT_SCRIPT))
    report = get_method("dcr", llm=llm, retrieval="always", retriever="bm25", top_k=2, window=0).check(SOURCE, TARGET)
    context = report.details["context"]
    assert context["mode"] == "retrieval" and context["why"] == "requested (retrieval=always)"
    assert context["retriever"] == "bm25"
    assert set(context["snippets"]) == {"s1", "s2", "s3"} and all(
        1 <= len(v) <= 2 for v in context["snippets"].values()
    )
    assert report.verdicts[0].label == "unsupported" and report.verdicts[1].label == "supported"
    supported = report.verdicts[1]
    assert supported.evidence[0].relation == "supports"
    assert supported.evidence[0].span.of(SOURCE) == supported.evidence[0].text
    assert supported.calls  # each one the excerpt DCE about this sentence, or the AMC over the reasons
    assert all(
        fenced(c.messages, "sentence", "") == supported.claim.text or fenced(c.messages, "reasons", "")
        for c in supported.calls
    )
    assert report.usage.calls == sum(len(v.calls) for v in report.verdicts) == len(report.calls)
    assert report.details["other_reasons"] == [] and "dce_is_consistent" not in report.details


def test_dcr_retrieval_options_from_the_cli(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import halluscope.methods.base as method_base
    from halluscope.cli.main import app

    monkeypatch.setattr(method_base, "get_llm", lambda config: LLM(FakeModel(by_reply=EXCERPT_SCRIPT), cache=None))
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
            "dcr",
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
    context = report.details["context"]
    assert context["mode"] == "retrieval" and context["window"] == 1 and context["top_k"] == 3
    assert all(snips for snips in context["snippets"].values())
    bad = CliRunner().invoke(
        app,
        ["check", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--method", "dcr", "-o", "improve=1"],
    )
    assert bad.exit_code == 2 and "Valid options" in bad.output


def test_dcr_switches_to_retrieval_when_the_source_does_not_fit():
    long_source = " ".join(f"Filler sentence number {i} talks about nothing." for i in range(200)) + " " + SOURCE
    llm = LLM(FakeModel(by_reply=EXCERPT_SCRIPT, context_window=600), cache=None)
    llm.default_params = llm.params(max_tokens=100)
    report = get_method("dcr", llm=llm, retriever="bm25").check(long_source, TARGET)
    assert report.details["context"]["mode"] == "retrieval"
    assert "does not fit" in report.details["context"]["why"]
    assert report.score is not None
    # no prompt carried the whole source
    assert all(len(c.messages[-1]["content"]) < len(long_source) for c in report.calls)


def test_dcr_switches_to_retrieval_on_context_overflow():
    llm = LLM(FakeModel([ContextOverflowError("prompt too long")], by_reply=EXCERPT_SCRIPT))
    report = get_method("dcr", llm=llm, retriever="bm25").check(SOURCE, TARGET)
    assert report.details["context"]["mode"] == "retrieval"
    assert "context overflow" in report.details["context"]["why"]
    assert report.score is not None


def test_dcr_paragraph_level_refuses_long_sources_explicitly():
    llm = LLM(FakeModel(by_reply=EXCERPT_SCRIPT, context_window=50))
    report = get_method("dcr", llm=llm, decomposer="paragraph", retriever="bm25").check(SOURCE * 20, TARGET)
    assert report.score is None and "decomposer=sentences" in report.unscored_reason
    assert report.usage.calls == 0


# ------------------------------------------------------------------------------------------ swapped verifiers


@register_stage("test_dcr_keywords", "verifier")
class _KeywordVerifier:
    """Test-only verifier: a year the source lacks is contradicted, "Paris" cannot be judged, the rest is
    supported; it asks the model once per claim (to show its calls are kept)."""

    def __init__(self, model, options=None):
        self.llm = model

    def reserve_tokens(self, claims) -> int:
        return 10

    async def __call__(self, claims, context, source):
        out = []
        for claim in claims:
            await self.llm.generate([{"role": "user", "content": f"CLAIM: {claim.text}"}])
            if "1999" in claim.text:
                out.append(Verdict(claim=claim, label="contradicted", reason="the source says 2001"))
            elif "Paris" in claim.text:
                out.append(Verdict.unscored(claim, "could not tell"))
            else:
                out.append(Verdict(claim=claim, label="supported", reason="stated"))
        return out


def test_dcr_with_a_swapped_verifier_maps_labels_to_marks():
    model = FakeModel(default="ok")
    report = get_method("dcr", llm=LLM(model, cache=None), verifier="test_dcr_keywords", amc_weights="auto").check(
        SOURCE, TARGET
    )
    assert report.details["stages"]["verifier"] == "test_dcr_keywords"
    assert [v.label for v in report.verdicts] == ["contradicted", "supported", "unscored"]
    # contradicted -> -1, supported -> +1, unscored left out: Z = 0, score 0.5
    assert (report.subscores["Z"], report.subscores["k"], report.subscores["judged"]) == (0.0, 2.0, 2.0)
    assert report.score == 0.5
    assert [f.kind for f in report.findings] == ["contradicted"]
    assert report.findings[0].target_spans[0].of(TARGET) == "Alice founded Acme in 1999."
    assert len(model.requests) == 3 and all("CLAIM:" in r[-1]["content"] for r in model.requests)
    assert "dcr_" not in get_method("dcr", llm=LLM(model, cache=None), verifier="test_dcr_keywords").prompt_version

    retrieved = get_method(
        "dcr",
        llm=LLM(FakeModel(default="ok"), cache=None),
        verifier="test_dcr_keywords",
        retrieval="always",
        retriever="bm25",
        top_k=1,
        window=0,
        amc_weights="auto",
    ).check(SOURCE, TARGET)
    assert retrieved.details["context"]["mode"] == "retrieval" and retrieved.score == 0.5
    # the paper's weights: the unscored sentence cannot be left out, so there is no score
    paper = get_method("dcr", llm=LLM(FakeModel(default="ok"), cache=None), verifier="test_dcr_keywords").check(
        SOURCE, TARGET
    )
    assert paper.score is None and "could not tell" in paper.unscored_reason
    assert [f.kind for f in paper.findings] == ["contradicted"]


def test_dcr_with_the_factscore_verifier_end_to_end():
    def verify(messages):
        if "1999" in fenced(messages, "fact"):
            return json.dumps({"supported": False, "inconsistencies": ['The text says "1999"; the source says 2001.']})
        return json.dumps({"supported": True, "inconsistencies": []})

    model = FakeModel(by_reply={"FactJudgmentReply": verify})
    report = get_method("dcr", llm=LLM(model, cache=None), verifier="factscore").check(SOURCE, TARGET)
    assert report.details["stages"]["verifier"] == "factscore"
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "supported"]
    assert report.score == pytest.approx(2 / 3) and report.subscores["Z"] == pytest.approx(1 / 3)
    assert report.findings[0].target_spans[0].of(TARGET) == "Alice founded Acme in 1999."
    assert model.reply_types == ["FactJudgmentReply"] * 3  # one factscore verification per sentence, nothing else


def test_the_dcr_verifier_in_another_claim_method():
    from halluscope.methods.pipeline import ClaimPipeline
    from halluscope.stages.decomposers import SentenceDecomposer

    class Sentences(ClaimPipeline):
        name = "test_dcr_sentences"
        default_verifier = "dcr"

        def make_decomposer(self):
            return SentenceDecomposer()

    llm = fake_llm(dce((1, "Inconsistent: 2001."), (2, "Consistent: ok"), (3, "Consistent: ok")), marks(-1, 1, 1))
    report = Sentences(llm=llm).check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["unsupported", "supported", "supported"]
    assert report.score == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------------- fuzzing


def _mixed_script(rng: random.Random, garbage: list[str]) -> dict:
    """Per reply type, a valid reply half the time, else a garbled one."""

    def garbled(valid):
        return lambda messages: rng.choice(garbage) if rng.random() < 0.5 else valid(messages)

    def amc(messages):
        count = len(re.findall(r"^\d+\. ", fenced(messages, "reasons"), re.M))
        return marks(*[rng.choice([1, -1]) for _ in range(count)])

    def single(messages):
        return json.dumps({"reason": rng.choice(["Consistent: ok.", "Inconsistent: no."]), "is_consistent": True})

    return {
        "AmcReply": garbled(amc),
        "DceSingleReply": garbled(single),
        "DceReply": garbled(
            lambda m: dce(*[(i, rng.choice(["Consistent: ok.", "Inconsistent: no.", "Hmm."])) for i in (1, 2, 3)])
        ),
    }


@pytest.mark.parametrize(
    "options", [{}, {"amc": "rule"}, {"decomposer": "paragraph"}, {"retrieval": "always", "retriever": "bm25"}]
)
def test_dcr_garbled_replies_some_judged_some_not_nothing_escapes(options):
    rng = random.Random(str(options))
    llm = LLM(FakeModel(by_reply=_mixed_script(rng, garbled_replies(1000, seed=3))), cache=None)
    method = get_method("dcr", llm=llm, **options)
    outcomes = {"judged": 0, "unscored": 0, "scored_reports": 0}
    for _ in range(40):
        report = method.check(SOURCE, TARGET)
        assert isinstance(report, Report) and report.calls and len(report.calls) == report.usage.calls
        if report.score is None:  # findings only from judged sentences (amc_weights=paper keeps them)
            assert not report.findings or any(v.label == "unscored" for v in report.verdicts)
        else:
            outcomes["scored_reports"] += 1
            assert report.score == pytest.approx((report.subscores["Z"] + 1) / 2)  # AMC's (Z + 1) / 2
        for v in report.verdicts:
            outcomes["unscored" if v.label == "unscored" else "judged"] += 1
        assert len(report.findings) == sum(v.label == "unsupported" for v in report.verdicts)
    assert outcomes["judged"] > 0 and outcomes["unscored"] > 0 and outcomes["scored_reports"] > 0, outcomes


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_dcr_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("dcr", config=config, amc="rule").check(
        "The cat sat on the mat. It was sunny.", "The cat sat on the mat."
    )
    assert report.model and report.model.startswith("embedded")
    assert report.usage.calls >= 1
    assert len(report.verdicts) == 1
    if report.score is not None:  # one sentence: Z is its one mark, so the score is 1 (consistent) or 0
        assert report.score == (1.0 if report.verdicts[0].label == "supported" else 0.0)
