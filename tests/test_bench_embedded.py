"""The harness on the real embedded model: a tiny geval bench and one FINAL judge call (short inputs)."""

from __future__ import annotations

import pytest

from halluscope.bench.datasets import Dataset
from halluscope.bench.judge import match_descriptions
from halluscope.bench.runner import run_bench
from halluscope.llm import get_llm
from halluscope.methods import get_method
from halluscope.records import Example

pytestmark = pytest.mark.embedded

SOURCE = "The museum opened in 1999 in Lyon. It shows Roman coins and pottery found near the river."


@pytest.fixture
def short_config(embedded_config):
    # short replies keep the test fast; the prompts are unchanged
    return embedded_config.with_overrides(max_tokens=96)


async def test_geval_bench_on_embedded_model(short_config, tmp_path):
    examples = [
        Example(id="ok", source=SOURCE, target="The museum in Lyon opened in 1999.", label=1, human_score=1.0),
        Example(id="bad", source=SOURCE, target="The museum in Paris opened in 2005.", label=0, human_score=0.0),
    ]
    method = get_method("geval", config=short_config)
    res = await run_bench(method, Dataset("tiny", None, examples), tmp_path / "run", progress=False, n_bootstrap=50)
    assert res["n"] == 2 and res["model"].startswith("embedded:")
    assert res["usage"]["calls"] >= 2  # at least one call per item (a repair round adds one)
    assert res["n_scored"] + res["n_unscored"] == 2
    assert res["metrics"]["binary"]["n_unscored"] == res["n_unscored"]
    # a second run resumes everything: no new model call
    again = await run_bench(
        get_method("geval", config=short_config),
        Dataset("tiny", None, examples),
        tmp_path / "run",
        progress=False,
        n_bootstrap=50,
    )
    assert again["usage_this_run"]["items_run"] == 0


async def test_final_judge_on_embedded_model(short_config):
    judge = get_llm(short_config)
    res = await match_descriptions(
        judge,
        "x",
        "The museum in Paris opened in 2005.",
        ["The city is Paris, but the source says Lyon", "The year 2005 is wrong"],
        ["The museum is in Lyon, not Paris"],
    )
    assert res.judged and res.calls
    if res.matches is None:  # a 135M model may not manage the format: then it must say why
        assert res.unscored_reason
    else:
        assert set(res.matches) == {0} and res.matched_gold in (0, 1)
