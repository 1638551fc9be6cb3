"""``probe`` end to end on the real embedded model over a long SQuALITY story (one short summary sentence).

Kept small: BM25 narrowing (no embedding-model load), one passage per claim, short replies. The tiny model's
answers are not judged for quality; the test checks that every step ran, every quote that was kept is real
source text, every claim span is inside the target, and nothing failed silently."""

from __future__ import annotations

import json

import pytest

from halluscope.methods import get_method
from halluscope.records import Report

pytestmark = pytest.mark.embedded


def test_probe_on_a_long_source_with_the_embedded_model(embedded_config, data_dir):
    rows = [json.loads(line) for line in (data_dir / "squality" / "dev.jsonl").read_text().splitlines()]
    row = max(rows, key=lambda r: len(r["document"]))  # ~6.5k words
    source = row["document"]
    target = "The Qornt send Ambassador Nitworth an ultimatum demanding the planet."
    config = embedded_config.with_overrides(max_tokens=192, embedded_n_ctx=4096)
    probe = get_method("probe", config=config, retriever="bm25", top_k=2, window=0, max_evidence=1)
    report = probe.check(source, target)
    Report.model_validate_json(report.model_dump_json())

    assert report.usage.calls >= 2  # decomposition + at least one evidence-finding call
    judged = [v for v in report.verdicts if v.label != "unscored"]
    if report.score is not None:  # the fraction of judged claims that are supported
        assert report.score == pytest.approx(sum(v.label == "supported" for v in judged) / len(judged))
    steps = report.details["steps"]
    assert report.details["source_mode"].startswith("retrieval")  # the story does not fit the 4k context
    assert steps["decomposition"]["claims"], "no claims, not even the sentence fallback"
    for claim in report.claims:
        for span in claim.target_spans:
            assert 0 <= span.start < span.end <= len(target)
    for verdict in report.verdicts:  # (an unscored verdict carries its reason: the record enforces it)
        for ev in verdict.evidence:
            assert ev.span is not None and ev.span.of(source) == ev.text
    for f in steps["evidence_finding"]:
        assert f["narrowed"] and f["snippets"]
        for q in f["quotes"]:
            assert q["status"] in ("verified", "rejected", "duplicate")
