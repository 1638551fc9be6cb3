"""PROBE step metrics as the paper defines them (PROBE paper §4), on hand-built gold with hand-computed values."""

from __future__ import annotations

import json

import pytest

from halluscope.bench.suite_probe import (
    METRIC_KEYS,
    NO_COMPLETE,
    NO_EVIDENCE,
    NO_GOLD,
    NO_STEPS,
    item_counts,
    match_claim,
    probe_metrics,
    probe_steps_suite,
    read_gold,
)
from halluscope.bench.suites import SuiteContext, load_suite_modules
from halluscope.llm import LLM, FakeModel
from halluscope.methods.probe import Probe
from halluscope.records import Claim, Example, Report, Span, Verdict
from tests.test_probe import SOURCE as CURIE_SOURCE
from tests.test_probe import TARGET as CURIE_TARGET
from tests.test_probe import default_pass, responder

# offsets written out by hand; the asserts below check them against the texts
SOURCE = "The Elm Street bridge opened in 1820. It crosses the Avon river. Local masons built it from granite."
#         [0, 37) "The Elm Street bridge opened in 1820."  [38, 64) "It crosses the Avon river."
#         [65, 100) "Local masons built it from granite."
TARGET = "The bridge opened in 1820. Thomas Telford designed it. Masons built it from granite. It spans the Avon."
#         [0, 26) opened   [27, 54) Telford (injected)   [55, 84) masons   [85, 103) Avon

S_OPENED, S_AVON, S_MASONS = (0, 37), (38, 64), (65, 100)
T_OPENED, T_TELFORD, T_MASONS, T_AVON = (0, 26), (27, 54), (55, 84), (85, 103)


def sp(pair: tuple[int, int]) -> dict[str, int]:
    return {"start": pair[0], "end": pair[1]}


def test_hand_written_offsets():
    assert SOURCE[slice(*S_OPENED)] == "The Elm Street bridge opened in 1820."
    assert SOURCE[slice(*S_AVON)] == "It crosses the Avon river."
    assert SOURCE[slice(*S_MASONS)] == "Local masons built it from granite."
    assert TARGET[slice(*T_OPENED)] == "The bridge opened in 1820."
    assert TARGET[slice(*T_TELFORD)] == "Thomas Telford designed it."
    assert TARGET[slice(*T_MASONS)] == "Masons built it from granite."
    assert TARGET[slice(*T_AVON)] == "It spans the Avon."


# complete gold: 3 truthful claims (t1, t2 with two evidence spans, t3), 1 hallucinated (h1), 1 uncertain (u1)
GOLD_META = {
    "gold_claims": [
        {
            "id": "t1",
            "text": "The bridge opened in 1820.",
            "span": sp(T_OPENED),
            "hallucinated": False,
            "evidence": [sp(S_OPENED)],
        },
        {"id": "h1", "text": "Thomas Telford designed the bridge.", "span": sp(T_TELFORD), "hallucinated": True},
        {
            "id": "t2",
            "text": "Masons built the bridge from granite.",
            "span": sp(T_MASONS),
            "hallucinated": False,
            "evidence": [sp(S_MASONS), sp(S_AVON)],
        },
        {
            "id": "t3",
            "text": "The bridge spans the Avon.",
            "span": sp(T_AVON),
            "hallucinated": False,
            "evidence": [sp(S_AVON)],
        },
    ],
    "gold_claims_uncertain": [
        {
            "id": "u1",
            "text": "The bridge was built in the 19th century.",
            "span": sp(T_OPENED),
            "hallucinated": False,
            "reason": "no consensus",
        }
    ],
    "gold_claims_complete": True,
}
FULL = Example(
    id="full",
    source=SOURCE,
    target=TARGET,
    label=0,
    gold_spans=[Span(**sp(T_TELFORD))],
    difficulty="complexity-1",
    meta=GOLD_META,
)


def claim(cid: str, text: str, span: tuple[int, int] | None) -> Claim:
    return Claim(text=text, id=cid, kind="atomic", target_spans=[Span(**sp(span))] if span else [])


def report(claims_labels: list[tuple[Claim, str]], steps: dict | None = None) -> Report:
    verdicts = [Verdict(claim=c, label=label, reason="r") for c, label in claims_labels]  # type: ignore[arg-type]
    return Report(
        method="m",
        score=0.5,
        claims=[c for c, _ in claims_labels],
        verdicts=verdicts,
        details={"steps": steps} if steps else {},
    )


