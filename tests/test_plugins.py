"""Third-party methods, stages, suites and datasets through entry points: a tiny distribution on sys.path
(a ``*.dist-info`` with an ``entry_points.txt``) built here, with a verifier defined in this test."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from halluscope import plugins
from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.methods import get_method, list_methods
from halluscope.plugins import PluginWarning

PLUGIN = textwrap.dedent('''
    """A third-party verifier, method, suite and dataset (test only)."""
    from pydantic import Field

    from halluscope.bench.datasets import Dataset
    from halluscope.bench.suites import SuiteResult, register_suite
    from halluscope.methods.base import Method
    from halluscope.options import StageOptions
    from halluscope.records import Example, Finding, Report, Verdict
    from halluscope.stages import Aggregate, register_stage


    @register_stage("hs_plugin_words", "verifier")
    class WordVerifier:
        """Supported when every word of the claim occurs in the context (no LLM)."""

        uses_llm = False

        class Options(StageOptions):
            min_words: int = Field(default=1, ge=1, le=10)
            """Claims shorter than this are left unscored."""

        def __init__(self, model, options):
            self.min_words = options.min_words

        def reserve_tokens(self, claims):
            return 0

        async def __call__(self, claims, context, source):
            words = set(context.text.lower().replace(".", " ").split())
            out = []
            for claim in claims:
                mine = claim.text.lower().replace(".", " ").split()
                if len(mine) < self.min_words:
                    out.append(Verdict.unscored(claim, f"fewer than {self.min_words} words"))
                elif set(mine) <= words:
                    out.append(Verdict(claim=claim, label="supported", reason="every word occurs"))
                else:
                    out.append(Verdict(claim=claim, label="unsupported", reason="a word is missing"))
            return out


    @register_stage("hs_plugin_tolerant", "aggregator")
    class TolerantAggregator:
        """1 when at most max_flagged claims are unsupported or contradicted, else 0 (no LLM)."""

        uses_llm = False

        class Options(StageOptions):
            max_flagged: int = Field(default=0, ge=0, le=10)
            """How many flagged claims still score 1."""

        def __init__(self, model, options):
            self.max_flagged = options.max_flagged

        async def __call__(self, run):
            flagged = sum(v.label in ("unsupported", "contradicted") for v in run.verdicts)
            return Aggregate(1.0 if flagged <= self.max_flagged else 0.0, {"flagged": float(flagged)})


    @register_stage("hs_plugin_marks", "localizer")
    class MarkLocalizer:
        """One finding per claim not supported, described as PREFIX: claim (no LLM)."""

        uses_llm = False

        class Options(StageOptions):
            prefix: str = Field(default="flagged", min_length=1)
            """The first word of each finding."""

        def __init__(self, model, options):
            self.prefix = options.prefix

        async def __call__(self, run):
            return [Finding(description=f"{self.prefix}: {v.claim.text}", kind="unsupported",
                            target_spans=list(v.claim.target_spans), claim_ids=[v.claim.id])
                    for v in run.verdicts if v.label != "supported"]


    class Always(Method):
        name = "hs_plugin_always"
        description = "Scores every pair 1 (test plugin)."
        uses_llm = False

        async def run(self, source, target):
            return Report(method=self.name, score=1.0)


    @register_suite("hs_plugin_suite")
    def count_suite(examples, reports, ctx):
        return SuiteResult({"n": float(len(examples))})


    def load_tiny(root, subset):
        return Dataset("hs_plugin_tiny", subset,
                       [Example(id="t1", source="The cat sat.", target="The cat sat.", label=1)], [])
''')

ENTRY_POINTS = textwrap.dedent("""
    [halluscope.stages]
    words = hs_plugin_mod
    tolerant = hs_plugin_mod:TolerantAggregator
    marks = hs_plugin_mod:MarkLocalizer

    [halluscope.methods]
    always = hs_plugin_mod:Always
    broken = hs_plugin_missing_module:Nothing

    [halluscope.suites]
    count = hs_plugin_mod

    [halluscope.datasets]
    tiny = hs_plugin_mod:load_tiny
