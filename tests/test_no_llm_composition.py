"""A claim method whose stages call no LLM needs no model: ``uses_llm`` follows from the stages it builds, and the
same composition gives the same report from the CLI, the Python API and the service, with a model that cannot be
built configured (a fake model whose script file does not exist: building it would fail)."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import Field
from typer.testing import CliRunner

import halluscope
from halluscope.cli.main import app
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method
from halluscope.records import Verdict
from halluscope.stages import StageOptions, register_stage

SOURCE = "The museum opens at nine. The cafe sells tea."
TARGET = "The museum opens at nine. The cafe sells coffee and tea."
UNBUILDABLE = "fake:/nonexistent/halluscope-no-such-script.json"  # building this model raises


@register_stage("test_no_llm_overlap", "verifier")
class OverlapVerifier:
    """Supported when enough of the claim's words occur in the context (no LLM)."""

    uses_llm = False

    class Options(StageOptions):
        min_overlap: float = Field(default=0.8, ge=0.0, le=1.0)
        """Share of the claim's words that must occur in the context."""

    def __init__(self, model, options):
        assert model is None  # a stage that calls no LLM is built without one
        self.min_overlap = options.min_overlap

    def reserve_tokens(self, claims):
        return 0

    async def __call__(self, claims, context, source):
        words = set(re.findall(r"\w+", context.text.lower()))
        verdicts = []
        for claim in claims:
            mine = re.findall(r"\w+", claim.text.lower())
            share = sum(w in words for w in mine) / max(1, len(mine))
            label = "supported" if share >= self.min_overlap else "unsupported"
            verdicts.append(Verdict(claim=claim, label=label, reason=f"{share:.0%} of its words occur"))
        return verdicts


# every claim method, composed of stages that call no LLM (dcr's own decomposer is the sentence splitter)
NO_LLM = {
    "dcr": {"verifier": "test_no_llm_overlap"},
    "factscore": {"verifier": "test_no_llm_overlap", "decomposer": "sentences", "deduplicator": "fuzzy"},
    "probe": {"verifier": "test_no_llm_overlap", "decomposer": "sentences"},
    "dove": {"verifier": "test_no_llm_overlap", "decomposer": "sentences", "sorter": "position"},
}


@pytest.mark.parametrize("name", sorted(NO_LLM))
def test_uses_llm_follows_from_the_stages_built(name):
    method = get_method(name, **NO_LLM[name])
    assert method.uses_llm is False and not any(method.llm_stages().values())
    assert type(method).uses_llm is True  # the class may call one; this composition does not
    assert get_method(name, llm=LLM(FakeModel(default="{}"), cache=None)).uses_llm is True  # the paper's stages


@pytest.mark.parametrize("retrieval", ["auto", "never", "always"])
def test_the_api_scores_a_no_llm_composition_with_every_retrieval_mode(retrieval):
    """retrieval=auto used to read the model's context window, so the pair was unscored with no model."""
    report = halluscope.check(
        SOURCE, TARGET, "dcr", UNBUILDABLE, verifier="test_no_llm_overlap", retrieval=retrieval, retriever="bm25"
    )
    assert report.unscored_reason is None
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    assert report.score == 0.5 and report.model is None and report.usage.calls == 0  # DCR: Z = (1 - 1) / 2


def test_a_composition_that_calls_an_llm_still_needs_its_model():
    method = get_method("dcr", config=Config(model=UNBUILDABLE), order="verdict_first")
    assert method.uses_llm is True and method.llm_stages()["verifier"] is True
    # a verifier named under verdict first replaces the verdict-first verifier, as it replaces the paper's
    method = get_method("dcr", config=Config(model=UNBUILDABLE), verifier="test_no_llm_overlap", order="verdict_first")
    assert method.uses_llm is False and method.chosen["verifier"][0] == "test_no_llm_overlap"
    dove = get_method("dove", config=Config(model=UNBUILDABLE), **{**NO_LLM["dove"], "sorter": "llm"})
    assert dove.uses_llm is True  # the paper's LLM sorter orders the events
    assert (
        get_method("dove", **{**NO_LLM["dove"], "sorter": "llm", "aggregator": "supported_fraction"}).uses_llm is False
    )  # no event order, so no sorter is built


