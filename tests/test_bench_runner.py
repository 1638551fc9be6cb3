"""``run_bench`` / ``halluscope bench``: resume after an interruption, outputs, unscored handling, plug-in suites."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.bench import suites as suites_mod
from halluscope.bench.datasets import Dataset, write_examples
from halluscope.bench.runner import ITEMS_FILE, BenchError, default_out_dir, run_bench
from halluscope.bench.suites import SuiteResult
from halluscope.config import Config
from halluscope.llm import LLM, FakeModel, ResponseCache
from halluscope.methods import get_method
from halluscope.methods.base import Method
from halluscope.methods.geval import GevalReply
from halluscope.records import Example, Finding, Report, Span
from tests.garble import garbled_replies
from tests.prompt_data import fenced

GOOD = '{"reason": "fine", "score": 4}'
BAD = '{"reason": "made up", "score": 2}'


def _examples(n: int = 6) -> list[Example]:
    return [
        Example(
            id=f"ex{i}",
            source=f"Source {i}: the cat sat on the mat.",
            target=f"Claim number {i}.",
            label=i % 2,
            human_score=(i % 3) / 2,
            split="evaluation" if i < n // 2 else "test",
        )
        for i in range(n)
    ]


def _user_prompts(model: FakeModel) -> list[str]:
    return [m[-1]["content"] for m in model.requests]


def _geval(model: FakeModel, cache_path: Path, concurrency: int = 1):
    llm = LLM(model, cache=ResponseCache(cache_path), max_concurrency=concurrency)
    return get_method("geval", llm=llm, config=Config(max_concurrency=concurrency, cache_path=cache_path))


def _failing_after(n_ok: int):
    """A rating that answers ``n_ok`` requests and then fails like a crash (not an LLM error)."""
    seen = {"n": 0}

    def respond(messages):
        seen["n"] += 1
        if seen["n"] > n_ok:
            raise RuntimeError("simulated crash")
        return _reply(messages)

    return respond


def _reply(messages):
    """A high rating for odd-numbered targets (label 1), a low one for even ones (label 0)."""
    number = int(re.fullmatch(r"Claim number (\d+)\.", fenced(messages, "target")).group(1))
    return GOOD if number % 2 else BAD


def _rating(respond) -> dict:
    """A script answering G-Eval's rating requests (its only reply type) with ``respond``."""
    return {GevalReply: respond}


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_interrupted_run_resumes_without_repeating_calls(tmp_path, concurrency):
    ds = Dataset("toy", None, _examples(6))
    out = tmp_path / "run"
    cache = tmp_path / "cache.sqlite"
    first = FakeModel(by_reply=_rating(_failing_after(3)))
    with pytest.raises(RuntimeError, match="simulated crash"):
        await run_bench(_geval(first, cache, concurrency), ds, out, progress=False, n_bootstrap=0)
    written = [json.loads(x)["example_id"] for x in (out / ITEMS_FILE).read_text().splitlines()]
    assert len(written) == 3  # three items finished and were flushed before the crash
    answered_first = _user_prompts(first)[:3]  # the 4th request is the one that crashed

    second = FakeModel(by_reply=_rating(_reply))
    results = await run_bench(_geval(second, cache, concurrency), ds, out, progress=False, n_bootstrap=0)
    # only the remaining items ran, and no request answered in the first run was sent again
    assert len(second.requests) == 3
    assert not set(_user_prompts(second)) & set(answered_first)
    lines = [json.loads(x) for x in (out / ITEMS_FILE).read_text().splitlines()]
    assert sorted(x["example_id"] for x in lines) == [f"ex{i}" for i in range(6)]
    assert results["n"] == 6 and results["n_unscored"] == 0
    assert results["usage_this_run"]["items_run"] == 3

    third = FakeModel()  # nothing left to do: any request would raise
    again = await run_bench(_geval(third, cache, concurrency), ds, out, progress=False, n_bootstrap=0)
    assert third.requests == [] and again["metrics"] == results["metrics"]


async def test_cut_off_last_line_is_dropped_and_redone(tmp_path):
    ds = Dataset("toy", None, _examples(4))
    out = tmp_path / "run"
    await run_bench(
        _geval(FakeModel(by_reply=_rating(_reply)), tmp_path / "c1"), ds, out, progress=False, n_bootstrap=0
    )
    items = out / ITEMS_FILE
    text = items.read_text()
    items.write_text(text[: len(text) - 40])  # the last line is cut mid-JSON, as by a kill during a write
    model = FakeModel(by_reply=_rating(_reply))
    res = await run_bench(_geval(model, tmp_path / "c2"), ds, out, progress=False, n_bootstrap=0)
    assert len(model.requests) == 1 and res["n"] == 4
    assert len(items.read_text().splitlines()) == 4


