"""The embedded offline model (llama.cpp + SmolLM2-135M-Instruct) for real. Short inputs, few tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.config import Config
from halluscope.llm import ContextOverflowError, GenerateParams, LLMError, build_api, get_llm
from halluscope.llm.embedded import KNOWN_MODELS, resolve_gguf
from tests.conftest import requires_embedded

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = [pytest.mark.embedded, requires_embedded]


def test_resolve_gguf_finds_the_packaged_weights() -> None:
    path = resolve_gguf("smollm2")
    assert path.suffix == ".gguf" and path.is_file()
    assert resolve_gguf(str(path)) == path
    with pytest.raises(LLMError, match="unknown embedded model"):
        resolve_gguf("no-such-model")
    with pytest.raises(LLMError, match="not found"):
        resolve_gguf("/nonexistent/model.gguf")
    assert set(KNOWN_MODELS) >= {"smollm2"}


async def test_generate_counts_tokens(embedded_config) -> None:
    llm = get_llm(embedded_config)
    assert llm.name == "embedded:smollm2" and llm.max_concurrency == 1
    completion = await llm.generate([{"role": "user", "content": "Say hello."}], llm.params(max_tokens=6))
    assert completion.usage.calls == 1 and completion.usage.prompt_tokens > 0
    assert 0 < completion.usage.completion_tokens <= 6
    again = await llm.generate([{"role": "user", "content": "Say hello."}], llm.params(max_tokens=6))
    assert again.cached and again.text == completion.text  # temperature 0 + cache: a re-run is free
    assert llm.count_tokens("one two three") > 0


async def test_calls_about_one_source_reuse_its_kv_prefix(tmp_path) -> None:
    """Two source-once prompts in a row: the second evaluates only what follows the shared prefix (the fenced
    source), and says so in ``cached_prompt_tokens``; a prompt about another source reuses little."""
    from halluscope.methods.dove.prompts import DOVE_CHECK_PROMPT

    llm = get_llm(Config(model="embedded", cache=False, max_tokens=4))
    source = (
        "The ferry opened in March 2021 and crosses the bay every 30 minutes. Two thirds of its cost came "
        "from a regional grant; the city paid the rest. Its boats are electric and carry 120 people. "
    ) * 3
    params = llm.params(max_tokens=2)
    first = await llm.generate(DOVE_CHECK_PROMPT.render(source=source, fact="The city paid for all of it."), params)
    second = await llm.generate(DOVE_CHECK_PROMPT.render(source=source, fact="The boats are electric."), params)
    other = await llm.generate(DOVE_CHECK_PROMPT.render(source="A different text entirely.", fact="X."), params)
    assert second.usage.cached_prompt_tokens > 0.8 * second.usage.prompt_tokens
    assert second.usage.evaluated_prompt_tokens < 0.2 * first.usage.prompt_tokens
    assert other.usage.cached_prompt_tokens < second.usage.cached_prompt_tokens / 2


async def test_logprobs_of_the_embedded_model_come_from_each_steps_distribution(embedded_config) -> None:
    """No logits_all: a logits processor records each generated step's top candidates (log-softmax)."""
    llm = get_llm(embedded_config.with_overrides(cache=False))
    messages = [{"role": "user", "content": "Is Paris in France? Answer with one word: yes or no."}]
    completion = await llm.generate(messages, llm.params(max_tokens=4, top_logprobs=5))
    assert completion.logprobs is not None and len(completion.logprobs) == completion.usage.completion_tokens
    assert "".join(t.token for t in completion.logprobs) == completion.text
    for step in completion.logprobs:
        assert 1 <= len(step.top) <= 5 and all(lp <= 0.0 for lp in step.top.values())
        assert sum(math.exp(lp) for lp in step.top.values()) <= 1.0 + 1e-6
        assert step.logprob <= max(step.top.values()) + 1e-9
    plain = await llm.generate(messages, llm.params(max_tokens=4))
    assert plain.logprobs is None and plain.text == completion.text  # the processor changes nothing chosen


async def test_prompt_longer_than_the_context_is_refused(tmp_path) -> None:
    api = build_api(Config(model="embedded:smollm2", embedded_n_ctx=256, cache=False))
    long_prompt = "word " * 2000
    with pytest.raises(ContextOverflowError, match="does not fit"):
        await api.generate([{"role": "user", "content": long_prompt}], GenerateParams(max_tokens=4))


def test_check_on_the_bundled_example_with_the_embedded_model(tmp_path) -> None:
    """The README's quick-start command, end to end on the real model (completion tokens capped)."""
    from halluscope.cli.main import app

    env = {"HALLUSCOPE_MAX_TOKENS": "32", "HALLUSCOPE_CACHE_PATH": str(tmp_path / "cache.sqlite")}
    args = [
        "check",
        "--source",
        str(EXAMPLES / "source.txt"),
        "--target",
        str(EXAMPLES / "summary.txt"),
        "--model",
        "embedded:smollm2",
        "--json",
    ]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code in (0, 1, 3), result.output
    report = json.loads(result.output)
    assert result.exit_code == (3 if report["score"] is None else 1 if report["label"] == "inconsistent" else 0)
    assert report["method"] == halluscope.DEFAULT_METHOD and report["model"] == "embedded:smollm2"
    # verdict first: one short reply per target sentence (3); per flagged one at most: an explanation and a repair,
    # the fact split and a repair, 3 fact scores, 2 P(contradicts) replies, the reason and 2 fix re-checks (12)
    flagged = sum(v["label"] != "supported" for v in report["verdicts"])
    assert 3 <= report["usage"]["calls"] <= 3 + 12 * flagged and len(report["calls"]) == report["usage"]["calls"]
    assert all(c["usage"]["completion_tokens"] <= 32 for c in report["calls"])
    assert report["details"]["verdict_first"]["scored"] == 3
    # every judged verdict carries the model's probability (the embedded backend captures it), every finding a
    # confidence; a 135M model may fail to answer: then the Report says why, it never invents a label
    for verdict in report["verdicts"]:
        assert verdict["label"] == "unscored" or verdict["support_probability"] is not None
    assert all(f["confidence"] is not None for f in report["findings"])
    if report["score"] is None:
        assert report["unscored_reason"]