C1 = claim("c1", "The bridge opened in 1820.", T_OPENED)  # -> t1
C2 = claim("c2", "Thomas Telford designed the bridge.", T_TELFORD)  # -> h1
C3 = claim("c3", "Masons built it from granite.", T_MASONS)  # -> t2 (similarity 78)
C4 = claim("c4", "The bridge was built in the 19th century.", T_OPENED)  # -> u1 (uncertain)
C5 = claim("c5", "Granite is a rock.", None)  # -> nothing (unplaced)


def q(status: str, span: tuple[int, int] | None = None) -> dict:
    return {"quote": "...", "status": status, **({"span": sp(span)} if span else {})}


def j(cid: str, span: tuple[int, int], accepted: bool | None) -> dict:
    return {"claim_id": cid, "evidence_span": sp(span), "accepted": accepted}


STEPS = {
    "evidence_finding": [
        {"claim_id": "c1", "quotes": [q("verified", (30, 45))], "error": None},  # 7 chars on [0, 37): < half of 15
        {"claim_id": "c2", "quotes": [q("verified", S_AVON)], "error": None},
        {"claim_id": "c3", "quotes": [q("verified", S_MASONS), q("rejected")], "error": None},
        {"claim_id": "c4", "quotes": [], "error": None},
        {"claim_id": "c5", "quotes": [], "error": "evidence finding failed: cut-off JSON"},
    ],
    "evidence_evaluation": [
        j("c1", (30, 45), True),  # not on t1's gold evidence: no gold label for this judgment
        j("c2", S_AVON, False),  # hallucinated h1: nothing accepted -> correct
        j("c3", S_MASONS, False),  # truth t2: its gold evidence failed -> wrong
        j("c3", S_AVON, None),  # undecided: ignored
    ],
}
FULL_REPORT = report(
    [(C1, "supported"), (C2, "unsupported"), (C3, "unsupported"), (C4, "unsupported"), (C5, "supported")], STEPS
)


def test_matching_needs_similar_text_and_overlapping_spans():
    gold = read_gold(FULL)
    assert gold is not None and gold.complete and len(gold.certain) == 4 and len(gold.hallucinated) == 1
    ids = {g.id: g for g in gold.claims}
    assert match_claim(C1, gold.claims) is ids["t1"]
    assert match_claim(C3, gold.claims) is ids["t2"]
    assert match_claim(C4, gold.claims) is ids["u1"]
    assert match_claim(C5, gold.claims) is None
    # the right words at the wrong place do not match; no span at all: the text decides
    assert match_claim(claim("x", "Thomas Telford designed the bridge.", T_AVON), gold.claims) is None
    assert match_claim(claim("x", "Thomas Telford designed the bridge.", None), gold.claims) is ids["h1"]
    # one character of overlap is not a match (the old suite counted this flagged claim as correct)
    assert match_claim(claim("x", "The bridge opened in 1820.", (53, 60)), gold.claims) is None


def test_item_counts_by_hand():
    c = item_counts(FULL, FULL_REPORT)
    # decomposition: 5 predicted, c4 matches an uncertain claim (left out); c1, c2, c3 match; c5 does not
    assert (c["dec_pred"], c["dec_pred_matched"], c["dec_pred_uncertain"]) == (4, 3, 1)
    assert (c["dec_gold"], c["dec_gold_matched"]) == (4, 3)  # t3 missed
    # localization: flagged c2 (h1: 27 chars shared), c3 (t2: 29 false chars), c4 (uncertain: left out)
    assert (c["loc_pred_claims"], c["loc_pred_matched"]) == (2, 1)
    assert (c["loc_pred_chars"], c["loc_gold_chars"], c["loc_tp_chars"]) == (56, 27, 27)
    # evidence finding over t1, t2, t3 (have evidence): t3 unmatched; t1 found (30,45): a miss; t2 found one of two
    assert (c["ef_claims"], c["ef_partial"], c["ef_complete"], c["ef_unmatched"]) == (2, 1, 0, 1)
    # evidence evaluation: t2 judged on its gold evidence and failed; h1 nothing accepted
    assert (c["ee_truth"], c["ee_truth_correct"], c["ee_halluc"], c["ee_halluc_correct"]) == (1, 0, 1, 1)
    # proxies over c1, c3 (c2 hallucinated, c4 uncertain, c5 unusable search)
    assert (c["proxy_truth_claims"], c["proxy_truth_with_evidence"]) == (2, 2)
    assert (c["proxy_ee_truth"], c["proxy_ee_truth_correct"]) == (2, 1)
    assert (c["quotes"], c["quotes_verified"]) == (4, 3)


