"""The combiner (``halluscope fit-combiner``, :mod:`halluscope.bench.combiner`) and the ``ensemble`` method that
runs it: weights, refusal, unscored members, the cascade, the CLI (offline: rouge + gate, and the fake model)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from halluscope.bench.combiner import CombinerError, MemberRuns, fit_combiner, write_combiner
from halluscope.cli.main import app
from halluscope.llm import LLM, FakeModel
from halluscope.methods import OptionsError, get_method
from halluscope.methods.ensemble import CombinerFeature, CombinerFile, CombinerMember, load_combiner
from halluscope.methods.rouge import Rouge
from halluscope.records import Example, Report

pytest.importorskip("sklearn", reason="fitting a combiner needs the bench extra (scikit-learn)")


def _member(name: str, scores: list[float | None], method: str = "rouge", subscores=None) -> MemberRuns:
    reports = {}
    for i, s in enumerate(scores):
        if s is None:
            reports[f"x{i}"] = Report(method=method, unscored_reason="scripted: no score")
        else:
            reports[f"x{i}"] = Report(method=method, score=s, subscores=(subscores or {}).get(i, {}))
    return MemberRuns(spec=CombinerMember(name=name, method=method), reports=reports)


def _examples(labels) -> list[Example]:
    return [Example(id=f"x{i}", source="s", target="t", label=int(y)) for i, y in enumerate(labels)]


def _labels(n: int = 200) -> np.ndarray:
    return np.array([i % 2 for i in range(n)])


def test_a_noise_member_gets_a_small_weight():
    rng = np.random.default_rng(0)
    y = _labels()
    good = np.clip(0.35 + 0.3 * y + rng.normal(0, 0.15, len(y)), 0, 1)
    noise = rng.uniform(0, 1, len(y))
    fit = fit_combiner(
        _examples(y),
        [_member("good", list(good)), _member("noise", list(noise), "gate")],
        features="score",
        n_bootstrap=50,
    )
    weights = {f.name: f.weight for f in fit.combiner.features}
    assert weights["good.score"] > 1.0
    assert abs(weights["noise.score"]) < 0.1 * weights["good.score"]
    assert fit.combiner.member_weight("good") == weights["good.score"]
    cv = fit.combiner.cv
    assert cv["metric"] == "AUC" and cv["folds"] == 5
    assert set(cv["members"]) == {"good", "noise"}
    assert cv["members"]["noise"]["score"]["value"] < 0.65 < cv["members"]["good"]["score"]["value"]
    assert fit.combiner.data["n"] == 200 and len(fit.combiner.data["ids_sha256"]) == 64


def test_the_saved_file_reproduces_scikit_learns_model():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(4)
    y = _labels(80)
    a = np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, len(y)), 0, 1)
    b = rng.uniform(0, 1, len(y))
    members = [_member("a", list(a)), _member("b", list(b), "gate")]
    c = CombinerFile.model_validate_json(fit_combiner(_examples(y), members, n_bootstrap=0).combiner.model_dump_json())
    expected = (
        make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
        .fit(np.c_[a, b], y)
        .predict_proba(np.c_[a, b])[:, 1]
    )
    got = [c.predict({"a": members[0].reports[f"x{i}"], "b": members[1].reports[f"x{i}"]}) for i in range(len(y))]
    assert got == pytest.approx(list(expected), abs=1e-6)


def test_a_combiner_that_cannot_beat_its_best_member_is_refused():
    y = _labels(60)
    u = np.random.default_rng(1).uniform(0, 1, len(y))
    perfect = np.where(y == 1, 0.7 + 0.3 * u, 0.3 * u)  # AUC 1: nothing can beat it
    noise = np.random.default_rng(2).uniform(0, 1, len(y))
    fit = fit_combiner(
        _examples(y), [_member("perfect", list(perfect)), _member("noise", list(noise), "gate")], n_bootstrap=20
    )
    assert fit.refusal is not None and "does not beat its best member, perfect" in fit.refusal
    assert not fit.combiner.accepted and fit.combiner.refusal == fit.refusal


def test_two_complementary_members_make_an_accepted_combiner():
    rng = np.random.default_rng(3)
    y = _labels()
    a = y + rng.normal(0, 0.8, len(y))
    b = y + rng.normal(0, 0.8, len(y))
    to01 = lambda v: list(np.clip((v + 2) / 5, 0, 1))  # noqa: E731
    fit = fit_combiner(_examples(y), [_member("a", to01(a)), _member("b", to01(b), "gate")], n_bootstrap=50)
    assert fit.refusal is None and fit.combiner.accepted
    cv = fit.combiner.cv
    assert cv["combiner"]["value"] > max(cv["members"]["a"]["score"]["value"], cv["members"]["b"]["score"]["value"])
    assert cv["gain_over_best"]["value"] > 0 and cv["gain_over_best"]["low"] is not None


def test_an_unscored_member_is_an_indicator_and_imputed_never_dropped():
    y = _labels(40)
    scores: list[float | None] = [0.2 + 0.6 * v for v in y]
    for i in (0, 7, 13):
        scores[i] = None
    fit = fit_combiner(
        _examples(y),
        [_member("m", scores), _member("n", list(np.linspace(0, 1, 40)), "gate")],
        n_bootstrap=0,
        features="score",
    )
    features = {f.name: f for f in fit.combiner.features}
    assert features["m.score"].n_imputed == 3
    assert "m.unscored" in features and features["m.unscored"].source == "unscored"
    assert fit.combiner.dropped_features["n.unscored"] == "the member was never unscored on these items"
    assert fit.combiner.cv["members"]["m"]["coverage"] == {"scored": 37, "total": 40, "share": 0.925}
    assert "training mean" in fit.combiner.missing_values


def test_exact_copies_are_left_out_with_the_reason():
    y = _labels(40)
    ratings = [1 + 4 * ((i * 7) % 10) / 10 for i in range(40)]
    member = _member("g", [(r - 1) / 4 for r in ratings], "geval", {i: {"rating": r} for i, r in enumerate(ratings)})
    other = _member("o", list(np.linspace(0, 1, 40)), "gate")
    fit = fit_combiner(_examples(y), [member, other], n_bootstrap=0)
    assert fit.combiner.dropped_features["g.rating"] == "an exact linear combination of g.score"


def test_human_scores_give_a_ridge_combiner_judged_by_spearman():
    rng = np.random.default_rng(5)
    human = rng.uniform(1, 5, 60)
    a = np.clip((human - 1) / 4 + rng.normal(0, 0.2, 60), 0, 1)
    b = np.clip((human - 1) / 4 + rng.normal(0, 0.2, 60), 0, 1)
    examples = [Example(id=f"x{i}", source="s", target="t", human_score=float(h)) for i, h in enumerate(human)]
    fit = fit_combiner(
        examples, [_member("a", list(a)), _member("b", list(b), "gate")], features="score", n_bootstrap=50
    )
    c = fit.combiner
    assert c.kind == "score" and c.cv["metric"] == "Spearman" and c.estimator["class"].endswith("Ridge")
    assert c.target_range == (pytest.approx(human.min()), pytest.approx(human.max()))
    assert c.cv["combiner"]["value"] > c.cv["members"]["a"]["score"]["value"] and fit.refusal is None
    low = c.predict({"a": Report(method="rouge", score=0.0), "b": Report(method="gate", score=0.0)})
    high = c.predict({"a": Report(method="rouge", score=1.0), "b": Report(method="gate", score=1.0)})
    assert 0.0 <= low < 0.25 and 0.75 < high <= 1.0
    assert "| **combiner** (a + b) |" in fit.markdown() and "Spearman" in fit.markdown()


def test_too_few_items_of_a_label_is_a_clear_error():
    with pytest.raises(CombinerError, match="at least 2 items of each label"):
        fit_combiner(_examples([1, 1, 1, 1, 0]), [_member("m", [0.1, 0.2, 0.3, 0.4, 0.5])], n_bootstrap=0)


# --- the ensemble method -------------------------------------------------------------------------------------

SOURCE = "The cat sat on the mat in Paris on 3 May. It was a sunny day and the cat slept for hours."
COPY = "The cat sat on the mat in Paris on 3 May."
HALF = "The cat sat on a red sofa while dogs barked loudly outside."


def _cascade_combiner(tmp_path, rouge_mean: float) -> str:
    """rouge (no LLM, weight 1) and geval (LLM, weight 0.5): rouge alone settles the decision when it is far
    from ``rouge_mean``; geval can move the combined logit by at most +-1."""
    c = CombinerFile(
        kind="binary",
        estimator={"class": "hand-written for a test"},
        intercept=0.0,
        threshold=0.5,
        members=[
            CombinerMember(name="rouge", method="rouge"),
            CombinerMember(name="geval", method="geval", uses_llm=True, model="fake"),
        ],
        features=[
            CombinerFeature(
                name="rouge.score",
                member="rouge",
                source="score",
                mean=rouge_mean,
                scale=0.25,
                min=0.0,
                max=1.0,
                weight=1.0,
            ),
            CombinerFeature(
                name="geval.score", member="geval", source="score", mean=0.5, scale=0.25, min=0.0, max=1.0, weight=0.5
            ),
        ],
    )
    path = tmp_path / "cascade.json"
    write_combiner(c, path)
    return str(path)


def _rouge(target: str) -> float:
    score = Rouge().check(SOURCE, target).score
    assert score is not None
    return score


def test_the_cascade_skips_the_llm_member_when_the_decision_cannot_flip(tmp_path):
    r_half = _rouge(HALF)
    assert 0.05 < r_half < 0.5
    path = _cascade_combiner(tmp_path, r_half)
    fake = FakeModel(by_reply={"GevalReply": json.dumps({"reason": "made up", "score": 1})})
    method = get_method("ensemble", llm=LLM(fake, cache=None), combiner=path)
    settled = method.check(SOURCE, COPY)  # rouge 1.0: z = 4 * (1 - r_half) >= 2 > the most geval can take away (1)
    assert settled.details["ran"] == ["rouge"] and settled.details["skipped"] == ["geval"]
    assert settled.details["members"]["geval"]["status"] == "skipped"
    assert "whatever it scores" in settled.details["members"]["geval"]["why"]
    assert settled.usage.calls == 0 and settled.label == "consistent"
    c = load_combiner(path)
    rouge_report = Report.model_validate(settled.details["members"]["rouge"]["report"])
    for geval_score in (0.0, 1.0):  # what geval could have said does not change the decision
        assert c.predict({"rouge": rouge_report, "geval": Report(method="geval", score=geval_score)}) >= 0.5

    open_ = method.check(SOURCE, HALF)  # rouge at its mean: only geval can decide
    assert open_.details["ran"] == ["rouge", "geval"] and open_.details["skipped"] == []
    assert open_.usage.calls == 1 and len(open_.calls) == 1
    assert open_.subscores == {"rouge": pytest.approx(r_half), "geval": 0.0}
    assert open_.label == "inconsistent" and open_.score == pytest.approx(1 / (1 + np.exp(1.0)))

    every = get_method("ensemble", llm=LLM(fake, cache=None), combiner=path, cascade=False).check(SOURCE, COPY)
    assert every.details["ran"] == ["rouge", "geval"]


def test_findings_are_those_of_the_members_the_combiner_weighs(tmp_path):
    findings_target = "The cat sat on the mat in Rome on 4 June."
    c = CombinerFile(
        kind="binary",
        estimator={"class": "test"},
        intercept=0.0,
        threshold=0.5,
        members=[CombinerMember(name="gate", method="gate"), CombinerMember(name="rouge", method="rouge")],
        features=[
            CombinerFeature(
                name="gate.score", member="gate", source="score", mean=0.5, scale=0.25, min=0, max=1, weight=w
            )
            for w in [0.0]
        ]
        + [
            CombinerFeature(
                name="rouge.score", member="rouge", source="score", mean=0.5, scale=0.25, min=0, max=1, weight=1.0
            )
        ],
    )
    path = tmp_path / "c.json"
    write_combiner(c, path)
    unweighed = get_method("ensemble", combiner=str(path)).check(SOURCE, findings_target)
    assert unweighed.findings == []
    assert unweighed.details["members"]["gate"]["report"]["findings"]  # the gate found it, but is not weighed
    weighed = c.model_copy(update={"features": [c.features[0].model_copy(update={"weight": 0.3}), c.features[1]]})
    write_combiner(weighed, path)
    report = get_method("ensemble", combiner=str(path)).check(SOURCE, findings_target)
    assert report.findings and all("Rome" in f.description for f in report.findings)


def test_a_bad_combiner_file_is_refused_with_the_reason(tmp_path):
    with pytest.raises(OptionsError, match="combiner file not found"):
        get_method("ensemble", combiner=str(tmp_path / "missing.json"))
    (tmp_path / "x.json").write_text('{"format": "something else"}')
    with pytest.raises(OptionsError, match="not a halluscope combiner file"):
        get_method("ensemble", combiner=str(tmp_path / "x.json"))
    with pytest.raises(OptionsError, match="combiner"):
        get_method("ensemble")


def test_a_saved_combiner_runs_without_scikit_learn(tmp_path):
    c = CombinerFile(
        kind="binary",
        estimator={"class": "test"},
        intercept=0.0,
        threshold=0.5,
        members=[CombinerMember(name="rouge", method="rouge")],
        features=[
            CombinerFeature(
                name="rouge.score", member="rouge", source="score", mean=0.5, scale=0.25, min=0, max=1, weight=1.0
            )
        ],
    )
    path = write_combiner(c, tmp_path / "c.json")
    code = (
        "import sys; sys.modules['sklearn'] = None  # any import of scikit-learn now fails\n"
        "from halluscope.methods import get_method\n"
        f"r = get_method('ensemble', combiner={str(path)!r}).check({SOURCE!r}, {COPY!r})\n"
        "print(r.details['ran'], r.label)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['rouge'] consistent"


# --- the CLI, offline ------------------------------------------------------------------------------------------


def _dataset(tmp_path) -> str:
    """Consistent targets copy a source sentence; inconsistent ones change a name, a number or a date."""
    rows = []
    places = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Quito", "Dakar", "Hanoi", "Perth", "Turin"]
    for i in range(24):
        place, other = places[i % 10], places[(i + 3) % 10]
        source = (
            f"The meeting in {place} began on {i + 1} March with {10 + i} delegates. "
            f"It ended two days later after a long vote on the budget."
        )
        if i % 2:
            target = f"The meeting in {place} began on {i + 1} March with {10 + i} delegates."
        elif i % 4 == 0:
            target = f"The meeting in {other} began on {i + 1} March with {10 + i} delegates."
        else:
            target = f"The meeting in {place} began on {i + 2} April with {40 + i} delegates and ended early."
        rows.append({"id": f"m{i}", "source": source, "target": target, "label": i % 2})
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_fit_combiner_and_check_ensemble_offline(tmp_path):
    runner = CliRunner()
    data = _dataset(tmp_path)
    out = tmp_path / "combiner.json"
    args = [
        "fit-combiner",
        "--dataset",
        data,
        "--methods",
        "rouge,gate",
        "--work-dir",
        str(tmp_path / "runs"),
        "-O",
        str(out),
        "--bootstrap",
        "50",
        "--folds",
        "4",
    ]
    result = runner.invoke(app, args)
    assert "| **combiner** (rouge + gate) |" in result.output
    if result.exit_code == 1:  # refused: no file, the reason given
        assert not out.exists() and "refused:" in result.output
        result = runner.invoke(app, [*args, "--force"])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["format"] == "halluscope-combiner/1" and saved["data"]["n"] == 24
    assert [m["name"] for m in saved["members"]] == ["rouge", "gate"]
    assert saved["estimator"]["class"] == "sklearn.linear_model._logistic.LogisticRegression"
    assert set(saved["cv"]["members"]) == {"rouge", "gate"} and saved["cv"]["combiner"]["n"] == 24

    (tmp_path / "s.txt").write_text("The meeting in Paris began on 1 March with 10 delegates. It ended later.")
    (tmp_path / "t.txt").write_text("The meeting in Rome began on 9 March with 10 delegates.")
    checked = runner.invoke(
        app,
        [
            "check",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--method",
            "ensemble",
            "-o",
            f"combiner={out}",
            "--json",
        ],
    )
    report = json.loads(checked.output)
    assert report["label"] == "inconsistent" and checked.exit_code == 1, checked.output  # Rome, 9 March: wrong
    assert report["details"]["ran"] == ["rouge", "gate"] and report["details"]["skipped"] == []
    assert report["model"] is None and report["usage"]["calls"] == 0
    assert set(report["subscores"]) == {"rouge", "gate"}


def test_check_ensemble_with_a_fake_llm_member_says_what_ran(tmp_path):
    r_half = _rouge(HALF)
    path = _cascade_combiner(tmp_path, r_half)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"GevalReply": {"reason": "scripted", "score": 5}}))
    (tmp_path / "s.txt").write_text(SOURCE)
    runner = CliRunner()
    for target, ran, skipped, calls in ((COPY, ["rouge"], ["geval"], 0), (HALF, ["rouge", "geval"], [], 1)):
        (tmp_path / "t.txt").write_text(target)
        result = runner.invoke(
            app,
            [
                "check",
                "-s",
                str(tmp_path / "s.txt"),
                "-t",
                str(tmp_path / "t.txt"),
                "--method",
                "ensemble",
                "-o",
                f"combiner={path}",
                "--model",
                f"fake:{script}",
                "--no-cache",
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["details"]["ran"] == ran and report["details"]["skipped"] == skipped
        assert report["usage"]["calls"] == calls
        assert report["label"] == "consistent"  # rouge 1.0 alone; geval's 5 on the other pair
        text = runner.invoke(
            app,
            [
                "check",
                "-s",
                str(tmp_path / "s.txt"),
                "-t",
                str(tmp_path / "t.txt"),
                "--method",
                "ensemble",
                "-o",
                f"combiner={path}",
                "--model",
                f"fake:{script}",
            ],
        )
        assert f"members run: {', '.join(ran)}; skipped: {', '.join(skipped) or 'none'}" in text.output


def test_fit_combiner_refuses_with_exit_1_and_writes_nothing(tmp_path):
    """--runs folders: a perfect member beside a noise one; refused unless --force, which marks the file."""
    from halluscope.bench.datasets import write_examples
    from halluscope.bench.folder import ItemStore

    y = _labels(30)
    write_examples(tmp_path / "pairs.jsonl", _examples(y))
    u = np.random.default_rng(6).uniform(0, 1, len(y))
    for name, scores in (("rouge", np.where(y == 1, 0.7 + 0.3 * u, 0.3 * u)), ("gate", u)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "run.json").write_text(
            json.dumps({"dataset": str(tmp_path / "pairs.jsonl"), "method": name, "method_options": {}, "model": None})
        )
        with ItemStore(folder / "items.jsonl").open() as fh:
            for i, s in enumerate(scores):
                ItemStore.write(fh, f"x{i}", Report(method=name, score=float(s)))
    out = tmp_path / "c.json"
    args = [
        "fit-combiner",
        "-r",
        str(tmp_path / "rouge"),
        "-r",
        str(tmp_path / "gate"),
        "-O",
        str(out),
        "--bootstrap",
        "20",
    ]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1 and not out.exists()
    assert "does not beat its best member, rouge" in refused.output
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 0 and json.loads(out.read_text())["accepted"] is False


def test_fit_combiner_without_scikit_learn_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "from halluscope.cli.main import app\n"
        f"app(['fit-combiner', '--methods', 'rouge', '--dataset', 'x.jsonl', '-O', {str(tmp_path / 'c.json')!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "pip install 'halluscope[bench]'" in done.stderr
