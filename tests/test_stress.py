"""The stress suite (score deltas per perturbation, density bins, plots) and option sweeps."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from halluscope.bench.datasets import Dataset
from halluscope.bench.suite_stress import (
    EmbeddingDensity,
    density_bins,
    density_points,
    is_stress_set,
    perturbation_pairs,
    stress_report,
    tfidf_density,
)
from halluscope.bench.suites import SuiteContext, load_suite_modules
from halluscope.records import Claim, Example, Report, Verdict

SOURCE = (
    "The mill burned in May. The baker moved to the coast. Rain fell for a week. "
    "The harbour froze that winter. Wolves were seen near the pass."
)


def ex(group, difficulty, target="The mill burned. The baker left.", source=SOURCE):
    eid = group if difficulty == "original" else f"{group}::{difficulty}"
    return Example(id=eid, source=source, target=target, label=1, group=group, difficulty=difficulty)


def rep(score, label=None, verdicts=()):
    if score is None:
        return Report(method="m", unscored_reason="could not parse")
    return Report(method="m", score=score, label=label, verdicts=list(verdicts))


@pytest.fixture
def no_embeddings(monkeypatch):
    """Density through the TF-IDF fallback: keeps these tests free of a sentence-embedding model load."""
    import halluscope.retrieval as retrieval

    monkeypatch.setattr(retrieval.config, "embeddings_available", lambda: False)


def ctx(tmp_path, **extra):
    return SuiteContext(out_dir=tmp_path, method="m", model=None, dataset="crafted", n_bootstrap=200, extra=extra)


@pytest.fixture
def crafted():
    examples = [
        ex("g1", "original"),
        ex("g1", "paraphrased"),
        ex("g1", "negated"),
        ex("g2", "original"),
        ex("g2", "paraphrased"),
        ex("g2", "negated"),
        ex("g3", "original"),
        ex("g3", "paraphrased"),
        ex("g4", "original"),
        ex("g4", "negated"),
    ]
    reports = [
        rep(0.8, "consistent"),
        rep(0.7, "consistent"),
        rep(0.2, "inconsistent"),
        rep(0.6, "consistent"),
        rep(0.9, "consistent"),
        rep(0.6, "consistent"),
        rep(1.0, "consistent"),
        rep(None),  # unscored perturbed row: unpaired
        rep(None),
        rep(0.5, "inconsistent"),  # unscored original: its perturbation is unpaired
    ]
    return examples, reports


def test_applies_only_to_sets_with_original_rows(crafted):
    examples, _ = crafted
    assert is_stress_set(examples)
    assert not is_stress_set([Example(id="a", source="s", target="t", group="g", difficulty="easy")])
    assert "stress" in load_suite_modules()


def test_pairs_and_unpaired_counts(crafted):
    pairs, unpaired = perturbation_pairs(*crafted)
    got = sorted((p.group, p.perturbation, round(p.delta, 6), p.flipped) for p in pairs)
    assert got == [
        ("g1", "negated", -0.6, True),
        ("g1", "paraphrased", -0.1, False),
        ("g2", "negated", 0.0, False),
        ("g2", "paraphrased", 0.3, False),
    ]
    assert unpaired == {"paraphrased": 1, "negated": 1}


def test_deltas_means_and_tables(crafted, tmp_path):
    result = stress_report(*crafted, ctx(tmp_path, stress_density=False))
    m = result.metrics
    assert m["n_groups"] == 4
    d = m["delta"]
    assert list(d) == ["paraphrased", "negated"]  # the paper's perturbation order
    assert d["paraphrased"]["n_pairs"] == 2
    assert d["paraphrased"]["mean_delta"]["value"] == pytest.approx(0.1)
    assert d["paraphrased"]["median_delta"] == pytest.approx(0.1)
    assert d["paraphrased"]["min_delta"] == pytest.approx(-0.1) and d["paraphrased"]["max_delta"] == pytest.approx(0.3)
    assert d["paraphrased"]["mean_abs_delta"] == pytest.approx(0.2)
    assert d["negated"]["mean_delta"]["value"] == pytest.approx(-0.3)
    assert d["negated"]["label_flip_rate"] == pytest.approx(0.5)
    low, high = d["paraphrased"]["mean_delta"]["low"], d["paraphrased"]["mean_delta"]["high"]
    assert -0.1 - 1e-9 <= low <= 0.1 <= high <= 0.3 + 1e-9
    means = m["mean_score"]
    assert list(means) == ["original", "paraphrased", "negated"]
    assert means["original"]["value"] == pytest.approx((0.8 + 0.6 + 1.0) / 3) and means["original"]["unscored"] == 1
    assert means["paraphrased"]["value"] == pytest.approx((0.7 + 0.9) / 2) and means["paraphrased"]["unscored"] == 1
    assert m["unpaired"] == {"paraphrased": 1, "negated": 1}
    # every row: an unscored row at the lowest score of the run (0.2), with the coverage beside it
    assert means["original"]["all"]["value"] == pytest.approx((0.8 + 0.6 + 1.0 + 0.2) / 4)
    assert means["original"]["coverage"] == {"scored": 3, "total": 4, "share": 0.75}
    assert means["paraphrased"]["all"]["value"] == pytest.approx((0.7 + 0.9 + 0.2) / 3)
    assert d["paraphrased"]["mean_delta_all"]["value"] == pytest.approx((-0.1 + 0.3 - 0.8) / 3)
    assert d["paraphrased"]["coverage"] == {"scored": 2, "total": 3, "share": 0.6667}
    assert d["negated"]["label_flip_rate_all"] == pytest.approx(2 / 3)  # an unpaired row counts as a flip
    titles = [t for t, _ in result.tables]
    assert any("mean score per perturbation" in t for t in titles)
    delta_md = dict(result.tables)["Stress test: score change vs the original (perturbed - original)"]
    # every row counted first: an unpaired row as the largest fall the run's scores allow (0.2 - 1.0), then the pairs
    assert "| paraphrased | 2 | 1 | -0.200" in delta_md and "| negated | 2 | 1 | -0.467" in delta_md
    assert "| 0.100 [" in delta_md and "| -0.300 [" in delta_md
    assert [p.name for p in result.plots] == ["stress_deltas.png"] and result.plots[0].stat().st_size > 0
    assert "density" not in m


def test_density_bins_target_level(tmp_path):
    """No claim verdicts (e.g. rouge): one point per original target, density = mean over its sentences."""
    targets = {f"g{i}": f"Sentence {i}a here. Sentence {i}b here." for i in range(10)}
    examples = [ex(g, "original", target=t) for g, t in targets.items()]
    reports = [rep(i / 10) for i in range(10)]
    fake_density = {}
    for i, t in enumerate(targets.values()):
        a, b = t.split(". ")
        fake_density[a + "."] = i / 10
        fake_density[b] = i / 10 + 0.02  # mean = i/10 + 0.01

    def density(source, texts):
        return [fake_density[t] for t in texts]

    points, unit = density_points(examples, reports, density)
    assert unit == "target" and len(points) == 10
    assert points[3].density == pytest.approx(0.31) and points[3].score == pytest.approx(0.3)
    bins = density_bins(points, ctx(tmp_path), n_bins=5)
    assert [b["n"] for b in bins] == [2, 2, 2, 2, 2]  # quantile bins: equal counts
    assert [round(b["score"]["value"], 3) for b in bins] == [0.05, 0.25, 0.45, 0.65, 0.85]
    assert bins[0]["low"] == pytest.approx(0.01) and bins[-1]["high"] == pytest.approx(0.91)

    result = stress_report(examples, reports, ctx(tmp_path), density=density, n_bins=5)
    dm = result.metrics["density"]
    assert dm["unit"] == "target" and dm["n"] == 10 and dm["measure"] == "custom"
    assert dm["spearman"] == pytest.approx(1.0)
    assert [p.name for p in result.plots] == ["stress_density.png"]


def test_density_bins_claim_level_skip_unscored_claims(tmp_path):
    claims = [Claim(text=f"claim {k}") for k in range(4)]
    verdicts = [
        Verdict(claim=claims[0], label="supported"),
        Verdict(claim=claims[1], label="unsupported"),
        Verdict(claim=claims[2], label="supported", score=0.25),  # a probability in [0, 1] is used as is
        Verdict.unscored(claims[3], "unparseable"),
    ]
    examples = [ex("g1", "original"), ex("g1", "paraphrased")]
    reports = [rep(0.5, verdicts=verdicts), rep(0.5, verdicts=verdicts)]
    density_of = {"claim 0": 0.1, "claim 1": 0.2, "claim 2": 0.3, "claim 3": 0.4}
    seen = []

    def density(source, texts):
        seen.extend(texts)
        return [density_of[t] for t in texts]

    points, unit = density_points(examples, reports, density)
    assert unit == "claim"
    assert [(p.text, p.score) for p in points] == [("claim 0", 1.0), ("claim 1", 0.0), ("claim 2", 0.25)]
    assert seen == ["claim 0", "claim 1", "claim 2"]  # originals only, unscored claim left out
    bins = density_bins(points, ctx(tmp_path), n_bins=3)
    assert [b["n"] for b in bins] == [1, 1, 1]


def test_density_bins_collapse_ties(tmp_path):
    from halluscope.bench.suite_stress import DensityPoint

    points = [DensityPoint(f"e{i}", "t", 0.5, float(i % 2)) for i in range(6)]
    bins = density_bins(points, ctx(tmp_path), n_bins=4)
    assert len(bins) == 1 and bins[0]["n"] == 6 and bins[0]["score"]["value"] == pytest.approx(0.5)
    assert density_bins([], ctx(tmp_path)) == []


def test_tfidf_density_is_mean_cosine_to_source_sentences():
    values = tfidf_density(SOURCE, ["The mill burned in May.", "Quantum chromodynamics"])
    assert values[1] == 0.0
    assert 0.0 < values[0] <= 1.0 / 5 + 1e-9  # identical to one of five sentences, unrelated to the rest


def test_embedding_density_falls_back_to_tfidf_without_embeddings(no_embeddings):
    density = EmbeddingDensity()
    values = density(SOURCE, ["The mill burned in May."])
    assert density.measure == "tfidf" and values == tfidf_density(SOURCE, ["The mill burned in May."])


def test_suite_through_the_bench_runner(tmp_path, no_embeddings):
    """A crafted stress set benched with rouge: the runner picks up the stress suite."""
    from halluscope.bench.runner import run_bench
    from halluscope.methods import get_method

    examples = [
        ex("g1", "original", "The mill burned in May."),
        ex("g1", "paraphrased", "In May, the mill went up in flames."),
        ex("g1", "added_source_sentence", "The mill burned in May. Wolves were seen near the pass."),
    ]
    data = Dataset("crafted", None, examples)
    results = asyncio.run(
        run_bench(get_method("rouge"), data, tmp_path / "run", progress=False, n_bootstrap=50, suite_names=["stress"])
    )
    stress = results["metrics"]["stress"]
    assert stress["delta"]["paraphrased"]["mean_delta"]["value"] < 0  # lexical overlap drops on a paraphrase
    assert stress["density"]["unit"] == "target" and stress["density"]["n"] == 1
    assert stress["density"]["measure"] == "tfidf"
    assert "stress_deltas.png" in results["plots"]
    assert "score change vs the original" in (tmp_path / "run" / "results.md").read_text()


# -------------------------------------------------------------------------------------------- sweep


def test_parse_sweep():
    from halluscope.bench.sweep import SweepError, parse_sweep

    assert parse_sweep("window=0,1,2") == ("window", [0, 1, 2])
    assert parse_sweep("method=rouge, dcr") == ("method", ["rouge", "dcr"])
    assert parse_sweep("top-k=1,3") == ("top_k", [1, 3])
    for bad in ("window", "window=1", "=1,2", "window=1,1"):
        with pytest.raises(SweepError):
            parse_sweep(bad)


def test_sweep_rouge_variant_writes_one_run_per_value_and_a_combined_table(tmp_path, no_embeddings):
    from halluscope.bench.sweep import run_sweep
    from halluscope.methods import get_method

    examples = [
        ex("g1", "original", "The mill burned in May."),
        ex("g1", "paraphrased", "In May, the mill went up in flames."),
        ex("g2", "original", "Rain fell for a week. The harbour froze."),
        ex("g2", "compressed", "A week of rain; the harbour froze."),
    ]
    data = Dataset("crafted", None, examples)
    made = []

    def make_method(name, opts):
        made.append((name, opts))
        return get_method(name, **opts)

    summary = asyncio.run(
        run_sweep(
            "rouge",
            "variant",
            ["rouge1", "rouge2"],
            data,
            tmp_path,
            make_method=make_method,
            n_bootstrap=50,
            progress=False,
        )
    )
    assert made == [("rouge", {"variant": "rouge1"}), ("rouge", {"variant": "rouge2"})]
    assert [r["value"] for r in summary["rows"]] == ["rouge1", "rouge2"]
    for row, variant in zip(summary["rows"], ["rouge1", "rouge2"]):
        run = json.loads((tmp_path / f"variant={variant}" / "results.json").read_text())
        assert run["method_options"] == {"variant": variant} and row["n"] == 4
        lines = (tmp_path / f"variant={variant}" / "items.jsonl").read_text().splitlines()
        items = [json.loads(line) for line in lines]
        scores = [i["report"]["score"] for i in items]
        assert row["mean_score"]["value"] == pytest.approx(np.mean(scores))
        originals = [i["report"]["score"] for i in items if "::" not in i["example_id"]]
        assert row["mean_score_original"]["value"] == pytest.approx(np.mean(originals))
        assert set(row["mean_delta"]) == {"paraphrased", "compressed"}
        assert row["metrics"]["stress.delta.paraphrased.mean_delta"] == row["mean_delta"]["paraphrased"]["value"]
    # rouge-2 precision is never above rouge-1 precision on the same pair
    assert summary["rows"][1]["mean_score"]["value"] <= summary["rows"][0]["mean_score"]["value"]
    md = (tmp_path / "sweep.md").read_text()
    assert '| `"rouge1"` | 4 | 0 |' in md and "delta paraphrased" in md
    assert "| stress.delta.paraphrased.mean_delta |" in md  # changes with the variant
    assert "| stress.n_groups |" not in md and "metrics that do not change" in md
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert json.loads((tmp_path / "sweep.json").read_text())["key"] == "variant"


def test_sweep_over_methods_and_option_clash(tmp_path, no_embeddings):
    from halluscope.bench.sweep import SweepError, run_sweep
    from halluscope.methods import get_method

    data = Dataset("crafted", None, [ex("g1", "original", "The mill burned in May.")])

    def make_method(name, opts):
        return get_method(name, **opts)

    with pytest.raises(SweepError, match="both swept and fixed"):
        asyncio.run(
            run_sweep(
                "rouge",
                "variant",
                ["rouge1", "rouge2"],
                data,
                tmp_path,
                make_method=make_method,
                options={"variant": "rouge1"},
                progress=False,
            )
        )
    with pytest.raises(SweepError, match="variant='bogus'"):
        asyncio.run(
            run_sweep(
                "rouge", "variant", ["rouge1", "bogus"], data, tmp_path / "b", make_method=make_method, progress=False
            )
        )


def test_sweep_with_a_fake_model_method(tmp_path, no_embeddings):
    """An LLM method whose score depends on the swept option: the table follows the option."""
    from halluscope.bench.sweep import run_sweep
    from halluscope.methods.geval import GEval
    from tests.conftest import fake_llm

    data = Dataset(
        "crafted",
        None,
        [
            ex("g1", "original", "The mill burned in May."),
            ex("g1", "negated", "The mill did not stay unburned in May."),
        ],
    )
    replies = {0: '{"reason": "r", "score": 5}', 1: '{"reason": "r", "score": 3}'}

    def make_method(name, opts):
        assert name == "geval" and opts["retrieval"] == "always"
        method = GEval(llm=fake_llm(default=replies[opts["window"]]))
        method.options = lambda: dict(opts)  # a stand-in option; geval itself has none
        return method

    summary = asyncio.run(
        run_sweep(
            "geval",
            "window",
            [0, 1],
            data,
            tmp_path,
            make_method=make_method,
            options={"retrieval": "always"},
            n_bootstrap=0,
            progress=False,
        )
    )
    assert [r["mean_score"]["value"] for r in summary["rows"]] == [1.0, 0.5]
    assert [r["usage"]["calls"] for r in summary["rows"]] == [2, 2]
    assert summary["rows"][0]["mean_delta"]["negated"]["value"] == 0.0


@pytest.mark.parametrize("key", ["window", "top_k", "retriever", "merge_windows"])
def test_sweep_of_a_retrieval_setting_needs_retrieval_always(tmp_path, key):
    from halluscope.bench.sweep import SweepError, run_sweep

    data = Dataset("crafted", None, [ex("g1", "original", "The mill burned in May.")])
    made = []

    def make_method(name, opts):
        made.append(opts)
        raise AssertionError("nothing may run")

    for fixed in ({}, {"retrieval": "auto"}, {"retrieval": "never"}, {"retrieval": True}):
        with pytest.raises(SweepError, match=f"sweeping {key} measures nothing.*Add -o retrieval=always"):
            asyncio.run(
                run_sweep("dcr", key, [0, 1], data, tmp_path, make_method=make_method, options=fixed, progress=False)
            )
    assert made == [] and not any(tmp_path.iterdir())


def test_bench_sweep_cli_refuses_a_window_sweep_without_retrieval_always(tmp_path):
    from typer.testing import CliRunner

    from halluscope.cli.main import app

    path = tmp_path / "set.jsonl"
    path.write_text(ex("g1", "original", "The mill burned in May.").model_dump_json() + "\n")
    for extra in ([], ["-o", "retrieval=auto"]):
        result = CliRunner().invoke(
            app,
            [
                "bench-sweep",
                "-d",
                str(path),
                "--method",
                "dcr",
                "--sweep",
                "window=0,1,2",
                "--out",
                str(tmp_path / "out"),
                "--no-progress",
                *extra,
            ],
        )
        assert result.exit_code == 2, result.output
        assert "add -o retrieval=always" in result.output.lower() and "window" in result.output
    refused_top_k = CliRunner().invoke(
        app,
        ["bench-sweep", "-d", str(path), "--method", "dove", "--sweep", "top_k=1,3", "--out", str(tmp_path / "out")],
    )
    assert refused_top_k.exit_code == 2 and "retrieval=always" in refused_top_k.output
    assert not (tmp_path / "out").exists()


def test_bench_sweep_cli(tmp_path, no_embeddings):
    from typer.testing import CliRunner

    from halluscope.cli.main import app

    path = tmp_path / "set.jsonl"
    rows = [ex("g1", "original", "The mill burned in May."), ex("g1", "paraphrased", "In May the mill burned down.")]
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    out = tmp_path / "sweep"
    result = CliRunner().invoke(
        app,
        [
            "bench-sweep",
            "-d",
            str(path),
            "--method",
            "rouge",
            "--sweep",
            "variant=rouge1,rougeL",
            "--out",
            str(out),
            "--no-progress",
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (out / "variant=rouge1" / "results.json").is_file() and (out / "variant=rougeL" / "results.json").is_file()
    assert "Sweep of `variant`" in result.output
    bad = CliRunner().invoke(app, ["bench-sweep", "-d", str(path), "--method", "rouge", "--sweep", "variant"])
    assert bad.exit_code == 2 and "KEY=V1,V2" in bad.output


def test_density_bins_count_unscored_units_at_the_lowest_score(tmp_path):
    """An unscored original still has a density: its bin's value counting every unit takes it at the worst."""
    targets = {f"g{i}": f"Sentence {i}a here." for i in range(4)}
    examples = [ex(g, "original", target=t) for g, t in targets.items()]
    reports = [rep(0.4), rep(0.6), rep(None), rep(0.8)]
    dens = {t: i / 10 for i, t in enumerate(targets.values())}

    def density(source, texts):
        return [dens[t] for t in texts]

    result = stress_report(examples, reports, ctx(tmp_path), density=density, n_bins=1)
    dm = result.metrics["density"]
    assert dm["coverage"] == {"scored": 3, "total": 4, "share": 0.75} and dm["n_units"] == 4
    (b,) = dm["bins"]
    assert b["n"] == 4 and b["n_scored"] == 3
    assert b["score"]["value"] == pytest.approx(0.6) and b["score"]["coverage"]["scored"] == 3
    assert b["score_all"]["value"] == pytest.approx((0.4 + 0.6 + 0.4 + 0.8) / 4)
    table = dict(result.tables)[next(t for t, _ in result.tables if "density" in t)]
    assert "every unit" in table and "0.550" in table and "0.600" in table