""")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "hs_plugin_mod.py").write_text(PLUGIN)
    info = tmp_path / "hs_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hs-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.reset()
    yield
    plugins.reset()


SOURCE = "The museum opens at nine. The cafe sells tea."
TARGET = "The museum opens at nine. The cafe sells coffee."


@pytest.mark.filterwarnings("ignore::halluscope.plugins.PluginWarning")  # the broken entry point, tested below
@pytest.mark.parametrize("name", ["dcr", "factscore", "probe", "dove"])
def test_a_plugin_verifier_works_on_every_claim_method_with_its_own_options(plugin, name):
    extra = {"dove": {"sorter": "position", "decomposer": "sentences"}}.get(name, {})
    method = get_method(
        name, llm=LLM(FakeModel(), cache=None), verifier="hs_plugin_words", **{"verifier.min_words": 2}, **extra
    )
    method.make_decomposer = lambda: method.build_stage("decomposer", "sentences")  # no LLM call
    report = method.check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    assert report.details["stages"]["verifier"] == "hs_plugin_words"
    with pytest.raises(ValueError, match="verifier stage 'hs_plugin_words'.*min_words"):
        get_method(name, llm=LLM(FakeModel(), cache=None), verifier="hs_plugin_words", **{"verifier.min_words": 0})


@pytest.mark.filterwarnings("ignore::halluscope.plugins.PluginWarning")  # the broken entry point, tested below
@pytest.mark.parametrize("name", ["dcr", "factscore", "probe", "dove"])
def test_a_plugin_aggregator_and_localizer_replace_every_claim_methods_own_with_their_own_options(plugin, name):
    def check(**options):
        method = get_method(
            name,
            llm=LLM(FakeModel(), cache=None),
            verifier="hs_plugin_words",
            aggregator="hs_plugin_tolerant",
            localizer="hs_plugin_marks",
            **options,
        )
        method.make_decomposer = lambda: method.build_stage("decomposer", "sentences")  # no LLM call
        return method, method.check(SOURCE, TARGET)

    method, report = check()  # one claim of two is unsupported; the defaults: max_flagged=0, prefix "flagged"
    assert [v.label for v in report.verdicts] == ["supported", "unsupported"]
    assert report.score == 0.0 and report.subscores["flagged"] == 1.0  # (probe adds its quote counts)
    assert [f.description for f in report.findings] == ["flagged: The cafe sells coffee."]
    assert report.findings[0].target_spans[0].start == TARGET.index("The cafe")
    assert method.aggregator.name == "hs_plugin_tolerant" and method.localizer.name == "hs_plugin_marks"
    method, report = check(**{"aggregator.max_flagged": 1, "localizer.prefix": "odd"})
    assert report.score == 1.0
    assert [f.description for f in report.findings] == ["odd: The cafe sells coffee."]
    assert method.options()["aggregator.max_flagged"] == 1 and method.options()["localizer.prefix"] == "odd"
    with pytest.raises(ValueError, match="aggregator stage 'hs_plugin_tolerant'.*max_flagged"):
        check(**{"aggregator.max_flagged": 99})
    with pytest.raises(ValueError, match="localizer stage 'hs_plugin_marks'.*prefix"):
        check(**{"localizer.prefix": ""})


def test_plugin_stages_and_methods_are_listed_and_a_broken_one_is_a_warning(plugin):
    with pytest.warns(PluginWarning, match="broken.*hs_plugin_missing_module"):
        assert "hs_plugin_always" in list_methods()
    assert get_method("hs_plugin_always").check("a", "b").score == 1.0
    stages = CliRunner().invoke(app, ["stages", "verifier"])
    assert stages.exit_code == 0
    assert "hs_plugin_words" in stages.output and "min_words : int = 1" in stages.output
    listed = CliRunner().invoke(app, ["stages"])
    assert "hs_plugin_tolerant" in listed.output and "max_flagged : int = 0" in listed.output
    assert "hs_plugin_marks" in listed.output
    methods = CliRunner().invoke(app, ["methods"])
    assert methods.exit_code == 0 and "hs_plugin_always" in methods.output


def test_plugin_suites_and_datasets_are_found(plugin):
    from halluscope.bench.datasets import load_dataset
    from halluscope.bench.suites import load_suite_modules

    assert "hs_plugin_suite" in load_suite_modules()
    dataset = load_dataset("tiny:dev")
    assert [e.id for e in dataset.examples] == ["t1"] and dataset.subset == "dev"


def test_the_server_lists_and_runs_a_plugin_method(plugin, tmp_path):
    from fastapi.testclient import TestClient

    from halluscope.config import Config
    from halluscope.server import ServerSettings
    from halluscope.server.app import create_app

    settings = ServerSettings(jobs_db=tmp_path / "jobs.sqlite")
    application = create_app(Config(cache=False), settings, llm=LLM(FakeModel(), cache=None))
    # the server's warm-up lists the methods when it starts, so the warning may come before the first request
    with pytest.warns(PluginWarning, match="broken"), TestClient(application) as client:
        assert "hs_plugin_always" in client.get("/methods").json()
        reply = client.post("/check", json={"source": "a", "target": "b", "method": "hs_plugin_always"})
        assert reply.status_code == 200 and reply.json()["score"] == 1.0