def _cli(tmp_path, name, options, model=UNBUILDABLE):
    source, target = tmp_path / "source.txt", tmp_path / "target.txt"
    source.write_text(SOURCE)
    target.write_text(TARGET)
    args = [
        "check",
        "-s",
        str(source),
        "-t",
        str(target),
        "--method",
        name,
        "--model",
        model,
        "--format",
        "json",
        "--no-progress",
    ]
    for key, value in options.items():
        args += ["-o", f"{key}={value}"]
    return CliRunner().invoke(app, args)


def _service_client(tmp_path):
    pytest.importorskip("fastapi", reason="server extra not installed: pip install 'halluscope[server]'")
    pytest.importorskip("prometheus_client", reason="server extra not installed: pip install 'halluscope[server]'")
    from fastapi.testclient import TestClient

    from halluscope.server import ServerSettings, create_app

    app_ = create_app(
        Config(model=UNBUILDABLE, cache=False), ServerSettings(token="t0ken", jobs_db=tmp_path / "jobs.sqlite")
    )
    return TestClient(app_, raise_server_exceptions=False)


@pytest.mark.parametrize("name", sorted(NO_LLM))
def test_the_cli_the_api_and_the_service_give_the_same_report_with_no_model(tmp_path, name):
    options = NO_LLM[name]
    result = _cli(tmp_path, name, options)
    assert result.stdout.strip(), result.output
    from_cli = json.loads(result.stdout)
    assert result.exit_code == (0 if from_cli["label"] == "consistent" else 1), result.output  # 2: a set-up error
    from_api = halluscope.check(SOURCE, TARGET, name, UNBUILDABLE, **options).model_dump(mode="json")
    with _service_client(tmp_path) as client:
        response = client.post(
            "/check",
            headers={"Authorization": "Bearer t0ken"},
            json={"source": SOURCE, "target": TARGET, "method": name, "options": options},
        )
    assert response.status_code == 200, response.text
    from_service = response.json()
    for report in (from_cli, from_api, from_service):
        assert report["unscored_reason"] is None and report["model"] is None and report["usage"]["calls"] == 0
    assert from_cli["score"] == from_api["score"] == from_service["score"] == 0.5
    labels = [[v["label"] for v in r["verdicts"]] for r in (from_cli, from_api, from_service)]
    assert labels == [["supported", "unsupported"]] * 3
    assert from_cli["details"]["stages"] == from_api["details"]["stages"] == from_service["details"]["stages"]


def test_without_the_no_llm_stages_each_door_says_the_model_cannot_be_built(tmp_path):
    result = _cli(tmp_path, "dcr", {})
    assert result.exit_code == 2 and "halluscope-no-such-script.json" in result.output
    with _service_client(tmp_path) as client:
        response = client.post(
            "/check",
            headers={"Authorization": "Bearer t0ken"},
            json={"source": SOURCE, "target": TARGET, "method": "dcr", "options": {}},
        )
    assert response.status_code == 503, response.text


def test_a_stage_kind_the_method_does_not_build_is_refused_clearly():
    for name, kind, value in (
        ("dcr", "sorter", "position"),
        ("probe", "deduplicator", "fuzzy"),
        ("factscore", "evidence_finder", "top_sentences"),
    ):
        with pytest.raises(OptionsError, match=f"{name} builds no {kind} stage"):
            get_method(name, llm=LLM(FakeModel(default="{}"), cache=None), **{kind: value})
        with pytest.raises(OptionsError, match=f"{name} builds no {kind} stage"):
            get_method(name, llm=LLM(FakeModel(default="{}"), cache=None), **{f"{kind}.x": 1})


@register_stage("test_no_llm_clauses", "decomposer")
class ClauseDecomposer:
    """Every comma- or 'and'-separated clause of the target is a claim (no LLM)."""

    uses_llm = False

    def __init__(self, model, options):
        assert model is None

    async def __call__(self, target):
        from halluscope.records import Claim, StepResult

        parts = [p.strip(" .") for p in re.split(r",| and ", target) if p.strip(" .")]
        return StepResult.success([Claim(text=p, id=f"k{i}") for i, p in enumerate(parts, 1)])


