"""An LLM-call budget per check (``max_calls``: an option of every method, ``Config.max_calls`` by default):
past it the check is unscored with the reason, never scored from the calls made so far.

On 22b0ee2 a 65 KB target with factscore made 2,001 calls for one check; only the time limit bounded it."""

from __future__ import annotations

import pytest

from halluscope.config import Config
from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method
from tests.stage_fuzz import SOURCE, TARGET, StageScript

LONG_TARGET = " ".join(f"The council met on day {i} and approved item {i}." for i in range(1300))  # ~65 KB


def _llm(script: StageScript) -> LLM:
    return LLM(FakeModel(responder=script), cache=None)


def test_a_long_factscore_target_stops_at_the_default_budget():
    assert len(LONG_TARGET) > 60_000
    script = StageScript()
    report = get_method("factscore", llm=_llm(script), config=Config(cache=False)).check(SOURCE, LONG_TARGET)
    assert Config(cache=False).max_calls == 1000
    assert sum(script.asked.values()) <= 1000  # not 2,001
    assert report.score is None
    assert "budget of 1000 LLM calls" in report.unscored_reason and "max_calls" in report.unscored_reason


@pytest.mark.parametrize(
    "method, options", [("factscore", {}), ("dcr", {}), ("probe", {}), ("factscore", {"batch_size": 3})]
)
def test_a_check_past_its_option_budget_is_unscored_never_cut(method, options):
    full = StageScript()
    needed = len(get_method(method, llm=_llm(full), **options).check(SOURCE, TARGET).calls)
    assert needed >= 1
    script = StageScript()
    report = get_method(method, llm=_llm(script), max_calls=needed - 1, **options).check(SOURCE, TARGET)
    assert report.score is None and "max_calls" in report.unscored_reason
    assert sum(script.asked.values()) == needed - 1 == len(report.calls)
    exact = get_method(method, llm=_llm(StageScript()), max_calls=needed, **options).check(SOURCE, TARGET)
    assert exact.score is not None  # the budget it needs is enough


def test_the_budget_comes_from_the_config_and_zero_means_no_limit():
    script = StageScript()
    report = get_method("dcr", llm=_llm(script), config=Config(cache=False, max_calls=1)).check(SOURCE, TARGET)
    assert report.score is None and "budget of 1 LLM calls" in report.unscored_reason
    assert (
        get_method("dcr", llm=_llm(StageScript()), config=Config(cache=False, max_calls=1), max_calls=0)
        .check(SOURCE, TARGET)
        .score
        is not None
    )


def test_the_option_is_recorded_and_validated():
    m = get_method("geval", llm=_llm(StageScript()), max_calls=7)
    assert m.options()["max_calls"] == 7 and m.max_calls == 7
    assert "max_calls" not in get_method("geval", llm=_llm(StageScript())).options()  # records unchanged
    for bad in (-1, 2.5, "x", True):
        with pytest.raises(OptionsError, match="max_calls"):
            get_method("geval", llm=_llm(StageScript()), max_calls=bad)


def test_improve_counts_its_evaluator_calls_against_one_budget():
    script = StageScript()
    report = get_method("improve", llm=_llm(script), max_calls=2).check(SOURCE, TARGET)
    assert report.score is None and "max_calls" in report.unscored_reason
    assert sum(script.asked.values()) <= 2
