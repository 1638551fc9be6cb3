"""Typed ``Report.details``: each method's details validate against its declared model, on the
replay fixtures (a real model's replies); an undeclared key, a wrong type or an undeclared null fails."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from halluscope.cli.main import app
from halluscope.methods import get_method, list_methods, method_class
from halluscope.methods.dcr import DCR, DcrDetails
from halluscope.methods.details import FreeDetails, MethodDetails
from halluscope.methods.dove import DoveDetails
from halluscope.methods.factscore import FactScoreDetails
from halluscope.methods.geval import GEval, GevalDetails
from halluscope.methods.improve import ImproveDetails, improve_details
from halluscope.methods.probe import ProbeDetails
from halluscope.records import Report
from tests.conftest import fake_llm
from tests.replay_model import ReplayDataMissing, fixtures, load_fixture, replay

FIXTURES = fixtures()
SOURCE = "The council approved the budget on Tuesday."
TARGET = "The council approved the budget on Friday."


def load_or_skip(path):
    try:
        return load_fixture(path)
    except ReplayDataMissing as exc:
        pytest.skip(f"replay needs the shared dev data: {exc}")


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_replayed_details_validate_against_the_methods_model(path):
    fixture = load_or_skip(path)
    report, _ = replay(fixture)
    model = get_method(fixture["method"], llm=fake_llm(), **fixture["options"]).details_model()
    assert model.model_config["extra"] == "forbid", f"{fixture['method']} declares no details model"
    parsed = model.model_validate(report.details)
    assert report.details and parsed.model_fields_set == set(report.details)


def test_every_builtin_method_declares_its_details():
    builtins = [n for n in list_methods() if method_class(n).__module__.startswith("halluscope.")]
    assert {"dcr", "factscore", "probe", "dove", "geval", "localize", "improve", "gate"} <= set(builtins)
    for name in builtins:  # plugins another test registered in this process may keep free details
        details = method_class(name).Details
        assert details is not FreeDetails and details.model_config["extra"] == "forbid", name


@pytest.mark.parametrize(
    ("model", "values", "complaint"),
    [
        (DcrDetails, {"amc_weight": "paper"}, "amc_weight"),  # a typo
        (DcrDetails, {"amc_weights": "papr"}, "amc_weights"),  # not one of the modes
        (DcrDetails, {"dce_is_consistent": "yes"}, "dce_is_consistent"),  # strict: no coercion from a string
        (DcrDetails, {"dce_is_consistent": None}, "may not be null"),
        (FactScoreDetails, {"descriptions_before_dedup": "3"}, "descriptions_before_dedup"),
        (DoveDetails, {"decomposition": {"event_facts": "one fact"}}, "decomposition"),
        (ProbeDetails, {"stages": ["probe"]}, "stages"),
        (GevalDetails, {"prompt": "mine"}, "prompt"),
    ],
)
def test_a_bad_key_or_value_fails_where_it_is_built(model, values, complaint):
    with pytest.raises(ValidationError, match=complaint):
        model.build(**values)


def test_build_returns_the_values_unchanged_in_order():
    values = {"dce_is_consistent": True, "amc_weights": "auto", "other_reasons": [{"reason": "r", "sentence": None}]}
    built = DcrDetails.build(**values)
    assert built == values and list(built) == list(values)
    assert FactScoreDetails.build(descriptions_before_dedup=3)["descriptions_before_dedup"] == 3


class _TypoGEval(GEval):  # not registered: only built here; declares its details, so they are checked
    Details = GevalDetails

    async def run(self, source: str, target: str) -> Report:
        report = await super().run(source, target)
        return report.model_copy(update={"details": {**report.details, "resaon": "misspelt"}})


def test_a_method_writing_an_undeclared_key_fails_its_check():
    reply = '{"reason": "The day is wrong.", "score": 2}'
    assert GEval(llm=fake_llm(reply)).check(SOURCE, TARGET).details == {
        "reason": "The day is wrong.",
        "prompt": "reasoned",
    }
    with pytest.raises(ValidationError, match="resaon"):
        _TypoGEval(llm=fake_llm(reply)).check(SOURCE, TARGET)


def test_a_claim_method_writing_a_wrong_type_fails_on_a_replay(monkeypatch):
    path = next(p for p in FIXTURES if p.stem == "dcr")
    fixture = load_or_skip(path)
    run = DCR.run

    async def wrong_type(self, source, target):
        report = await run(self, source, target)
        return report.model_copy(update={"details": {**report.details, "dce_is_consistent": "yes"}})

    monkeypatch.setattr(DCR, "run", wrong_type)
    with pytest.raises(ValidationError, match="dce_is_consistent"):
        replay(fixture)


class _PluginGEval(GEval):  # a plugin's subclass that declares no details model of its own
    async def run(self, source: str, target: str) -> Report:
        report = await super().run(source, target)
        return report.model_copy(update={"details": {**report.details, "plugin_note": 1}})


def test_a_subclass_from_outside_halluscope_without_its_own_model_is_not_checked():
    """A plugin that extends a built-in method and writes keys of its own keeps working: its details are free,
    while the built-in itself (and a subclass that declares ``Details``) stays checked."""
    reply = '{"reason": "The day is wrong.", "score": 2}'
    plugin = _PluginGEval(llm=fake_llm(reply))
    assert plugin.details_model() is FreeDetails
    assert plugin.check(SOURCE, TARGET).details["plugin_note"] == 1
    assert GEval(llm=fake_llm(reply)).details_model() is GevalDetails
    assert _TypoGEval(llm=fake_llm(reply)).details_model() is GevalDetails


def test_a_method_without_a_details_model_keeps_free_details():
    class Free(GEval):
        Details = FreeDetails

    report = Free(llm=fake_llm('{"reason": "ok", "score": 5}')).check(SOURCE, TARGET)
    assert report.details == {"reason": "ok", "prompt": "reasoned"}
    assert FreeDetails.build(anything=None, x=1) == {"anything": None, "x": 1}


def test_improve_details_are_its_evaluators_plus_the_rounds():
    assert set(DcrDetails.model_fields) < set(ImproveDetails.model_fields)
    over_factscore = improve_details(FactScoreDetails)
    assert {"dedup_note", "rounds", "stop_reason"} <= set(over_factscore.model_fields)
    assert "amc_weights" not in over_factscore.model_fields
    with pytest.raises(ValidationError, match="amc_weights"):
        over_factscore.build(amc_weights="paper")
    improve = get_method("improve", llm=fake_llm(), evaluator="factscore")
    assert improve.details_model() is over_factscore and issubclass(over_factscore, MethodDetails)


def test_methods_command_lists_the_details_keys():
    result = CliRunner().invoke(app, ["methods", "dcr"])
    assert result.exit_code == 0
    assert "DcrDetails" in result.output and "  amc_weights : " in result.output
    rouge = CliRunner().invoke(app, ["methods", "rouge"])
    assert "NoDetails" in rouge.output and "(none)" in rouge.output
