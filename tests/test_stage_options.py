"""Stages are built from (model, options, collaborators), each validating its own options; a claim method's
verifier, aggregator, localizer and gate take namespaced options (``verifier.judges``), never the host method's."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method
from halluscope.methods.factscore import FACTSCORE_DESCRIBE_BATCH_PROMPT
from halluscope.records import Claim, Verdict
from halluscope.stages import PROTOCOLS, Selection, StageOptions, build_stage, register_stage, stage_options, stages
from halluscope.stages.protocols import PipelineRun

SOURCE = "The museum opens at nine. It has a large garden. The cafe sells tea."
TARGET = "The museum opens at nine. The cafe sells coffee."


def fake() -> LLM:
    return LLM(FakeModel(default="{}"), cache=None)


def test_a_verifier_swapped_into_dove_does_not_pick_up_doves_batch_size():
    method = get_method("dove", llm=fake(), verifier="factscore", batch_size=3)
    assert method.verifier.batch_size == 1  # was 3: the factscore verifier read dove's option
    assert FACTSCORE_DESCRIBE_BATCH_PROMPT.name not in {p.name for p in method.used_prompts()}
    assert method.opts.batch_size == 3  # dove's own option is still dove's


def test_a_swapped_verifier_takes_its_own_namespaced_options():
    method = get_method(
        "dove", llm=fake(), verifier="factscore", **{"verifier.batch_size": 4, "verifier.describe": False}
    )
    assert (method.verifier.batch_size, method.verifier.describe) == (4, False)
    assert method.opts.batch_size == 1
    assert method.options()["verifier.batch_size"] == 4 and method.options()["verifier.describe"] is False


def test_the_methods_own_verifier_still_takes_its_flat_options():
    assert get_method("dove", llm=fake(), batch_size=4).verifier.batch_size == 4
    assert get_method("factscore", llm=fake(), describe=False).verifier.describe is False
    assert get_method("dcr", llm=fake(), amc="rule").verifier.amc_mode == "rule"
    assert get_method("probe", llm=fake(), samples=3).verifier.opts.samples == 3
    assert "verifier.batch_size" not in get_method("dove", llm=fake(), batch_size=4).options()


def test_dove_takes_the_probe_verifier_with_its_judges(monkeypatch):
    """`dove -o verifier=probe -o verifier.judges=a,b` used to fail with an OptionsError."""
    from halluscope.methods import base

    built: list[str | None] = []

    def get_llm(config):
        built.append(config.model)
        return LLM(FakeModel(default="{}"), cache=None)

    monkeypatch.setattr(base, "get_llm", get_llm)
    method = get_method(
        "dove",
        llm=fake(),
        verifier="probe",
        **{"verifier.judges": "a,b", "verifier.samples": 2, "verifier.batch_size": 3},
    )
    assert method.verifier.opts.judges == ["a", "b"] and method.verifier.batch_size == 3
    assert len(method.verifier.evaluator.judges) == 4  # 2 judge models x 2 samples
    assert built == ["a", "b"]  # each judge's client built once, at the main model's endpoint
    method.close()


def test_each_claim_method_composes_its_own_aggregator_and_localizer_from_its_flat_options():
    own = {
        "dcr": ("dcr", "dcr"),
        "probe": ("probe", "probe"),
        "dove": ("dove", "dove"),
        "factscore": ("supported_fraction", "factscore"),
    }
    for name, (aggregator, localizer) in own.items():
        method = get_method(name, llm=fake())
        assert (method.aggregator.name, method.localizer.name) == (aggregator, localizer)
    dcr = get_method("dcr", llm=fake(), amc_weights="auto")
    assert dcr.aggregator.options.amc_weights == "auto"  # the method's flat option reaches its own aggregator
    factscore = get_method("factscore", llm=fake(), deduplicator="fuzzy", dedup_threshold=70.0)
    assert factscore.localizer.deduplicator().name == "fuzzy"
    assert factscore.localizer.deduplicator().threshold == 70.0  # the method's flat option reaches its deduplicators


def test_a_swapped_localizer_takes_only_its_namespaced_options():
    probe = get_method("probe", llm=fake(), localizer="factscore", **{"localizer.deduplicator": "none"})
    assert probe.localizer.name == "factscore" and probe.localizer.deduplicator().name == "none"
    assert probe.localizer.options.describe is True  # the stage's default, not read from probe
    dcr = get_method("dcr", llm=fake(), aggregator="supported_fraction", amc_weights="auto")
    assert dcr.aggregator.name == "supported_fraction"  # amc_weights stays dcr's, not the swapped stage's
    with pytest.raises(OptionsError, match="aggregator stage 'supported_fraction'"):
        get_method("dcr", llm=fake(), aggregator="supported_fraction", **{"aggregator.amc_weights": "auto"})
    with pytest.raises(OptionsError, match="no localizer stage named 'nope'"):
        get_method("dcr", llm=fake(), localizer="nope")


async def test_dcr_aggregator_on_another_verifiers_verdicts_reads_an_empty_trace():
    dcr = get_method("dcr", llm=fake(), verifier="factscore")
    claims = [Claim(text="a", id="s1"), Claim(text="b", id="s2")]
    verdicts = [
        Verdict(claim=claims[0], label="supported", reason="ok"),
        Verdict(claim=claims[1], label="unsupported", reason="no"),
    ]
    run = PipelineRun("src", "tgt", claims, Selection("full", "fits", {}), verdicts)
    aggregate = await dcr.aggregator(run)
    assert aggregate.score == 0.5 and aggregate.subscores["Z"] == 0.0  # (+1 - 1) / 2 -> Z = 0 -> 0.5
    assert run.details["other_reasons"] == [] and run.details["amc_weights"] == "paper"


def test_a_stage_option_given_flat_to_a_method_that_lacks_it_says_how_to_give_it():
    with pytest.raises(OptionsError, match=r"verifier\.judges"):
        get_method("dove", llm=fake(), verifier="probe", judges="a,b")


def test_a_namespaced_option_without_its_stage_chosen_is_an_error():
    with pytest.raises(OptionsError, match="no verifier is chosen"):
        get_method("dcr", llm=fake(), **{"verifier.batch_size": 2})
    with pytest.raises(OptionsError, match="no gate is chosen"):
        get_method("dcr", llm=fake(), **{"gate.top_k": 2})


def test_a_bad_namespaced_option_names_the_stage_and_lists_its_options():
    with pytest.raises(OptionsError) as bad_name:
        get_method("factscore", llm=fake(), verifier="dove", **{"verifier.judges": "a"})
    assert "verifier stage 'dove'" in str(bad_name.value) and "batch_size" in str(bad_name.value)
    with pytest.raises(OptionsError, match=r"allowed: 1 to 64"):
        get_method("factscore", llm=fake(), verifier="dove", **{"verifier.batch_size": 0})
    with pytest.raises(OptionsError, match="verifier.OPTION or .*gate.OPTION or sorter.OPTION"):
        get_method("dove", llm=fake(), **{"retrieval.top_k": 2})
    with pytest.raises(OptionsError, match="decomposer stage 'dove'"):
        get_method("dove", llm=fake(), decomposer="dove", **{"decomposer.kind": "x"})
    with pytest.raises(OptionsError, match="no decomposer is chosen"):  # as on every claim method
        get_method("dove", llm=fake(), **{"decomposer.kind": "x"})


def test_gate_options_are_namespaced_too():
    method = get_method("dcr", llm=fake(), gate="lexical", **{"gate.top_k": 5, "gate.flip_overlap": 0.5})
    assert (method.gate.opts.top_k, method.gate.opts.flip_overlap) == (5, 0.5)
    with pytest.raises(OptionsError, match="gate stage 'lexical'"):
        get_method("dcr", llm=fake(), gate="lexical", **{"gate.uncertain": "unscored"})  # the gate method's only


def test_the_python_api_passes_namespaced_options():
    report = halluscope.check(
        SOURCE,
        TARGET,
        "dcr",
        llm=LLM(FakeModel(default="{}"), cache=None),
        verifier="factscore",
        **{"verifier.describe": False},
    )
    assert report.details["stages"]["verifier"] == "factscore"


def test_the_retrieve_step_builds_from_its_options_and_runs():
    from halluscope.retrieval import Retrieve

    stage = Retrieve.from_options(
        None, Retrieve.Options.parse("retrieve", {"retriever": "bm25", "top_k": 1, "window": 0})
    )
    (snippets,) = asyncio.run(stage(SOURCE, ["tea"]))
    assert [s.text for s in snippets] == ["The cafe sells tea."]


def test_register_stage_requires_a_stage_kind():
    with pytest.raises(TypeError):
        register_stage("no_kind")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="'generator' is no stage kind; kinds: decomposer, context_selector"):
        register_stage("retrieve", "generator")  # type: ignore[arg-type]
    assert not [s for s in stages() if s.protocol not in PROTOCOLS]


def test_build_stage_validates_options_and_passes_only_named_collaborators():
    with pytest.raises(OptionsError, match="verifier stage 'dove'.*Valid options: batch_size"):
        build_stage("verifier", "dove", fake(), {"bach_size": 2})
    with pytest.raises(OptionsError, match="checkpoint"):
        stage_options("verifier", "nli", {})
    assert stage_options("verifier", "nli:some/model").checkpoint == "some/model"
    seen = {}

    @register_stage("test_stage_options_probe", "verifier")
    class Recording:
        class Options(StageOptions):
            strict: bool = False

        def __init__(self, model, options, *, prompts):
            seen.update(model=model, strict=options.strict, prompts=prompts)

        def reserve_tokens(self, claims):
            return 0

        async def __call__(self, claims, context, source):
            return []

    build_stage("verifier", "test_stage_options_probe", "M", {"strict": True}, prompts="P", named_llm="N")
    assert seen == {"model": "M", "strict": True, "prompts": "P"}


def test_cli_check_refuses_a_bad_namespaced_option(tmp_path):
    source, target = tmp_path / "s.txt", tmp_path / "t.txt"
    source.write_text(SOURCE)
    target.write_text(TARGET)
    result = CliRunner().invoke(
        app,
        [
            "check",
            "-s",
            str(source),
            "-t",
            str(target),
            "--method",
            "dove",
            "-o",
            "verifier=probe",
            "-o",
            "verifier.judgez=a",
        ],
    )
    assert result.exit_code == 2
    assert "verifier stage 'probe'" in result.output and "judges" in result.output


@pytest.mark.parametrize(
    ("method", "option", "instead"),
    [
        ("probe", "evidence=retrieval", "evidence_finder=probe (was evidence=llm) or evidence_finder=top_sentences"),
        ("factscore", "dedup=fuzzy", "deduplicator=NAME"),
        ("dove", "decomposer=llm", "decomposer=dove"),
    ],
)
def test_cli_check_refuses_an_older_spelling_naming_the_new_one(tmp_path, method, option, instead):
    source, target = tmp_path / "s.txt", tmp_path / "t.txt"
    source.write_text(SOURCE)
    target.write_text(TARGET)
    result = CliRunner().invoke(app, ["check", "-s", str(source), "-t", str(target), "--method", method, "-o", option])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert f"{option} is no longer an option of {method}" in output and instead in output


def test_a_papers_option_for_a_stage_is_translated_when_the_options_are_parsed():
    from halluscope.methods.dcr import DcrOptions
    from halluscope.methods.improve import ImproveOptions

    assert DcrOptions.parse("dcr", {"level": "paragraph"}).decomposer == "paragraph"
    assert DcrOptions.parse("dcr", {"level": "sentence"}).decomposer == "sentences"
    assert "level" not in DcrOptions.model_fields  # no code after parsing sees the alias
    assert {"level", "decomposer"} <= DcrOptions.option_names()  # what reproduce -o accepts for a dcr row
    assert get_method("dcr", llm=fake(), level="paragraph").options()["decomposer"] == "paragraph"
    assert ImproveOptions.parse("improve", {"level": "paragraph"}).level == "paragraph"  # improve's own option
    assert get_method("improve", llm=fake(), level="paragraph").evaluator.chosen["decomposer"][0] == "paragraph"
    listed = CliRunner().invoke(app, ["methods", "dcr"])
    assert "Alias: level=sentence|paragraph is decomposer=sentences|paragraph" in listed.output


def test_cli_stages_lists_each_stages_options():
    result = CliRunner().invoke(app, ["stages", "verifier", "probe"])
    assert result.exit_code == 0
    assert "judges : list[str] | NoneType = None" in result.output
    assert "consensus : float = 0.75" in result.output
    every = CliRunner().invoke(app, ["stages"])
    assert "checkpoint : str = (required)" in every.output and "claim_kind" in every.output


def test_the_service_takes_namespaced_options(tmp_path):
    from halluscope.config import Config
    from halluscope.server.service import Service
    from halluscope.server.settings import ServerSettings

    service = Service(Config(), ServerSettings(jobs_db=tmp_path / "jobs.sqlite"), fake())
    try:
        method = asyncio.run(service.method("dove", {"verifier": "factscore", "verifier.batch_size": 2}))
        assert method.verifier.batch_size == 2
    finally:
        service.stop()


def test_describe_stages_is_json_with_options():
    rows = json.loads(json.dumps(halluscope.stages.describe_stages()))
    probe = next(r for r in rows if (r["protocol"], r["name"]) == ("verifier", "probe"))
    assert {o["name"] for o in probe["options"]} >= {"judges", "samples", "batch_size"}


def test_the_encoder_gate_takes_its_thresholds_as_options():
    opts = stage_options("gate", "encoder:my-verifier", {"high": 0.95, "low": 0.05})
    assert (opts.checkpoint, opts.high, opts.low) == ("my-verifier", 0.95, 0.05)
    with pytest.raises(OptionsError, match="checkpoint is given twice"):
        stage_options("gate", "encoder:my-verifier", {"checkpoint": "other"})


# ------------------------------------------------------------------------------ every stage kind chosen by name


def test_the_decomposer_is_chosen_by_name_on_every_claim_method():
    for name in ("dcr", "factscore", "probe", "dove"):
        method = get_method(name, llm=fake(), decomposer="sentences")
        assert method.make_decomposer().name == "sentences" and method.options()["decomposer"] == "sentences"
        report = method.check(SOURCE, TARGET)
        assert [c.text for c in report.claims] == ["The museum opens at nine.", "The cafe sells coffee."]
        assert report.details["stages"]["decomposer"] == "sentences"
    assert "decomposer" not in get_method("dcr", llm=fake()).options()  # recorded only when chosen
    paragraph = get_method("dcr", llm=fake(), decomposer="paragraph")
    assert (
        paragraph.paragraph_level
        and paragraph.used_prompts() == get_method("dcr", llm=fake(), level="paragraph").used_prompts()
    )
    with pytest.raises(OptionsError, match="level=paragraph and decomposer=sentences"):
        get_method("dcr", llm=fake(), level="paragraph", decomposer="sentences")
    with pytest.raises(OptionsError, match="level: one of sentence, paragraph"):
        get_method("dcr", llm=fake(), level="word")
    with pytest.raises(OptionsError, match="no decomposer stage named 'nope'"):
        get_method("probe", llm=fake(), decomposer="nope")
    dove = get_method("dove", llm=fake(), decomposer="sentences", **{"decomposer.claim_kind": "sentence"})
    assert dove.make_decomposer().kind == "sentence"  # dove's event default gives way to the namespaced option
    assert get_method("dove", llm=fake(), decomposer="sentences").make_decomposer().kind == "event"
    assert get_method("dove", llm=fake()).make_decomposer().name == "dove"
    with pytest.raises(OptionsError, match="decomposer=llm is no longer an option of dove: write decomposer=dove"):
        get_method("dove", llm=fake(), decomposer="llm")


def test_the_deduplicator_is_chosen_by_name_and_dedup_is_refused():
    method = get_method("factscore", llm=fake(), deduplicator="fuzzy", **{"deduplicator.dedup_threshold": 70.0})
    dedup = method.localizer.deduplicator()
    assert (dedup.name, dedup.threshold) == ("fuzzy", 70.0)
    assert method.localizer.options.deduplicator == "fuzzy"
    assert not method.localizer.needs_llm(method.localizer.options)
    assert "factscore_dedup@" not in method.prompt_version
    assert get_method("factscore", llm=fake()).chosen["deduplicator"][0] == "llm"
    with pytest.raises(OptionsError, match="dedup=fuzzy is no longer an option of factscore: write deduplicator="):
        get_method("factscore", llm=fake(), dedup="fuzzy")
    with pytest.raises(OptionsError, match="dedup=none is no longer an option of localizer stage 'factscore'"):
        get_method("probe", llm=fake(), localizer="factscore", **{"localizer.dedup": "none"})
    with pytest.raises(OptionsError, match="no deduplicator stage named 'magic'"):
        get_method("factscore", llm=fake(), deduplicator="magic")
    with pytest.raises(OptionsError, match="deduplicator stage 'none'"):
        get_method("factscore", llm=fake(), deduplicator="none", **{"deduplicator.dedup_threshold": 70.0})


def test_the_evidence_finder_is_chosen_by_name_and_evidence_is_refused():
    method = get_method("probe", llm=fake(), evidence_finder="top_sentences", **{"evidence_finder.max_evidence": 2})
    assert (method.verifier.finder.name, method.verifier.finder.max_evidence) == ("top_sentences", 2)
    flat = get_method("probe", llm=fake(), evidence_finder="top_sentences", max_evidence=4)
    assert flat.verifier.finder.max_evidence == 4  # the method's flat option reaches its two finders
    assert get_method("probe", llm=fake()).verifier.finder.name == "probe"
    namespaced = get_method("probe", llm=fake(), verifier="probe", **{"verifier.evidence_finder": "top_sentences"})
    assert namespaced.verifier.finder.name == "top_sentences"  # the verifier's own option
    assert "probe_find_evidence" not in method.prompt_version
    with pytest.raises(OptionsError, match="evidence=retrieval is no longer an option of probe: write evidence_finder"):
        get_method("probe", llm=fake(), evidence="retrieval")
    with pytest.raises(OptionsError, match="evidence=llm is no longer an option of verifier stage 'probe'"):
        get_method("dove", llm=fake(), verifier="probe", **{"verifier.evidence": "llm"})
    with pytest.raises(OptionsError, match="only probe's own verifier finds evidence"):
        get_method("probe", llm=fake(), verifier="factscore", evidence_finder="top_sentences")


def test_the_sorter_and_the_context_selector_are_chosen_by_name():
    dove = get_method("dove", llm=fake(), sorter="position", **{"sorter.top_k": 1})
    assert dove.source_sorter.name == "position" and dove.source_sorter.opts.top_k == 1
    assert get_method("dove", llm=fake(), sorter="position", window=0).source_sorter.opts.window == 0  # dove's own
    with pytest.raises(OptionsError, match="sorter stage 'position'"):
        get_method("dove", llm=fake(), sorter="position", **{"sorter.sorter_input": "shuffled"})
    method = get_method("dcr", llm=fake(), context_selector="retrieval", **{"context_selector.top_k": 5})
    assert method.selector.name == "retrieval" and method.selector.opts.top_k == 5
    with pytest.raises(OptionsError, match="no context_selector stage named 'nope'"):
        get_method("dcr", llm=fake(), context_selector="nope")
