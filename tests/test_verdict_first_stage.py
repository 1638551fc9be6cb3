"""Verdict first is a verifier stage like any other: ``order=verdict_first`` makes it the method's own verifier,
``-o verifier=NAME`` replaces it (so a bare ``check``, which runs DCR verdict first, takes every registered
verifier, a plugin's too), and it composes with the other stages; the context-fit budget is its own."""

from __future__ import annotations

import json
import re
import sys

import pytest
from typer.testing import CliRunner

import halluscope.llm
from halluscope.cli.main import app
from halluscope.config import Config, resolve_method
from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method
from halluscope.methods.pipeline import stage_uses_llm
from halluscope.methods.verdict_first import VERDICT_EXPLAIN_PROMPT, VERDICT_SCORE_PROMPT, VerdictFirst
from halluscope.records import Claim, Verdict
from halluscope.stages import register_stage, stages

SOURCE = "The museum opens at nine. The cafe sells tea."
TARGET = "The museum opens at nine. The cafe sells coffee and tea."
EXPLANATION = {
    "reason": "The source names tea only.",
    "evidence": "The cafe sells tea.",
    "contradicted": False,
    "fix": "",
}


@register_stage("test_vf_word_overlap", "verifier")
class WordOverlap:
    """A plugin verifier written as docs/add_a_stage.md shows: supported when every word occurs (no LLM)."""

    uses_llm = False

    def __init__(self, model, options):
        assert model is None

    def reserve_tokens(self, claims):
        return 0

    async def __call__(self, claims, context, source):
        words = set(re.findall(r"\w+", context.text.lower()))
        return [
            Verdict(
                claim=c,
                label="supported" if set(re.findall(r"\w+", c.text.lower())) <= words else "unsupported",
                reason="word overlap",
            )
            for c in claims
        ]


def yes_no_fake() -> FakeModel:
    def answer(messages):
        return "No" if "coffee" in messages[-1]["content"].split("CLAIM:")[-1] else "Yes"

    return FakeModel(by_reply={"text": answer, "ExplainReply": json.dumps(EXPLANATION)})


def default_method(**options):
    name, opts = resolve_method(None, options)
    return get_method(name, **opts)


def test_order_verdict_first_and_the_default_check_are_one_composition():
    bare = default_method(llm=LLM(yes_no_fake(), cache=None))
    named = get_method("dcr", llm=LLM(yes_no_fake(), cache=None), order="verdict_first")
    assert bare.chosen == named.chosen and bare.chosen["verifier"][0] == "verdict_first"
    a, b = bare.check(SOURCE, TARGET), named.check(SOURCE, TARGET)
    for report in (a, b):
        report.details["verdict_first"].pop("seconds")  # wall-clock time
    assert a.model_dump(exclude={"elapsed_s"}) == b.model_dump(exclude={"elapsed_s"})
    assert a.details["stages"]["verifier"] == "verdict_first"  # the stage that ran, not the unused paper verifier
    assert [v.label for v in a.verdicts] == ["supported", "unsupported"]
    assert [p.name for p in bare.used_prompts()] == [
        "verdict_first_score",
        "verdict_first_explain",
        "verdict_first_contradicts",  # the relation of a flagged claim, read from probabilities
        "verdict_first_reason",  # the reason, written from the chosen passage
        "factscore_decompose",  # a flagged sentence split into atomic facts
    ]


@pytest.mark.parametrize("name", ["dcr", "factscore", "probe", "dove"])
def test_verdict_first_is_chosen_by_name_on_every_claim_method(name):
    by_order = get_method(name, llm=LLM(yes_no_fake(), cache=None), order="verdict_first", decomposer="sentences")
    by_name = get_method(name, llm=LLM(yes_no_fake(), cache=None), verifier="verdict_first", decomposer="sentences")
    for method in (by_order, by_name):
        report = method.check(SOURCE, TARGET)
        assert report.details["stages"]["verifier"] == "verdict_first"
        assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
        assert all(v.decided_by == "verdict_first" for v in report.verdicts)


def _named(spec):
    """The stage's name as ``-o verifier=`` takes it: with an argument where it needs one (``nli:MODEL``)."""
    return f"{spec.name}:some/checkpoint" if spec.argument else spec.name


