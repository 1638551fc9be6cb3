"""RAI (the `improve` method): splicing, strict parsers, the multi-round loop (only verified fixes are
returned), options, a swapped verifier, the improvement-rate suite, the CLI, fuzzing, and one run on the
embedded model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from halluscope.bench.suites import SuiteContext, load_suite_modules
from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method
from halluscope.methods.improve import Improve, ImprovementRound
from halluscope.methods.rai import parse_rai_paragraph, parse_rai_sentences, sentence_diff, splice
from halluscope.records import Example, Report, Verdict
from halluscope.stages import register_stage
from halluscope.text import ParseError, split_sentences
from tests.conftest import fake_llm
from tests.garble import garbled_replies
from tests.prompt_data import fenced
from tests.reply_fuzz import cut, mutations, parse_each, stray, unchanged, wrap

SOURCE = "Alice founded Acme in 2001 in Paris. The company makes rockets. Bob joined Acme in 2005."
TARGET = "Alice founded Acme in 1999.  Acme makes rockets and cars. It is based in Paris."


def dce(*reasons) -> str:
    return json.dumps(
        {
            "sentences": [{"id": i, "reason": r} for i, r in enumerate(reasons, 1)],
            "is_consistent": all(r.startswith("Consistent") for r in reasons),
        }
    )


def rewrites(**by_id) -> str:
    return json.dumps({"rewrites": [{"id": int(k[1:]), "improved_sentence": v} for k, v in by_id.items()]})


# ---------------------------------------------------------------------------------------------- splicing


def test_splice_replaces_only_the_given_sentences():
    spans = [s.span for s in split_sentences(TARGET)]
    out = splice(TARGET, spans, {0: "Alice founded Acme in 2001."})
    assert out == "Alice founded Acme in 2001.  Acme makes rockets and cars. It is based in Paris."


def test_splice_deletes_middle_and_last_sentences_cleanly():
    spans = [s.span for s in split_sentences(TARGET)]
    assert splice(TARGET, spans, {1: ""}) == "Alice founded Acme in 1999.  It is based in Paris."
    assert splice(TARGET, spans, {2: ""}) == "Alice founded Acme in 1999.  Acme makes rockets and cars."


def test_sentence_diff_lists_changed_sentences():
    diff = sentence_diff("A b c. D e f.", "A b c. D e g.")
    assert "-D e f." in diff and "+D e g." in diff and " A b c." in diff


# ---------------------------------------------------------------------------------------------- parsers


def test_parse_rai_sentences_ignores_sentences_that_were_not_flagged():
    reply = json.dumps(
        {
            "rewrites": [
                {"id": 1, "improved_sentence": "Fixed  one."},
                {"id": 2, "improved_sentence": "Touched a consistent one."},
            ]
        }
    )
    got, ignored = parse_rai_sentences(reply, {0}, 3)
    assert got == {0: "Fixed one."} and ignored == [2]
    with pytest.raises(ParseError):
        parse_rai_sentences(json.dumps({"rewrites": [{"id": 2, "improved_sentence": "x"}]}), {0}, 3)


def test_parse_rai_sentences_is_strict():
    deleted, _ = parse_rai_sentences(json.dumps({"rewrites": [{"id": 1, "improved_sentence": ""}]}), {0}, 3)
    assert deleted == {0: ""}  # "" deletes the sentence
    echoes = json.dumps({"rewrites": [{"id": 1, "improved_sentence": "..."}, {"id": 2, "improved_sentence": "<x>"}]})
    # each of these used to be read: other keys, string ids, a lone object, a bare list, placeholders
    for bad in (
        json.dumps({"sentences": [{"id": 1, "improved_sentence": "x"}]}),
        json.dumps({"rewrites": [{"id": "1", "improved_sentence": "x"}]}),
        json.dumps({"rewrites": [{"id": 1, "rewrite": "x"}]}),
        json.dumps({"id": 1, "improved_sentence": "x"}),
        json.dumps([{"id": 1, "improved_sentence": "x"}]),
        json.dumps({"rewrites": [{"id": 1, "improved_sentence": None}]}),
        echoes,
        '{"rewrites": [{"id": 1, "improved_sentence": "Fix',
        "",
        "no json",
    ):
        with pytest.raises(ParseError):
            parse_rai_sentences(bad, {0, 1}, 3)


def test_parse_rai_paragraph():
    assert parse_rai_paragraph('{"improved_text": "  New text. "}') == "New text."
    for bad in (
        '{"improved_text": ""}',
        '{"improved_text": "..."}',
        '{"improved_summary": "New text."}',
        '{"text": "New text."}',
        '{"improved_text": ["New text."]}',
        "New text.",
    ):
        with pytest.raises(ParseError):
            parse_rai_paragraph(bad)


VALID_REPLIES = [
    rewrites(s1="Alice founded Acme in 2001."),
    rewrites(s1="", s2="Acme makes rockets."),
    json.dumps({"improved_text": "Alice founded Acme in 2001."}),
]
RAI_EDITS = (wrap("Here you go:\n```json\n", "\n```"), cut, stray('{}[]",: '), unchanged)


@pytest.mark.parametrize("name", ["sentences", "paragraph"])
def test_rai_parsers_on_garbled_replies_some_parse_some_fail(name):
    parse = {"sentences": lambda t: parse_rai_sentences(t, {0, 1}, 3), "paragraph": parse_rai_paragraph}[name]
    parsed, refused = parse_each(
        parse, garbled_replies(1000, seed=5) + VALID_REPLIES + mutations(VALID_REPLIES, 400, edits=RAI_EDITS)
    )
    assert parsed and refused


# ------------------------------------------------------------------------------------------------- loop


def test_two_rounds_until_consistent():
    llm = fake_llm(
        dce("Inconsistent: 2001, not 1999.", "Inconsistent: no cars in the source.", "Consistent: Paris."),
        # RAI round 1 tries to touch sentence 3 too: ignored
        json.dumps(
            {
                "rewrites": [
                    {"id": 1, "improved_sentence": "Alice founded Acme in 2001."},
                    {"id": 2, "improved_sentence": "Acme makes rockets and trucks."},
                    {"id": 3, "improved_sentence": "It is based in London."},
                ]
            }
        ),
        dce("Consistent: ok.", "Inconsistent: no trucks either.", "Consistent: Paris."),
        rewrites(s2="Acme makes rockets."),
        dce("Consistent: ok.", "Consistent: rockets.", "Consistent: Paris."),
    )
    report = Improve(llm=llm, amc="rule", rounds=3).check(SOURCE, TARGET)
    details = report.details
    rounds = [ImprovementRound.model_validate(r) for r in details["rounds"]]
    assert [r.score for r in rounds] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert rounds[0].inconsistent_sentences == [1, 2]
    assert [c.sentence for c in rounds[1].changes] == [1, 2]
    assert rounds[1].ignored_rewrites == [3]
    assert "It is based in Paris." in rounds[1].text  # the consistent sentence is never rewritten
    assert [c.sentence for c in rounds[2].changes] == [2]
    assert details["improved"] is True and details["best_round"] == 2
    assert details["improved_target"] == "Alice founded Acme in 2001.  Acme makes rockets. It is based in Paris."
    assert details["stop_reason"] == "consistent"
    assert "+Acme makes rockets." in details["diff"]
    # the report itself is about the given target
    assert report.score == pytest.approx(1 / 3)
    assert report.subscores["initial_score"] == pytest.approx(1 / 3) and report.subscores["final_score"] == 1.0
    assert report.usage.calls == 5 and len(report.calls) == 5


def test_a_rewrite_that_cannot_be_reverified_is_not_returned():
    llm = fake_llm(
        dce("Inconsistent: wrong year.", "Consistent: a", "Consistent: b"),
        rewrites(s1="Alice founded Acme in 2001."),
        "garbage",
        "more garbage",
    )  # the re-evaluation fails twice (with its repair round)
    report = Improve(llm=llm, amc="rule", rounds=2).check(SOURCE, TARGET)
    assert report.details["improved"] is False
    assert report.details["improved_target"] == TARGET
    assert report.details["diff"] == ""
    assert report.details["rounds"][1]["score"] is None
    assert "could not evaluate" in report.details["stop_reason"]


def test_an_unmarked_sentence_stops_rai_under_the_papers_weights_but_not_under_auto():
    replies = (
        dce("Inconsistent: wrong year.", "Hmm.", "Consistent: Paris."),  # sentence 2 states no verdict
        rewrites(s1="Alice founded Acme in 2001."),
        dce("Consistent: ok.", "Hmm.", "Consistent: Paris."),
    )
    paper = Improve(llm=fake_llm(*replies), amc="rule", rounds=1).check(SOURCE, TARGET)
    assert paper.score is None and "could not evaluate the text of round 0" in paper.details["stop_reason"]
    assert paper.details["improved"] is False and paper.usage.calls == 1  # no rewrite of an unscored text
    auto = Improve(llm=fake_llm(*replies), amc="rule", rounds=1, amc_weights="auto").check(SOURCE, TARGET)
    assert [r["score"] for r in auto.details["rounds"]] == [0.5, 1.0]
    assert auto.details["improved"] is True and auto.usage.calls == 3


def test_a_worse_rewrite_is_not_returned():
    llm = fake_llm(
        dce("Inconsistent: a", "Consistent: b", "Consistent: c"),
        rewrites(s1="Worse sentence."),
        dce("Inconsistent: a", "Inconsistent: b", "Consistent: c"),
    )
    report = Improve(llm=llm, amc="rule", rounds=1).check(SOURCE, TARGET)
    assert report.details["rounds"][1]["score"] == pytest.approx(1 / 3)
    assert report.details["improved"] is False and report.details["improved_target"] == TARGET
    assert report.subscores["final_score"] == report.subscores["initial_score"]


def test_unusable_rewrite_stops_with_a_reason():
    llm = fake_llm(dce("Inconsistent: a", "Consistent: b", "Consistent: c"), "not json", "still not json")
    report = Improve(llm=llm, amc="rule", rounds=2).check(SOURCE, TARGET)
    assert len(report.details["rounds"]) == 1
    assert report.details["rounds"][0]["rewrite_error"]
    assert "could not be used" in report.details["stop_reason"]
    assert report.details["improved"] is False


def test_consistent_target_needs_no_rewrite():
    llm = fake_llm(dce("Consistent: a", "Consistent: b", "Consistent: c"))
    report = Improve(llm=llm, amc="rule").check(SOURCE, TARGET)
    assert report.details["stop_reason"] == "consistent"
    assert report.usage.calls == 1 and report.details["improved"] is False


def test_paragraph_level():
    llm = fake_llm(
        json.dumps({"reason": "Inconsistent: year", "is_consistent": False}),
        json.dumps({"improved_text": "Alice founded Acme in 2001 in Paris."}),
        json.dumps({"reason": "Consistent: all stated", "is_consistent": True}),
    )
    report = get_method("improve", llm=llm, amc="rule", level="paragraph", rounds=1).check(SOURCE, TARGET)
    assert report.details["improved_target"] == "Alice founded Acme in 2001 in Paris."
    assert report.details["rounds"][1]["changes"][0]["before"] == TARGET.strip()
    assert report.details["max_rounds"] == 1
    assert "REVIEWER'S REASON" in report.calls[1].messages[-1]["content"]


def test_improve_options_are_rounds_plus_dcr_options():
    from halluscope.methods.dcr import DCR

    assert set(Improve.Options.model_fields) == set(DCR.Options.model_fields) | {
        "rounds",
        "level",  # RAI's level, which also chooses DCR's decomposer (DCR's own level is an alias of it)
        "evaluator",
        "evaluator_options",
    }
    opts = Improve(llm=fake_llm(), rounds=3, level="paragraph", retrieval="always", top_k=2).options()
    assert (opts["rounds"], opts["level"], opts["retrieval"], opts["top_k"]) == (3, "paragraph", "always", 2)
    for bad in ({"rounds": 0}, {"rounds": 11}, {"rounds": "two"}, {"improve": 1}):
        with pytest.raises(OptionsError):
            Improve(llm=fake_llm(), **bad)
    assert "rai_sentence@" in Improve(llm=fake_llm()).prompt_version
    assert "rai_paragraph@" in Improve(llm=fake_llm(), level="paragraph").prompt_version


@register_stage("test_improve_keywords", "verifier")
class _KeywordVerifier:
    """Test-only verifier: a sentence with 1999 or cars is unsupported, the rest supported (no LLM call)."""

    def __init__(self, model, options=None):
        pass

    def reserve_tokens(self, claims) -> int:
        return 10

    async def __call__(self, claims, context, source):
        return [
            Verdict(claim=c, label="unsupported", reason="the source says 2001 and rockets only")
            if "1999" in c.text or "cars" in c.text
            else Verdict(claim=c, label="supported", reason="stated")
            for c in claims
        ]


def test_improve_with_a_swapped_verifier():
    llm = fake_llm(rewrites(s1="Alice founded Acme in 2001.", s2="Acme makes rockets."))
    report = Improve(llm=llm, verifier="test_improve_keywords", rounds=2).check(SOURCE, TARGET)
    assert report.details["stages"]["verifier"] == "test_improve_keywords"
    assert [r["score"] for r in report.details["rounds"]] == [pytest.approx(1 / 3), 1.0]
    assert report.details["improved_target"] == "Alice founded Acme in 2001.  Acme makes rockets. It is based in Paris."
    assert report.usage.calls == 1 and "the source says 2001" in report.calls[0].messages[-1]["content"]


def _mixed_script(rng: random.Random, garbage: list[str]) -> dict:
    """Per reply type (FakeModel(by_reply=...)), a valid reply 60% of the time, else a garbled one."""

    def garbled(valid):
        return lambda messages: rng.choice(garbage) if rng.random() < 0.4 else valid(messages)

    def dce_sentences(messages):
        n = len(re.findall(r"^\[\d+\] ", fenced(messages, "sentences"), re.M))  # the numbered sentences asked about
        return dce(*[rng.choice(["Consistent: ok.", "Inconsistent: no."]) for _ in range(n)])

    def whole_text(messages):
        return json.dumps({"reason": rng.choice(["Consistent: ok.", "Inconsistent: no."]), "is_consistent": False})

    return {
        "RewritesReply": garbled(lambda m: rewrites(s1="Alice founded Acme in 2001.", s2="Acme makes rockets.")),
        "ImprovedTextReply": garbled(lambda m: json.dumps({"improved_text": "Alice founded Acme in 2001."})),
        "DceSingleReply": garbled(whole_text),
        "DceReply": garbled(dce_sentences),
    }


@pytest.mark.parametrize("level", ["sentence", "paragraph"])
def test_improve_garbled_replies_some_parse_some_fail(level):
    rng = random.Random(level)
    llm = LLM(FakeModel(by_reply=_mixed_script(rng, garbled_replies(1000, seed=11))), cache=None)
    method = Improve(llm=llm, rounds=2, level=level, amc="rule")
    outcomes = {"rewritten": 0, "rewrite_failed": 0, "unscored": 0}
    for _ in range(40):
        report = method.check(SOURCE, TARGET)
        assert report.details["stop_reason"] and len(report.calls) == report.usage.calls
        assert (
            report.details["improved"] is False or report.subscores["final_score"] > report.subscores["initial_score"]
        )
        rounds = report.details["rounds"]
        outcomes["rewritten"] += len(rounds) > 1
        outcomes["rewrite_failed"] += any(r["rewrite_error"] for r in rounds)
        outcomes["unscored"] += report.score is None
    assert outcomes["rewritten"] > 0 and outcomes["rewrite_failed"] > 0 and outcomes["unscored"] > 0, outcomes


# ------------------------------------------------------------------------------------------------ suite


def _report_with_rounds(
    scores: list[float | None], consistent: list[bool], flagged0: list[int], improved: bool
) -> Report:
    rounds = [
        ImprovementRound(
            round=i, text="t", score=s, consistent=c, inconsistent_sentences=flagged0 if i == 0 else []
        ).model_dump()
        for i, (s, c) in enumerate(zip(scores, consistent))
    ]
    return Report(
        method="improve",
        score=scores[0] if scores[0] is not None else None,
        unscored_reason=None if scores[0] is not None else "x",
        subscores={
            "initial_score": scores[0],
            "final_score": max(s for s in scores if s is not None) if scores[0] is not None else None,
        },
        details={"rounds": rounds, "improved": improved, "max_rounds": 2, "stop_reason": "consistent"},
    )


def test_improvement_rate_suite(tmp_path: Path):
    suite = load_suite_modules()["rai_improvement"]
    examples = [Example(id=str(i), source="s", target="t", label=lab) for i, lab in enumerate([0, 0, 0, 1, 1])]
    reports = [
        _report_with_rounds([0.5, 1.0], [False, True], [1], True),  # fixed in round 1
        _report_with_rounds([0.5, 0.5, 1.0], [False, False, True], [1], True),  # fixed in round 2
        _report_with_rounds([0.0, 0.5, 0.5], [False, False, False], [1, 2], True),  # never fixed
        _report_with_rounds([1.0], [True], [], False),  # not flagged
        _report_with_rounds([None], [False], [], False),  # original unscored
    ]
    result = suite.fn(
        examples, reports, SuiteContext(out_dir=tmp_path, method="improve", model="fake", dataset="toy", n_bootstrap=50)
    )
    m = result.metrics
    assert m["n_flagged"] == 3 and m["n_original_unscored"] == 1
    assert m["improvement_rate_after_1"]["value"] == pytest.approx(1 / 3)
    assert m["improvement_rate_after_2"]["value"] == pytest.approx(2 / 3)
    assert m["flagged_by_gold_label"] == {"gold_inconsistent": {"n_flagged": 3, "fixed_after_1": 1, "fixed_after_2": 2}}
    assert result.tables and result.plots[0].is_file()
    # counting every item: the unscored original as flagged and never fixed, with the coverage beside it
    assert m["coverage"] == {"scored": 4, "total": 5, "share": 0.8}
    assert m["improvement_rate_after_1_all"]["value"] == pytest.approx(1 / 4)
    assert m["improvement_rate_after_2_all"]["value"] == pytest.approx(2 / 4)
    assert m["improvement_rate_after_1"]["coverage"] == m["coverage"]
    assert m["n_flagged_all"] == 4 and m["fixed_after_1_all"] == 1
    assert "every item" in result.tables[0][1] and "0.250" in result.tables[0][1]


def test_improvement_rate_suite_ignores_other_methods(tmp_path: Path):
    suite = load_suite_modules()["rai_improvement"]
    result = suite.fn(
        [Example(id="1", source="s", target="t")],
        [Report(method="rouge", score=0.4)],
        SuiteContext(out_dir=tmp_path, method="rouge", model=None, dataset="toy"),
    )
    assert result.metrics == {} and not result.tables


# -------------------------------------------------------------------------------------------------- CLI


def test_cli_improve(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    import halluscope.methods as methods
    from halluscope.cli.main import app

    llm = fake_llm(
        dce("Inconsistent: wrong year.", "Consistent: b", "Consistent: c"),
        rewrites(s1="Alice founded Acme in 2001."),
        dce("Consistent: a", "Consistent: b", "Consistent: c"),
    )
    real = methods.get_method
    monkeypatch.setattr(methods, "get_method", lambda name, **kw: real(name, **{**kw, "llm": llm, "amc": "rule"}))
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    out = tmp_path / "fixed.txt"
    result = CliRunner().invoke(
        app,
        [
            "improve",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--rounds",
            "2",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "verified improvement" in result.output and "+Alice founded Acme in 2001." in result.output
    assert out.read_text() == "Alice founded Acme in 2001.  Acme makes rockets and cars. It is based in Paris."
    bad = CliRunner().invoke(
        app, ["improve", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "-o", "nonsense=1"]
    )
    assert bad.exit_code == 2 and "Valid options" in bad.output and "rounds" in bad.output


# --------------------------------------------------------------------------------------------- embedded


@pytest.mark.embedded
def test_improve_on_the_embedded_model(embedded_config):
    # one thread: llama.cpp threads spin-wait, which is very slow on a shared, oversubscribed CPU
    config = embedded_config.with_overrides(max_tokens=120, embedded_threads=1)
    report = get_method("improve", config=config, rounds=1, amc="rule").check(
        "The cat sat on the mat.", "The dog sat on the mat."
    )
    assert report.usage.calls >= 1
    assert report.details["rounds"][0]["round"] == 0
    assert report.details["stop_reason"]
    if report.details["improved"]:
        assert report.details["rounds"][report.details["best_round"]]["score"] > report.details["rounds"][0]["score"]