def test_metrics_by_hand():
    m = probe_metrics([FULL], [FULL_REPORT], n_bootstrap=0)
    assert set(METRIC_KEYS) <= set(m)
    v = {k: m[k]["value"] for k in METRIC_KEYS}
    assert v["decomposition_precision"] == pytest.approx(3 / 4)
    assert v["decomposition_recall"] == pytest.approx(3 / 4)
    assert v["localization_precision"] == pytest.approx(27 / 56)
    assert v["localization_recall"] == 1.0
    assert v["localization_f1"] == pytest.approx(2 * (27 / 56) / (27 / 56 + 1))  # = 54/83
    assert v["evidence_finding_partial"] == pytest.approx(1 / 2)
    assert v["evidence_finding_complete"] == 0.0
    assert v["evidence_evaluation_accuracy"] == pytest.approx(1 / 2)
    assert v["evidence_evaluation_accuracy_truth"] == 0.0
    assert v["evidence_evaluation_accuracy_hallucinated"] == 1.0
    assert v["decomposition_recall_hallucinated"] == 1.0
    assert v["evidence_found_truth_proxy"] == 1.0
    assert v["evidence_evaluation_accuracy_truth_proxy"] == pytest.approx(1 / 2)
    assert v["quote_verified_rate"] == pytest.approx(3 / 4)
    assert all("reason" not in m[k] for k in METRIC_KEYS)


# hallucinated-only gold (the default of `generate inject`), a method without step records
SHORT_TARGET = "The bridge opened in 1820. It had a toll."
#               [0, 26) opened   [27, 41) toll (injected)
HALLUC_ONLY = Example(
    id="h",
    source=SOURCE,
    target=SHORT_TARGET,
    label=0,
    meta={
        "gold_claims": [{"id": "h1", "text": "The bridge charged a toll.", "span": sp((27, 41)), "hallucinated": True}],
        "gold_claims_complete": False,
    },
)
# flagged, overlapping the gold span by one character, on another subject: a false positive, not a hit
ONE_CHAR = report([(claim("c1", "The bridge opened in 1820.", (0, 28)), "unsupported")])


def test_metrics_over_two_items_and_not_computable_reasons():
    assert SHORT_TARGET[27:41] == "It had a toll."
    m = probe_metrics([FULL, HALLUC_ONLY], [FULL_REPORT, ONE_CHAR], n_bootstrap=0)
    assert m["localization_precision"]["value"] == pytest.approx(27 / (56 + 28))
    assert m["localization_recall"]["value"] == pytest.approx(27 / (27 + 14))
    assert m["decomposition_recall_hallucinated"]["value"] == pytest.approx(1 / 2)
    assert m["decomposition_precision"]["value"] == pytest.approx(3 / 4)  # only the complete item counts

    alone = probe_metrics([HALLUC_ONLY], [ONE_CHAR], n_bootstrap=0)
    assert alone["localization_precision"]["value"] == 0.0 and alone["localization_recall"]["value"] == 0.0
    assert alone["localization_f1"]["value"] == 0.0
    for key, reason in (
        ("decomposition_precision", NO_COMPLETE),
        ("decomposition_recall", NO_COMPLETE),
        ("evidence_finding_partial", NO_EVIDENCE),
        ("evidence_finding_complete", NO_EVIDENCE),
        ("evidence_evaluation_accuracy", NO_EVIDENCE),
        ("evidence_evaluation_accuracy_hallucinated", NO_STEPS),
        ("evidence_found_truth_proxy", NO_STEPS),
    ):
        assert alone[key]["value"] is None and alone[key]["reason"] == reason, key

    quiet = report([(claim("c1", "The bridge opened in 1820.", (0, 26)), "supported")])
    silent = probe_metrics([HALLUC_ONLY], [quiet], n_bootstrap=0)  # nothing flagged: P undefined, R and F1 zero
    assert silent["localization_precision"]["value"] is None
    assert "no predicted" in silent["localization_precision"]["reason"]
    assert silent["localization_recall"]["value"] == 0.0 and silent["localization_f1"]["value"] == 0.0

    plain = Example(id="p", source=SOURCE, target=SHORT_TARGET, gold_spans=[Span(start=27, end=41)])
    none = probe_metrics([plain], [ONE_CHAR], n_bootstrap=0)
    assert all(none[k]["value"] is None and none[k]["reason"] == NO_GOLD for k in METRIC_KEYS)


