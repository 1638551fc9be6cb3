"""The fused verifier: its file round-trips, its fit gives a noise feature a small weight, it adds no LLM call per
claim, fit-verifier refuses a fit that does not beat the judge (exit 1, no file), and the leave-one-dataset-out
protocol fits each held-out fold on the other datasets only."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from typer.testing import CliRunner

import halluscope.bench.fused as F
from halluscope.bench.fused import ItemClaims, fit_model, fold_of, item_scores, lodo_table
from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.llm.fake import label_logprobs
from halluscope.methods import get_method
from halluscope.methods.fused.features import FEATURE_NAMES, ClaimFeatures, logit
from halluscope.methods.fused.model import FusedModel, load_model
from halluscope.records import Claim, Example, Report, Verdict

pytest.importorskip("sklearn")


def features(judge_p: float | None, **values: float) -> ClaimFeatures:
    base = {n: 0.0 for n in FEATURE_NAMES}
    base.update(embedding_missing=1.0, log_length=2.0)
    base.update(values)
    base.update(judge_logit=logit(judge_p) if judge_p is not None else 0.0, judge_missing=float(judge_p is None))
    base.update(judge_prob=judge_p if judge_p is not None else 0.5)
    return ClaimFeatures(claim_id="c", judge_p=judge_p, **base)


def synthetic_items(n: int, seed: int, fold: str = "a") -> list[ItemClaims]:
    """Items of three claims; a claim is supported with P 0.8, the item consistent when all are. The judge and the
    gate score see the truth through noise; ``position`` is pure noise."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        truth = [rng.random() < 0.8 for _ in range(3)]
        claims = []
        for ok in truth:
            p = 1 / (1 + math.exp(-(2.0 * (1 if ok else -1) + rng.gauss(0, 1.5))))
            gate = min(1.0, max(0.0, (0.75 if ok else 0.4) + rng.gauss(0, 0.15)))
            claims.append(features(p, gate_score=gate, position=rng.random()))
        items.append(ItemClaims(f"{fold}{i}", fold, f"{fold}{i}", int(all(truth)), None, None, claims))
    return items


def test_the_fitted_file_round_trips(tmp_path):
    items = synthetic_items(80, seed=1)
    model = fit_model(items, seed=0)
    path = model.save(tmp_path / "fused.json")
    loaded = load_model(path)
    claims = [f for it in items for f in it.features]
    assert loaded == model
    assert loaded.predict(claims) == model.predict(claims)
    data = json.loads(path.read_text())
    assert data["format"] == "halluscope.fused_verifier" and data["version"] == 1
    assert set(data["coefficients"]) == set(data["features"]) == set(data["standardisation"])
    assert "label_rule" in data["training"] and data["calibration"]["method"] == "platt"


def test_applying_a_file_needs_no_sklearn(tmp_path, monkeypatch):
    path = fit_model(synthetic_items(60, seed=2)).save(tmp_path / "fused.json")
    import sys

    monkeypatch.setitem(sys.modules, "sklearn", None)  # importing it now fails
    claims = [features(0.9, gate_score=0.8), features(0.1, gate_score=0.3)]
    p = load_model(path).predict(claims)
    assert p[0] > p[1] and all(0 < x < 1 for x in p)


def test_a_noise_feature_gets_a_small_weight():
    model = fit_model(synthetic_items(300, seed=3), calibrate=False)
    w = model.weights()
    assert "judge_missing" not in w and "missing_numbers" not in w  # constant on the training claims: left out
    assert w["judge_logit"] > 0.5 and w["gate_score"] > 0.2
    assert abs(w["position"]) < 0.2 * w["judge_logit"]


def test_the_shipped_file_loads():
    model = load_model()
    assert model.features and "judge_logit" in model.features


SOURCE = "The museum opens at nine. The cafe sells tea. It was founded in 1990 by Anna Berg."
TARGET = "The museum opens at nine. The cafe sells coffee and tea. It was founded in 1987 by Anna Berg."


def yes_no_fake() -> FakeModel:
    def answer(messages):
        return "No" if "coffee" in messages[-1]["content"].split("CLAIM:")[-1] else "Yes"

    return FakeModel(by_reply={"text": answer}, logprobs=label_logprobs({"Yes": 0.8, "No": 0.2}))


