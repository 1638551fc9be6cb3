"""The replay suite (issue 19): each fixture under tests/replays/ holds a real model's replies to one check; the
check is run again offline and must send exactly the recorded requests and reach exactly the recorded outcome.

A failure here after an intended prompt or parsing change: re-record with ``python benchmarks/record_replays.py``
(see docs/testing.md) and review the fixture diff.
"""

from __future__ import annotations

import copy

import pytest

from tests.replay_model import fixtures, load_fixture, outcome, replay

FIXTURES = fixtures()
LLM_METHODS = {"geval", "dcr", "factscore", "probe", "dove", "localize", "improve"}


def test_every_llm_method_has_a_replay_fixture():
    recorded = {load_fixture(p)["method"] for p in FIXTURES}
    assert LLM_METHODS <= recorded, f"no replay fixture for {sorted(LLM_METHODS - recorded)}"
    gated = [load_fixture(p) for p in FIXTURES if load_fixture(p)["options"].get("gate") == "lexical"]
    assert any(f["method"] == "factscore" for f in gated)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_replay_reaches_the_recorded_outcome(path):
    fixture = load_fixture(path)
    report, model = replay(fixture)
    assert not model.unmatched, "\n\n".join(model.unmatched)
    assert model.unused() == 0, f"{model.unused()} recorded replies were never asked for"
    assert outcome(report) == fixture["outcome"]
    assert report.model == fixture["model"]


def test_a_reworded_request_fails_with_a_diff_naming_the_change():
    path = next(p for p in FIXTURES if p.stem == "geval")
    fixture = copy.deepcopy(load_fixture(path))
    first = fixture["calls"][0]["messages"][-1]
    first["content"] = first["content"].replace("Rate", "Score", 1)  # as if the prompt had said "Score" at record time
    report, model = replay(fixture)
    assert len(model.unmatched) >= 1
    message = model.unmatched[0]
    assert "-Score" in message and "+Rate" in message
    assert report.score is None  # the unanswered request scores nothing