def test_legacy_injected_claims_and_bad_gold():
    legacy = Example(
        id="old",
        source=SOURCE,
        target=SHORT_TARGET,
        label=0,
        meta={
            "generator": "inject",
            "injected_claims": [
                {"fact": "The bridge charged a toll.", "inserted_text": "It had a toll.", "span": sp((27, 41))}
            ],
        },
    )
    gold = read_gold(legacy)
    assert gold is not None and not gold.complete
    assert [g.text for g in gold.hallucinated] == ["The bridge charged a toll."]
    old_truth = Example(id="t", source=SOURCE, target=SHORT_TARGET, label=1, meta={"generator": "inject"})
    assert read_gold(old_truth) is not None and read_gold(old_truth).claims == ()  # type: ignore[union-attr]
    for bad in (
        {"text": "x", "hallucinated": True},  # no span
        {"text": "x", "span": sp((0, 999)), "hallucinated": True},  # outside the target
        {"text": "", "span": sp((0, 1)), "hallucinated": True},
        {"text": "x", "span": sp((0, 1)), "hallucinated": "yes"},
        {"text": "x", "span": sp((0, 1))},
    ):  # the flag is required
        with pytest.raises(ValueError):
            read_gold(legacy.model_copy(update={"meta": {"gold_claims": [bad]}}))


def probe_report() -> Report:
    llm = LLM(FakeModel(by_reply=responder(default_pass)), cache=None)
    return Probe(llm=llm, retrieval="never").check(CURIE_SOURCE, CURIE_TARGET)


# the Curie texts of tests/test_probe.py: [0, 27) Warsaw, [29, 67) Nobel 1903, [69, 95) Oxford (hallucinated);
# source [0, 39) "Marie Curie was born in Warsaw in 1867.", [85, 131) "In 1903 she shared the Nobel Prize in Physics."
CURIE = Example(
    id="curie",
    source=CURIE_SOURCE,
    target=CURIE_TARGET,
    label=0,
    meta={
        "gold_claims_complete": True,
        "gold_claims": [
            {
                "id": "t1",
                "text": "Marie Curie was born in Warsaw.",
                "span": sp((0, 27)),
                "hallucinated": False,
                "evidence": [sp((0, 39))],
            },
            {
                "id": "t2",
                "text": "Marie Curie won the Nobel Prize in Physics in 1903.",
                "span": sp((29, 67)),
                "hallucinated": False,
                "evidence": [sp((85, 131))],
            },
            {"id": "h1", "text": "Marie Curie taught at Oxford.", "span": sp((69, 95)), "hallucinated": True},
        ],
    },
)


def test_a_probe_report_scored_end_to_end():
    assert CURIE_TARGET[69:95] == "She also taught at Oxford." and CURIE_SOURCE[85:131].startswith("In 1903")
    m = probe_metrics([CURIE], [probe_report()], n_bootstrap=0)
    v = {k: m[k]["value"] for k in METRIC_KEYS}
    # the fake probe decomposes into exactly the gold claims, finds each truth's gold sentence (and, for 1903,
    # the Paris sentence too, which its judge fails: not gold evidence, so no gold label), fails Oxford's passage
    assert v["decomposition_precision"] == 1.0 and v["decomposition_recall"] == 1.0
    assert v["evidence_finding_partial"] == 1.0 and v["evidence_finding_complete"] == 1.0
    assert v["evidence_evaluation_accuracy"] == 1.0 and m["counts"]["ee_truth"] == 2 and m["counts"]["ee_halluc"] == 1
    assert v["localization_precision"] == 1.0 and v["localization_recall"] == 1.0
    assert m["counts"]["loc_tp_chars"] == 26
    assert m["counts"]["quotes"] == 5 and m["counts"]["quotes_verified"] == 4  # the invented 1903 quote