@pytest.mark.parametrize("shipped", [True, False])
def test_no_extra_llm_call_per_claim(tmp_path, shipped):
    name = "fused" if shipped else f"fused:{fit_model(synthetic_items(60, seed=4)).save(tmp_path / 'f.json')}"
    counts = {}
    for verifier in ("verdict_first", name):
        fake = yes_no_fake()
        method = get_method("dcr", llm=LLM(fake, cache=None), order="verdict_first", explain=False, verifier=verifier)
        report = method.check(SOURCE, TARGET)
        counts[verifier] = len(fake.requests)
        assert len(report.verdicts) == 3
    assert counts[name] == counts["verdict_first"] == 3  # one short reply per claim, nothing more
    assert report.details["stages"]["verifier"] == "fused"
    fused = report.details["verdict_first"]["fused"]["claims"]
    assert set(fused) == {"s1", "s2", "s3"} and fused["s3"]["missing_numbers"] == 1.0
    assert all(v.decided_by == "fused" and v.support_probability is not None for v in report.verdicts)


def test_fused_composes_with_every_claim_method():
    for name in ("dcr", "factscore", "probe", "dove"):
        fake = yes_no_fake()
        extra = {"sorter": "position"} if name == "dove" else {}  # DoveScore's event order without an LLM call
        method = get_method(
            name, llm=LLM(fake, cache=None), verifier="fused", decomposer="sentences", explain=False, **extra
        )
        report = method.check(SOURCE, TARGET)
        assert report.details["stages"]["verifier"] == "fused"
        assert all(v.decided_by == "fused" for v in report.verdicts)