async def test_outputs_metrics_tables_and_plots(tmp_path):
    ds = Dataset("toy", None, _examples(12))
    out = tmp_path / "run"
    res = await run_bench(
        _geval(FakeModel(by_reply=_rating(_reply)), tmp_path / "c"), ds, out, progress=False, n_bootstrap=100, seed=3
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["metrics"] == json.loads(json.dumps(res["metrics"]))
    assert {"binary", "correlation"} <= set(saved["metrics"])
    binary = saved["metrics"]["binary"]
    # labels alternate 0/1 and targets 1, 3, 5, ... (label 1) get the high rating: perfect separation
    assert binary["dev_split"] == "evaluation" and binary["n_dev"] == 6 and binary["n_test"] == 6
    assert binary["auc"]["value"] == 1.0 and binary["balanced_accuracy"]["value"] == 1.0
    assert saved["method"] == "geval" and saved["model"] == "fake" and saved["prompt_version"].startswith("geval@2#")
    assert saved["usage"]["calls"] == 12 and saved["usage"]["per_item"]["calls"] == 1.0
    for plot in saved["plots"]:
        assert (out / plot).read_bytes()[:4] == b"\x89PNG"
    md = (out / "results.md").read_text()
    assert "| AUC-ROC |" in md and "Pearson" in md and "geval@2#" in md


async def test_garbled_replies_become_counted_unscored_items(tmp_path):
    replies = iter(garbled_replies(400, seed=11))
    rng = random.Random(3)  # garbled replies (a verdict almost never) mixed with valid ones
    model = FakeModel(by_reply=_rating(lambda messages: next(replies) if rng.random() < 0.6 else _reply(messages)))
    ds = Dataset("toy", None, _examples(30))
    res = await run_bench(_geval(model, tmp_path / "c"), ds, tmp_path / "run", progress=False, n_bootstrap=20)
    lines = [json.loads(x) for x in (tmp_path / "run" / ITEMS_FILE).read_text().splitlines()]
    unscored = [x for x in lines if x["report"]["score"] is None]
    assert res["n_unscored"] == len(unscored) > 0
    assert res["metrics"]["binary"]["n_unscored"] == len(unscored)
    assert 0 < res["metrics"]["binary"]["n_scored"] == 30 - len(unscored)


async def test_retry_unscored_and_growing_limit(tmp_path):
    ds = Dataset("toy", None, _examples(6))
    out = tmp_path / "run"
    await run_bench(
        _geval(FakeModel(default="no score here"), tmp_path / "c1"), ds, out, limit=2, progress=False, n_bootstrap=0
    )
    grown = FakeModel(by_reply=_rating(_reply))
    res = await run_bench(_geval(grown, tmp_path / "c2"), ds, out, limit=4, progress=False, n_bootstrap=0)
    assert len(grown.requests) == 2 and res["n"] == 4 and res["n_unscored"] == 2  # unscored items are kept
    retried = FakeModel(by_reply=_rating(_reply))
    res = await run_bench(
        _geval(retried, tmp_path / "c3"), ds, out, limit=4, retry_unscored=True, progress=False, n_bootstrap=0
    )
    assert len(retried.requests) == 2 and res["n_unscored"] == 0


async def test_a_different_configuration_is_refused(tmp_path):
    ds = Dataset("toy", None, _examples(2))
    out = tmp_path / "run"
    rouge = get_method("rouge")
    await run_bench(rouge, ds, out, progress=False, n_bootstrap=0)
    with pytest.raises(BenchError, match="variant"):
        await run_bench(get_method("rouge", variant="rouge1"), ds, out, progress=False, n_bootstrap=0)
    with pytest.raises(BenchError, match="sample_per_stratum"):
        await run_bench(rouge, ds, out, sample=1, progress=False, n_bootstrap=0)


async def test_registered_suites_are_plugged_in(tmp_path, monkeypatch):
    monkeypatch.setattr(suites_mod, "_SUITES", dict(suites_mod.load_suite_modules()))
    seen = {}

    @suites_mod.register_suite("toy_suite", applies=lambda exs: all(e.id.startswith("ex") for e in exs))
    async def toy(examples, reports, ctx):
        seen["n"] = len(reports)
        return SuiteResult(metrics={"count": len(examples)}, tables=[("Toy", "| a |\n|---|\n| 1 |")])

    res = await run_bench(
        get_method("rouge"), Dataset("toy", None, _examples(3)), tmp_path / "r", progress=False, n_bootstrap=0
    )
    assert seen == {"n": 3} and res["metrics"]["toy_suite"] == {"count": 3}
    assert "## Toy" in (tmp_path / "r" / "results.md").read_text()


def test_default_out_dir_is_safe():
    assert default_out_dir("summedits:news", "geval", "embedded:smollm2") == Path(
        "runs/summedits-news-geval-embedded-smollm2"
    )
    assert default_out_dir("final:dev", "rouge", None, sample=5, seed=2) == Path(
        "runs/final-dev-rouge-nollm-sample5-seed2"
    )


def test_cli_bench_on_a_generic_jsonl(tmp_path):
    from halluscope.cli.main import app

    data = tmp_path / "toy.jsonl"
    write_examples(data, _examples(6))
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "bench",
            "--dataset",
            str(data),
            "--method",
            "rouge",
            "--out",
            str(out),
            "--no-progress",
            "--bootstrap",
            "50",
            "-o",
            "variant=rouge1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "AUC-ROC" in result.output and (out / "results.json").is_file()
    assert json.loads((out / "results.json").read_text())["method_options"] == {"variant": "rouge1"}
    missing = runner.invoke(
        app, ["bench", "--dataset", "final", "--method", "rouge", "--data-dir", str(tmp_path / "nowhere")]
    )
    assert missing.exit_code == 2 and "data folder not found" in missing.output


def test_bench_with_a_no_llm_method_needs_no_model(tmp_path, monkeypatch):
    """`bench --method rouge` runs where no model can be built (no embedded extra): the judge is optional."""
    from halluscope.cli.main import app

    monkeypatch.setenv("HALLUSCOPE_EMBEDDED_MODEL", str(tmp_path / "missing.gguf"))
    data = tmp_path / "toy.jsonl"
    write_examples(data, [e.model_copy(update={"descriptions": [] if e.label else ["wrong"]}) for e in _examples(6)])
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--dataset",
            str(data),
            "--method",
            "rouge",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "use no model, so FINAL's matching judge is not loaded" in result.output and "AUC-ROC" in result.output
    assert "FINAL matching" in (tmp_path / "out" / "results.md").read_text()


def test_suite_modules_list_imports_builtins():
    loaded = suites_mod.load_suite_modules()
    assert {"binary", "correlation", "montage_auc", "span", "final_matching"} <= set(loaded)
    assert "halluscope.bench.builtin_suites" in suites_mod.SUITE_MODULES


async def test_a_failing_suite_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    monkeypatch.setattr(suites_mod, "_SUITES", dict(suites_mod.load_suite_modules()))

    @suites_mod.register_suite("broken_suite")
    def broken(examples, reports, ctx):
        raise ZeroDivisionError("oops")

    res = await run_bench(
        get_method("rouge"), Dataset("toy", None, _examples(4)), tmp_path / "r", progress=False, n_bootstrap=0
    )
    assert res["suite_errors"] == {"broken_suite": "ZeroDivisionError: oops"}
    assert "binary" in res["metrics"] and "broken_suite" not in res["metrics"]
    assert "suite `broken_suite` failed" in (tmp_path / "r" / "results.md").read_text()


class _SpanOracle(Method):
    """A scripted method: flags the word "Paris" and scores by the number of flags (no LLM)."""

    name = "span_oracle"
    uses_llm = False

    async def run(self, source, target):
        start = target.find("Paris")
        if start < 0:
            return Report(method=self.name, score=0.9)
        span = Span(start=start, end=start + 5)
        return Report(
            method=self.name, score=0.2, findings=[Finding(description="Paris is unsupported", target_spans=[span])]
        )


async def test_montage_and_span_suites_through_the_runner(tmp_path):
    truth = "The museum opened in Lyon."
    examples = []
    for g in range(4):
        examples.append(
            Example(
                id=f"g{g}-truth", source="s", target=truth, label=1, group=f"g{g}", difficulty="truth", gold_spans=[]
            )
        )
        lie = "The museum opened in Paris."
        examples.append(
            Example(
                id=f"g{g}-easy",
                source="s",
                target=lie,
                label=0,
                group=f"g{g}",
                difficulty="easy",
                gold_spans=[Span(start=21, end=26)],
            )
        )
        # a hard lie the method misses; its gold span is a different word
        examples.append(
            Example(
                id=f"g{g}-hard",
                source="s",
                target="The museum closed in Lyon.",
                label=0,
                group=f"g{g}",
                difficulty="hard",
                gold_spans=[Span(start=11, end=17)],
            )
        )
    res = await run_bench(
        _SpanOracle(), Dataset("montage", None, examples), tmp_path / "r", progress=False, n_bootstrap=100
    )
    montage = res["metrics"]["montage_auc"]
    assert montage["auc_easy"]["value"] == 1.0 and montage["auc_hard"]["value"] == 0.5
    assert montage["auc_average"]["value"] == 0.75 and montage["n_groups"] == 4
    span = res["metrics"]["span"]
    # predicted: "Paris" in 4 easy lies (20 chars, all gold); gold also has 4 x 6 chars in the hard lies
    assert span["char_precision"]["value"] == 1.0
    assert span["char_recall"]["value"] == pytest.approx(20 / 44)
    assert (tmp_path / "r" / "montage_scores_by_difficulty.png").is_file()