def test_suite_runs_and_is_registered(tmp_path):
    assert "probe_steps" in load_suite_modules()
    unscored = Report(method="probe", unscored_reason="x")
    no_gold = Example(id="n", source="s", target="t")
    result = probe_steps_suite(
        [CURIE, CURIE, no_gold],
        [probe_report(), unscored, probe_report()],
        SuiteContext(out_dir=tmp_path, method="probe", model="fake", dataset="t", n_bootstrap=50),
    )
    m = result.metrics
    assert (m["n"], m["n_scored"], m["n_unscored"]) == (2, 1, 1)  # the item without gold is not counted
    assert m["localization_f1"]["value"] == 1.0
    assert len(result.tables) == 2 and "EF partial" in result.tables[0][1] and "proxy" in result.tables[1][1]
    json.dumps(m)  # serialisable


def test_complete_evidence_finding_says_when_max_evidence_caps_it():
    capped = FULL_REPORT.model_copy(
        update={"details": {"steps": STEPS, "verifier": {"evidence_finder": {"max_evidence": 1}}}}
    )
    m = probe_metrics([FULL], [capped], n_bootstrap=0)
    cap = m["evidence_finding_complete"]["capped"]
    assert cap["max_evidence"] == 1 and cap["claims"] == 1 and "max_evidence" in cap["note"]  # t2 has two passages
    assert "capped" not in probe_metrics([FULL], [FULL_REPORT], n_bootstrap=0)["evidence_finding_complete"]


def test_claim_matching_is_named_and_a_semantic_similarity_can_match_a_paraphrase():
    from halluscope.bench.suite_probe import claim_matcher

    gold = read_gold(FULL)
    ids = {g.id: g for g in gold.claims}
    paraphrase = claim("x", "Stonemasons constructed it out of granite rock.", T_MASONS)
    assert match_claim(paraphrase, gold.claims) is None  # lexical: too few shared tokens
    same_meaning = {("Stonemasons constructed it out of granite rock.", ids["t2"].text): 90.0}
    assert match_claim(paraphrase, gold.claims, similarity=lambda a, b: same_meaning.get((a, b), 0.0)) is ids["t2"]
    _, threshold, name = claim_matcher("lexical")
    assert name.startswith("lexical") and threshold == 70
    with pytest.raises(ValueError):
        claim_matcher("exact")


def test_semantic_claim_matching_with_the_real_encoder():
    from halluscope.bench.suite_probe import claim_matcher
    from halluscope.retrieval import EmbeddingsUnavailable, embeddings_available

    if not embeddings_available():
        pytest.skip("the embeddings extra is not installed")
    try:
        similarity, threshold, name = claim_matcher("semantic")
    except ValueError as exc:
        if isinstance(exc.__cause__, EmbeddingsUnavailable):
            pytest.skip(str(exc))
        raise
    assert name.startswith("semantic (all-MiniLM-L6-v2")
    assert similarity("Masons built it from granite.", "Stonemasons constructed it out of granite.") >= threshold
    assert similarity("Masons built it from granite.", "The bridge opened in 1820.") < threshold


def test_an_unscored_item_counts_as_finding_nothing_in_the_all_items_values(tmp_path):
    unscored = Report(method="m", unscored_reason="evidence finding failed")
    res = probe_steps_suite(
        [FULL, HALLUC_ONLY],
        [FULL_REPORT, unscored],
        SuiteContext(out_dir=tmp_path, method="m", model="m", dataset="d", n_bootstrap=0),
    )
    m = res.metrics
    assert m["coverage"] == {"scored": 1, "total": 2, "share": 0.5}
    # the hallucinated gold of the unscored item is missed: recall over every item is lower
    assert m["localization_recall_all"]["value"] < m["localization_recall"]["value"]
    # all unscored: localization recall is still a number (0), not "cannot compute"
    none = probe_steps_suite(
        [FULL], [unscored], SuiteContext(out_dir=tmp_path, method="m", model="m", dataset="d", n_bootstrap=0)
    ).metrics
    assert none["localization_recall_all"]["value"] == 0.0 and none["localization_f1_all"]["value"] == 0.0