def _bench_folder(tmp_path, judge: dict[str, list[float]], examples: list[Example], name: str = "pairs"):
    """A verdict-first bench output folder whose claims carry the given judge probabilities."""
    tmp_path.mkdir(exist_ok=True)
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(e.model_dump_json() + "\n" for e in examples))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"dataset": str(data), "method_options": {"order": "verdict_first"}}))
    lines = []
    for ex in examples:
        claims = [
            Claim(text=t.strip() + ".", id=f"s{i + 1}", kind="sentence")
            for i, t in enumerate(ex.target.split("."))
            if t.strip()
        ]
        verdicts = [
            Verdict(claim=c, label="supported" if p >= 0.5 else "unsupported", reason="r", support_probability=p)
            for c, p in zip(claims, judge[ex.id])
        ]
        report = Report(method="dcr", score=float(np.mean(judge[ex.id])), claims=claims, verdicts=verdicts)
        lines.append(json.dumps({"example_id": ex.id, "report": report.model_dump(mode="json")}))
    (run / "items.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _pairs(n: int) -> list[Example]:
    out = []
    for i in range(n):
        source = f"The firm of {i} workers sold {100 + i} boats in spring. Its founder lives in Oslo."
        bad = i % 2 == 1
        target = f"The firm sold {900 + i if bad else 100 + i} boats in spring. Its founder lives in Oslo."
        out.append(Example(id=f"p{i}", source=source, target=target, label=0 if bad else 1))
    return out


def test_fit_verifier_refuses_a_fit_that_does_not_beat_the_judge(tmp_path):
    examples = _pairs(24)
    judge = {e.id: ([0.1, 0.9] if e.label == 0 else [0.9, 0.9]) for e in examples}  # the judge alone is perfect
    run = _bench_folder(tmp_path, judge, examples)
    out = tmp_path / "fused.json"
    result = CliRunner().invoke(app, ["fit-verifier", "--runs", str(run), "-O", str(out), "--bootstrap", "20"])
    assert result.exit_code == 1, result.output
    assert "does not beat the judge" in result.output and not out.exists()


def test_fit_verifier_writes_a_fit_that_beats_the_judge_and_check_uses_it(tmp_path):
    examples = _pairs(24)
    rng = random.Random(0)
    judge = {e.id: [rng.uniform(0.3, 0.9), rng.uniform(0.3, 0.9)] for e in examples}  # the judge is noise
    run = _bench_folder(tmp_path, judge, examples)
    out = tmp_path / "fused.json"
    result = CliRunner().invoke(app, ["fit-verifier", "--runs", str(run), "-O", str(out), "--bootstrap", "20"])
    assert result.exit_code == 0, result.output
    model = load_model(out)
    assert model.training["out_of_fold"]["item_auc_fused"] > model.training["out_of_fold"]["item_auc_judge"]
    assert model.weights()["missing_numbers"] < 0  # the invented number is what tells the items apart


def test_lodo_folds_are_datasets():
    assert fold_of("summedits", Example(id="x", source="s", target="t", meta={"domain": "news"})) == "summedits:news"
    assert fold_of("qags:dev", Example(id="x", source="s", target="t")) == "qags"
    assert fold_of("final:dev", Example(id="x", source="s", target="t")) == "final"


def test_lodo_fits_each_held_out_fold_on_the_other_datasets_only(monkeypatch):
    items = [
        *synthetic_items(40, 5, "qags"),
        *synthetic_items(40, 6, "final"),
        *synthetic_items(40, 7, "summedits:news"),
    ]
    trained_on: list[set[str]] = []
    real = F.fit_model

    def recording(train, *args, **kwargs):
        trained_on.append({it.fold for it in train})
        return real(train, *args, **kwargs)

    monkeypatch.setattr(F, "fit_model", recording)
    baselines = {it.item_id: {"rouge": 0.5, "gate": it.features[0].gate_score} for it in items}
    table = lodo_table(items, n_bootstrap=20, baselines=baselines)
    folds = ["qags", "final", "summedits:news"]
    assert [r.name for r in table.folds] == folds and table.pooled.n == 120
    per_column = len(F.FEATURE_SETS)
    for k, held in enumerate(folds):
        calls = trained_on[k * per_column : (k + 1) * per_column]
        assert all(c == set(folds) - {held} for c in calls)
    assert table.pooled.auc["fused"]["value"] is not None and table.pooled.brier is not None


def test_item_scores_are_the_mean_fused_probability():
    items = synthetic_items(60, seed=8)
    model = fit_model(items)
    (score,) = item_scores(model, items[:1])
    assert score == pytest.approx(float(np.mean(model.predict(items[0].features))))
    assert isinstance(model, FusedModel)


def test_the_label_rules_weigh_the_claims_of_an_inconsistent_item_as_documented():
    owner, labels, p = np.array([0, 0, 1, 1]), np.array([1, 0]), np.array([0.9, 0.8, 0.9, 0.2])
    pos, neg = F.claim_weights("lowest", p, owner, labels)
    assert pos.tolist() == [1, 1, 0, 0] and neg.tolist() == [0, 0, 0, 1]
    pos, neg = F.claim_weights("item", p, owner, labels)
    assert pos.tolist() == [0.5, 0.5, 0, 0] and neg.tolist() == [0, 0, 0.5, 0.5]
    pos, neg = F.claim_weights("noisy_or", p, owner, labels)
    assert neg[:2].tolist() == [0, 0] and neg[2:] == pytest.approx([0.1 / 0.82, 0.8 / 0.82])
    assert (pos + neg).tolist() == pytest.approx([1, 1, 1, 1])


def test_bench_fused_prints_the_leave_one_dataset_out_table(tmp_path):
    runs = []
    for name in ("alpha", "beta"):
        examples = [e.model_copy(update={"id": f"{name}{e.id}"}) for e in _pairs(16)]
        rng = random.Random(name)
        judge = {e.id: [rng.uniform(0.3, 0.9), rng.uniform(0.2, 0.9)] for e in examples}
        runs += ["--runs", str(_bench_folder(tmp_path / name, judge, examples, name))]
    out = tmp_path / "lodo.json"
    result = CliRunner().invoke(app, ["bench-fused", *runs, "--bootstrap", "20", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| alpha | 16 (8) |" in result.output and "| beta | 16 (8) |" in result.output  # one fold per dataset
    table = json.loads(out.read_text())
    assert table["pooled"]["n"] == 32 and set(table["pooled"]["auc"]) == set(F.COLUMNS)