@pytest.mark.parametrize("name", [_named(s) for s in stages("verifier")])
def test_every_registered_verifier_replaces_verdict_first_in_the_default_check(name):
    method = default_method(config=Config(model="fake:/nonexistent/no-such-script.json"), verifier=name)
    assert method.chosen["verifier"][0] == name
    assert method.uses_llm == stage_uses_llm(
        "verifier", name, method.chosen["verifier"][1]
    )  # the model is needed only for a verifier that calls one


def test_a_no_llm_plugin_verifier_runs_the_default_check_without_llama_cpp(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now fails: the package is absent
    # and no embedded model was loaded before it went (the process-wide cache of loaded weights starts empty, and
    # whatever this test builds does not reach the tests after it)
    monkeypatch.setattr(halluscope.llm, "_EMBEDDED_APIS", {})
    with pytest.raises(ImportError):
        import llama_cpp  # noqa: F401
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HALLUSCOPE_MODEL", raising=False)
    args = ["check", "-s", "s.txt", "-t", "t.txt", "-o", "verifier=test_vf_word_overlap", "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 1, result.output  # inconsistent: "coffee" is not in the source (2 would be set-up)
    report = json.loads(result.stdout)
    assert report["model"] is None and report["usage"]["calls"] == 0
    assert report["details"]["stages"]["verifier"] == "test_vf_word_overlap"
    assert [v["label"] for v in report["verdicts"]] == ["supported", "unsupported"]
    without = CliRunner().invoke(app, ["check", "-s", "s.txt", "-t", "t.txt", "--format", "json", "--no-progress"])
    assert without.exit_code == 2, without.output[-1500:]  # verdict first itself needs the (embedded) model


def test_verdict_first_composes_with_a_no_llm_verifier_cascade_and_other_stages():
    method = get_method(
        "factscore",
        llm=LLM(yes_no_fake(), cache=None),
        order="verdict_first",
        decomposer="sentences",
        aggregator="supported_fraction",
        localizer="claims",
        retrieval="always",
        retriever="bm25",
    )
    report = method.check(SOURCE, TARGET)
    assert report.details["context"]["mode"] == "retrieval"
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    (finding,) = report.findings
    assert finding.kind == "unsupported" and '"The cafe sells tea."' in finding.description
    assert finding.target_spans[0].of(TARGET) == "The cafe sells coffee"  # the failing fact, not the sentence


def test_the_context_fit_budget_is_the_verdict_first_verifiers():
    llm = LLM(yes_no_fake(), cache=None)
    method = get_method("dcr", llm=llm, order="verdict_first")
    verifier = method.verifier
    assert isinstance(verifier, VerdictFirst)
    claim = [Claim(text="The cafe sells coffee and tea.", id="c1")]
    explain = sum(
        llm.count_tokens(m["content"]) + 8 for m in VERDICT_EXPLAIN_PROMPT.render(source="", claim=claim[0].text)
    )
    score = sum(llm.count_tokens(m["content"]) + 8 for m in VERDICT_SCORE_PROMPT.render(source="", claim=claim[0].text))
    assert verifier.reserve_tokens(claim) == max(score + 2, explain + min(256, llm.default_params.max_tokens))
    reason_first = get_method("dcr", llm=llm).verifier.reserve_tokens(claim)
    assert reason_first != verifier.reserve_tokens(claim)  # the unused paper verifier no longer sets it


def test_methods_says_what_a_bare_check_runs_in_the_options_that_name_it():
    listed = CliRunner().invoke(app, ["methods"])
    assert "check runs: dcr -o order=verdict_first" in listed.output


def test_the_methods_verdict_first_options_reach_it_however_it_is_chosen():
    for how in ({"order": "verdict_first"}, {"verifier": "verdict_first"}):
        method = get_method("dcr", llm=LLM(yes_no_fake(), cache=None), explain=False, explain_below=0.7, **how)
        assert method.chosen["verifier"][1].explain is False and method.chosen["verifier"][1].explain_below == 0.7
        report = method.check(SOURCE, TARGET)
        assert report.details["verdict_first"]["explain"] is False and report.usage.calls == 2
