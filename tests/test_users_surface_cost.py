"""`cost_usd` for any endpoint: from LiteLLM's maintained price map where it knows the model, or from
--price-in/--price-out (US dollars per million tokens); unknown stays null and says why."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

import halluscope.llm.pricing as pricing
from halluscope.cli.main import app
from halluscope.config import Config
from halluscope.methods import get_method
from halluscope.records import Usage
from tests.test_backends_openai import ScriptedServer

SOURCE = "The budget passed on Tuesday."
TARGET = "The budget passed on Tuesday."
BODY = {
    "choices": [{"message": {"role": "assistant", "content": json.dumps({"reason": "ok", "score": 5})}}],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 500},
}


def _check(model: str, **prices: float) -> tuple[Usage, list[dict]]:
    with ScriptedServer([(200, BODY, {})]) as server:
        config = Config(model=model, base_url=server.url, cache=False, **prices)
        report = get_method("geval", config=config).check(SOURCE, TARGET)
    return report.usage, server.requests


def test_given_prices_per_million_tokens_price_any_endpoint() -> None:
    usage, _ = _check("qwen2.5:7b", price_in=2.0, price_out=10.0)
    assert usage.cost_usd == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1e6) and usage.cost_note is None


def test_the_cli_flags_set_the_prices(tmp_path) -> None:
    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    with ScriptedServer([(200, BODY, {})]) as server:
        args = ["check", "-s", str(tmp_path / "s.txt"), "-t", str(tmp_path / "t.txt"), "--method", "geval"]
        args += [
            "--base-url",
            server.url,
            "--model",
            "qwen2.5:7b",
            "--no-cache",
            "--price-in",
            "2",
            "--price-out",
            "10",
        ]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 LLM calls, 1000+500 tokens, 0 replies from cache, $0.007000" in result.stdout


@pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="the litellm extra is not installed")
def test_a_model_litellm_knows_is_priced_from_its_map_at_any_endpoint() -> None:
    entry = pricing.litellm_price_map()["gpt-4o-mini"]
    usage, requests = _check("gpt-4o-mini")
    expected = 1000 * entry["input_cost_per_token"] + 500 * entry["output_cost_per_token"]
    assert usage.cost_usd == pytest.approx(expected) and usage.cost_usd > 0
    assert requests[0]["path"] == "/v1/chat/completions"  # the OpenAI-compatible backend, not LiteLLM's


@pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="the litellm extra is not installed")
def test_an_unknown_model_stays_null_and_says_why(tmp_path) -> None:
    usage, _ = _check("qwen2.5:7b")
    assert usage.cost_usd is None
    assert usage.cost_note == (
        "no price for 'qwen2.5:7b' in LiteLLM's price map; "
        "--price-in/--price-out set one (US dollars per million tokens)"
    )


def test_without_litellm_the_cost_is_unknown_and_says_how_to_get_a_price(monkeypatch) -> None:
    monkeypatch.setattr(pricing, "find_spec", lambda name: None)
    pricing.litellm_price_map.cache_clear()
    try:
        usage, _ = _check("gpt-4o-mini")
    finally:
        pricing.litellm_price_map.cache_clear()
    assert usage.cost_usd is None and "pip install 'halluscope[litellm]'" in (usage.cost_note or "")


def test_a_local_model_and_a_reply_without_token_counts_say_why() -> None:
    local = pricing.priced(Usage(calls=1, prompt_tokens=5, completion_tokens=1), ["qwen"], local=True)
    assert local.cost_usd is None and (local.cost_note or "").startswith("a local model has no price")
    counted = pricing.priced(Usage(calls=1), ["gpt-4o-mini"])
    assert counted.cost_usd is None and counted.cost_note == "the model reported no token counts"
    assert pricing.priced(Usage(cache_hits=1), ["gpt-4o-mini"]) == Usage(cache_hits=1)  # a reply from cache: free
