"""PROBE step metrics on crafted examples and reports (exact counts)."""

from __future__ import annotations

import json

import pytest

from halluscope.bench.suite_probe import item_counts, probe_metrics, probe_steps_suite
from halluscope.bench.suites import SuiteContext, load_suite_modules
from halluscope.llm import LLM, FakeModel
from halluscope.methods.probe import Probe
from halluscope.records import Claim, Example, Report, Span, Verdict
from tests.test_probe import SOURCE, TARGET, default_pass, responder

# TARGET = "Marie Curie, born in Warsaw, won the Nobel Prize in Physics in 1903. She also taught at Oxford."
OXFORD = Span(start=TARGET.index("She also"), end=len(TARGET))
GOLD = Example(id="x", source=SOURCE, target=TARGET, label=0, gold_spans=[OXFORD],
               meta={"injected_claims": [{"fact": "Marie Curie taught at Oxford.", "inserted_text": OXFORD.of(TARGET),
                                          "span": OXFORD.model_dump()}]})


def probe_report() -> Report:
    llm = LLM(FakeModel(responder=responder(default_pass)), cache=None)
    return Probe(llm=llm, retrieval="never").check(SOURCE, TARGET)


def test_item_counts_on_a_probe_report():
    c = item_counts(GOLD, probe_report())
    assert c["pred_claims"] == 1 and c["pred_correct"] == 1        # c3 flagged, overlaps the gold span
    assert c["gold_units"] == 1 and c["gold_found"] == 1
    assert c["gold_decomposed"] == 1 and c["claims"] == 3 and c["claims_traceable"] == 3
    assert c["truth_claims"] == 2 and c["truth_with_evidence"] == 2
    assert c["quotes"] == 5 and c["quotes_verified"] == 4            # the invented 1903 quote was rejected
    assert c["ee_halluc"] == 1 and c["ee_halluc_correct"] == 1      # c3's only passage was judged FAIL
    assert c["ee_truth"] == 2 and c["ee_truth_correct"] == 2


def _report(flags: list[tuple[str, Span | None]]) -> Report:
    claims, verdicts = [], []
    for i, (label, span) in enumerate(flags):
        claim = Claim(text=f"claim {i}", id=f"c{i}", target_spans=[span] if span else [])
        claims.append(claim)
        verdicts.append(Verdict(claim=claim, label=label, reason="r"))  # type: ignore[arg-type]
    return Report(method="m", score=0.5, claims=claims, verdicts=verdicts)


def test_claim_level_precision_recall_for_any_method():
    other = Span(start=0, end=10)
    consistent = Example(id="ok", source=SOURCE, target=TARGET, label=1, gold_spans=[])
    reports = [_report([("unsupported", OXFORD), ("unsupported", other), ("supported", other)]),
               _report([("unsupported", other), ("contradicted", None)])]
    m = probe_metrics([GOLD, consistent], reports, n_bootstrap=0)
    assert m["claim_precision"]["value"] == pytest.approx(1 / 4)  # 1 correct of 4 flagged (one without a span)
    assert m["claim_recall"]["value"] == 1.0
    assert m["claim_f1"]["value"] == pytest.approx(2 * 0.25 / 1.25)
    assert m["evidence_partial"]["value"] is None and m["ee_accuracy"]["value"] is None  # no probe steps
    assert m["has_probe_steps"] == 0


def test_gold_evidence_partial_and_complete():
    warsaw = SOURCE.index("Marie Curie was born")
    physics = SOURCE.index("In 1903")
    paris = SOURCE.index("She moved")
    gold_evidence = [
        {"target_span": {"start": 0, "end": 27}, "source_spans": [{"start": warsaw, "end": warsaw + 20}]},
        {"target_span": {"start": 29, "end": 67}, "source_spans": [{"start": physics, "end": physics + 10},
                                                                  {"start": 0, "end": 5}]},
    ]
    ex = GOLD.model_copy(update={"meta": {**GOLD.meta, "gold_evidence": gold_evidence}})
    m = probe_metrics([ex], [probe_report()], n_bootstrap=0)
    assert m["evidence_partial"]["value"] == 1.0
    assert m["evidence_complete"]["value"] == 0.5  # the second claim found 1903 but not the (0,5) span
    assert paris > 0


def test_suite_runs_and_is_registered(tmp_path):
    assert "probe_steps" in load_suite_modules()
    unscored = Report(method="probe", unscored_reason="x")
    result = probe_steps_suite([GOLD, GOLD], [probe_report(), unscored],
                               SuiteContext(out_dir=tmp_path, method="probe", model="fake", dataset="t", n_bootstrap=50))
    assert result.metrics["n_unscored"] == 1 and result.metrics["n_scored"] == 1
    assert result.metrics["claim_recall"]["value"] == 1.0
    assert len(result.tables) == 2 and "EE acc." in result.tables[1][1]
    json.dumps(result.metrics)  # serialisable


def test_item_counts_leave_out_unusable_evidence_and_count_invented_quotes():
    def reply(messages):
        user = next(m["content"] for m in messages if m["role"] == "user")
        if "Find the passages" in user and "Oxford" in user:
            return '{"reas'  # cut off: the evidence step failed for c3
        if "Find the passages" in user and "Warsaw" in user.split("SOURCE:")[0]:
            return json.dumps({"evidence": ["Marie Curie studied in Warsaw."]})  # invented
        return responder(default_pass)(messages)

    report = Probe(llm=LLM(FakeModel(responder=reply), cache=None), retrieval="never").check(SOURCE, TARGET)
    assert [v.label for v in report.verdicts] == ["unscored", "supported", "unscored"]
    c = item_counts(GOLD, report)
    assert c["pred_claims"] == 0 and c["gold_found"] == 0           # nothing flagged from unusable evidence
    assert c["quotes"] == 4 and c["quotes_verified"] == 2           # c1's invented quote counts as a model quote
    assert c["truth_claims"] == 2 and c["truth_with_evidence"] == 1  # c3 (unusable reply) is left out
    assert c["ee_halluc"] == 0


def test_item_counts_on_a_retrieval_report():
    llm = LLM(FakeModel(responder=responder(default_pass)), cache=None)
    report = Probe(llm=llm, retrieval="always", top_k=2, window=0, retriever="bm25").check(SOURCE, TARGET)
    finding = report.details["steps"]["evidence_finding"]
    assert [f["claim_id"] for f in finding] == ["c1", "c2", "c3"] and all(f["narrowed"] for f in finding)
    c = item_counts(GOLD, report)
    assert c["pred_claims"] == 1 and c["pred_correct"] == 1
    assert c["truth_claims"] == 2 and c["truth_with_evidence"] == 2 and c["ee_truth_correct"] == 2
