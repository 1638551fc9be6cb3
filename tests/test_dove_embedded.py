"""``dove`` end to end on the real embedded model (short inputs, few calls). The tiny model's replies are
often unusable; what must hold is that the method completes, accounts for every call and never invents a
score: a failure is an unscored report or verdict with its reason."""

from __future__ import annotations

import pytest

from halluscope.methods.dove import Dove

pytestmark = pytest.mark.embedded

SOURCE = "Anna baked a cake. Then Ben arrived. They ate the cake."
TARGET = "Ben arrived. Anna baked a cake."


def _check_invariants(report) -> None:
    assert report.usage.calls + report.usage.cache_hits == len(report.calls) >= 1
    assert all(call.messages for call in report.calls)
    if report.score is not None:  # (an unscored report or verdict carries its reason: the records enforce it)
        assert not report.unscored_reason
        paper = {"S_E", "S_D", "S_EO", "alpha", "ShuffleD"}
        # a probability score (the embedded backend gives token probabilities) adds its own terms beside Eq. 5's
        with_probability = paper | {"S_E_probability", "S_D_probability", "label_score"}
        assert set(report.subscores) in (paper, with_probability)
        if set(report.subscores) == with_probability:  # the Report's score is the probability one, both recorded
            score = report.details["score"]
            assert score["kind"] == "probability" and score["probability_score"] == report.score
            assert score["label_score"] == report.subscores["label_score"]


def test_dove_on_the_embedded_model(embedded_config):
    report = Dove(config=embedded_config).check(SOURCE, TARGET)
    _check_invariants(report)
    assert report.model and report.model.startswith("embedded")
    assert report.calls[0].messages[-1]["content"].startswith("Split the TEXT below")


def test_sentence_level_dove_on_the_embedded_model(embedded_config):
    report = Dove(config=embedded_config, decomposer="sentences", target_order="decomposition").check(SOURCE, TARGET)
    _check_invariants(report)
    assert [c.text for c in report.claims] == ["Ben arrived.", "Anna baked a cake."]
    assert all(v.calls for v in report.verdicts)