@register_stage("test_no_llm_reverse", "sorter")
class ReverseSorter:
    """The source's events in the order given, the target's reversed (no LLM): every pair is out of order."""

    uses_llm = False

    def __init__(self, model, options):
        assert model is None

    async def __call__(self, events, text, about=None):
        from halluscope.records import StepResult
        from halluscope.stages import EventOrder

        order = list(range(len(events)))
        return StepResult.success(EventOrder(order=order if text == about else order[::-1]))


@pytest.mark.parametrize("name", sorted(NO_LLM))
def test_a_plugin_decomposer_is_chosen_by_name_on_every_claim_method(name):
    method = get_method(name, **{**NO_LLM[name], "decomposer": "test_no_llm_clauses"}, retriever="bm25")
    assert method.uses_llm is False
    report = method.check(SOURCE, TARGET)
    assert [c.text for c in report.claims] == ["The museum opens at nine. The cafe sells coffee", "tea"]
    assert report.details["stages"]["decomposer"] == "test_no_llm_clauses"


def test_a_plugin_sorter_orders_doves_events_by_source_and_target():
    method = get_method("dove", **{**NO_LLM["dove"], "sorter": "test_no_llm_reverse"}, **{"verifier.min_overlap": 0.6})
    assert method.uses_llm is False
    report = method.check(SOURCE, TARGET)
    assert report.details["stages"]["sorter"] == "test_no_llm_reverse"
    assert report.subscores["ShuffleD"] == 1.0 and report.score == 0.0  # both events verified, out of order
    assert any(f.description.startswith("Event order:") for f in report.findings)


@register_stage("test_first_sentence_finder", "evidence_finder")
class FirstSentenceFinder:
    """The source's first sentence as the only passage of every claim (no LLM), with its exact span."""

    uses_llm = False

    def __init__(self, model, options):
        assert model is None

    async def __call__(self, claim, context, source):
        from halluscope.records import Evidence, Span, StepResult

        end = source.index(".") + 1
        return StepResult.success([Evidence(text=source[:end], span=Span(start=0, end=end), relation="related")])


def test_a_plugin_evidence_finder_feeds_probes_judges():
    judged: list[str] = []

    def evaluate(messages):
        judged.append(messages[-1]["content"])
        return json.dumps({"reasoning": "", "verdict": "PASS"})

    llm = LLM(FakeModel(by_reply={"EvaluationReply": evaluate}), cache=None)
    method = get_method(
        "probe", llm=llm, decomposer="sentences", evidence_finder="test_first_sentence_finder", retrieval="never"
    )
    assert method.llm_stages() == {**method.llm_stages(), "evidence_finder": False, "verifier": True}
    report = method.check(SOURCE, TARGET)
    assert method.verifier.finder.name == "test_first_sentence_finder"
    assert [v.label for v in report.verdicts] == ["supported", "supported"]  # every judge said PASS
    assert report.usage.calls == 2 and all("The museum opens at nine." in m for m in judged)  # one per claim
    assert [e.text for e in report.verdicts[1].evidence] == ["The museum opens at nine."]
    searches = report.details["steps"]["evidence_finding"]
    assert [s["outcome"] for s in searches] == ["evidence", "evidence"]


@register_stage("test_first_sentence_selector", "context_selector")
class FirstSentenceSelector:
    """Every claim is checked against the source's first sentence only (no LLM)."""

    uses_llm = False

    def __init__(self, model, options):
        assert model is None

    async def __call__(self, source, claims):
        from halluscope.records import Span
        from halluscope.stages import Context, Selection

        end = source.index(".") + 1
        snippet = Context(text=source[:end], kind="snippet", span=Span(start=0, end=end), rank=0, sentences=(0,))
        return Selection("retrieval", "the plugin's choice", {c.id: [snippet] for c in claims})


@pytest.mark.parametrize("name", sorted(NO_LLM))
def test_a_plugin_context_selector_decides_what_each_claim_is_checked_against(name):
    options = {**NO_LLM[name], "context_selector": "test_first_sentence_selector", "verifier.min_overlap": 0.6}
    method = get_method(name, retriever="bm25", **options)
    assert method.uses_llm is False
    report = method.check(SOURCE, TARGET)
    assert report.details["stages"]["context_selector"] == "test_first_sentence_selector"
    assert report.details["context"]["mode"] == "retrieval"
    # "The cafe sells coffee and tea." against "The museum opens at nine." only: 2 of 6 words
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
