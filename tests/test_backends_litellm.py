"""The optional LiteLLM backend: which model strings select it, and real calls through LiteLLM to stub
OpenAI-compatible endpoints on 127.0.0.1 (``litellm:openai/<name>`` routed there by ``base_url``), all offline.
Skipped without the ``litellm`` extra, except the model-string rule, which never imports LiteLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import halluscope
from halluscope.config import Config
from halluscope.llm import LLMError, build_api, get_llm
from halluscope.llm.base import GenerateParams
from halluscope.llm.litellm_backend import LITELLM_PROVIDERS, litellm_model_name
from halluscope.records import Usage
from tests.test_backends_openai import OK_BODY, ScriptedServer
from tests.test_cache_backends import StubEndpoint

SOURCE = "Source 1: the cat sat on the mat."
TARGET = "Claim number 1."  # the stub rates odd claim numbers 5 (score 1.0)


@pytest.mark.parametrize(
    "model, base_url, expected",
    [
        ("litellm:anthropic/claude-3-5-haiku-latest", None, "anthropic/claude-3-5-haiku-latest"),
        ("litellm:openai/stub", "http://127.0.0.1:9/v1", "openai/stub"),  # litellm: wins with an endpoint too
        ("anthropic/claude-3-5-haiku-latest", None, "anthropic/claude-3-5-haiku-latest"),
        ("bedrock/anthropic.claude-3-haiku-20240307-v1:0", None, "bedrock/anthropic.claude-3-haiku-20240307-v1:0"),
        ("anthropic/claude-3.5-sonnet", "https://openrouter.ai/api/v1", None),  # an endpoint's own model name
        ("Qwen/Qwen2.5-7B-Instruct", "http://127.0.0.1:8000/v1", None),  # a vLLM model name
        ("Qwen/Qwen2.5-7B-Instruct", None, None),  # not a LiteLLM provider: still needs --base-url
        ("gpt-4o-mini", None, None),
        ("qwen2.5:7b", "http://127.0.0.1:11434/v1", None),
        ("embedded:smollm2", None, None),
        ("fake", None, None),
        (None, None, None),
    ],
)
def test_which_model_strings_select_litellm(model, base_url, expected):
    assert litellm_model_name(model, base_url) == expected


def test_an_empty_litellm_model_is_refused():
    with pytest.raises(ValueError, match="needs a LiteLLM model"):
        litellm_model_name("litellm:", None)
    assert "anthropic" in LITELLM_PROVIDERS and "openai" not in LITELLM_PROVIDERS


def test_a_cost_sum_is_known_only_when_every_paid_part_is():
    paid = Usage(calls=1, prompt_tokens=10, cost_usd=0.25)
    unknown = Usage(calls=1, prompt_tokens=10)  # e.g. an OpenAI-compatible call: no price
    assert (Usage() + paid).cost_usd == 0.25 and (paid + Usage(cache_hits=1)).cost_usd == 0.25  # hits are free
    assert (paid + paid).cost_usd == 0.5
    assert (paid + unknown).cost_usd is None and not (paid + unknown).cost_known
    assert (Usage() + Usage(cache_hits=2)).cost_usd is None and Usage(cache_hits=2).cost_known  # nothing paid
    assert sum([paid, Usage(cache_hits=1), paid], Usage()).cost_usd == 0.5


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the backend does: no fetch at import
litellm = pytest.importorskip("litellm", reason="litellm extra not installed: pip install 'halluscope[litellm]'")
from halluscope.llm.litellm_backend import LiteLLMModel  # noqa: E402


def test_a_provider_string_builds_the_litellm_backend_without_calling_it():
    api = build_api(Config(model="anthropic/claude-3-5-haiku-latest", cache=False))
    assert isinstance(api, LiteLLMModel) and api.name == "anthropic/claude-3-5-haiku-latest"
    assert api.cache_id == "litellm:anthropic/claude-3-5-haiku-latest@"


def test_check_through_litellm_to_a_stub_endpoint_uses_cache_and_accounting(tmp_path):
    with StubEndpoint() as stub:
        config = Config(
            model="litellm:openai/stub-model",
            base_url=stub.base_url,
            api_key="sk-test",
            cache_path=tmp_path / "cache.sqlite",
        )
        first = halluscope.check(SOURCE, TARGET, method="geval", config=config)
        assert first.score == 1.0 and first.model == "openai/stub-model"
        assert first.usage.model_copy(update={"cost_note": None}) == Usage(
            calls=1, prompt_tokens=10, completion_tokens=5
        )
        assert first.usage.cost_usd is None  # no price for a model LiteLLM does not know: never made up
        assert "no price for 'openai/stub-model'" in (first.usage.cost_note or "")  # and it says why
        assert len(stub.arrived) == 1
        again = halluscope.check(SOURCE, TARGET, method="geval", config=config)
        assert again.score == 1.0 and again.usage == Usage(cache_hits=1)  # the shared response cache
        assert len(stub.arrived) == 1
        assert again.usage.cost_usd is None and again.usage.cost_known  # nothing was paid for


def test_cost_per_report_comes_from_litellms_price_map():
    with StubEndpoint() as stub:
        config = Config(model="litellm:openai/gpt-4o-mini", base_url=stub.base_url, api_key="sk-test", cache=False)
        report = halluscope.check(SOURCE, TARGET, method="geval", config=config)
    prompt_cost, completion_cost = litellm.cost_per_token(
        model="openai/gpt-4o-mini", prompt_tokens=10, completion_tokens=5
    )
    assert report.usage.calls == 1
    assert report.usage.cost_usd == pytest.approx(prompt_cost + completion_cost)
    assert report.usage.cost_usd > 0


def test_the_cli_prints_the_cost_where_it_is_known(tmp_path):
    from halluscope.cli.main import app

    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    with StubEndpoint() as stub:
        args = [
            "check",
            "-s",
            str(tmp_path / "s.txt"),
            "-t",
            str(tmp_path / "t.txt"),
            "--method",
            "geval",
            "--base-url",
            stub.base_url,
            "--no-cache",
        ]
        known = CliRunner().invoke(app, [*args, "--model", "litellm:openai/gpt-4o-mini"])
        unknown = CliRunner().invoke(app, [*args, "--model", "litellm:openai/stub-model"])
    assert known.exit_code == 0 and unknown.exit_code == 0
    assert "1 LLM calls, 10+5 tokens, 0 replies from cache, $0.000005" in known.stdout  # 10 x $0.15/M + 5 x $0.60/M
    assert "0 replies from cache, $" not in unknown.stdout
    assert "1 LLM calls, 10+5 tokens, 0 replies from cache, cost unknown" in unknown.stdout


def test_the_cli_runs_check_with_a_litellm_model_string(tmp_path):
    from halluscope.cli.main import app

    (tmp_path / "s.txt").write_text(SOURCE)
    (tmp_path / "t.txt").write_text(TARGET)
    with StubEndpoint() as stub:
        result = CliRunner().invoke(
            app,
            [
                "check",
                "-s",
                str(tmp_path / "s.txt"),
                "-t",
                str(tmp_path / "t.txt"),
                "--method",
                "geval",
                "--model",
                "litellm:openai/stub-model",
                "--base-url",
                stub.base_url,
                "--api-key",
                "sk-test",
                "--no-cache",
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)  # LiteLLM may log warnings to stderr
        assert report["score"] == 1.0 and report["usage"]["calls"] == 1 and len(stub.arrived) == 1


def _model(url: str, **kwargs) -> LiteLLMModel:
    return LiteLLMModel(
        "openai/stub", api_base=url, api_key="sk-test", backoff_initial_s=0.001, backoff_max_s=0.002, **kwargs
    )


MSGS = [{"role": "user", "content": "Say OK."}]


async def test_a_429_is_retried_with_bounded_backoff():
    with ScriptedServer([(429, {"error": {"message": "slow down"}}, {}), (200, OK_BODY, {})]) as server:
        completion = await _model(server.url, max_retries=2).generate(MSGS, GenerateParams())
    assert completion.text == "OK" and completion.usage.prompt_tokens == 7
    assert len(server.requests) == 2  # LiteLLM's own retries are off: exactly our one retry


async def test_a_refused_request_is_not_retried_and_a_textless_reply_is_an_error():
    with ScriptedServer([(401, {"error": {"message": "bad key"}}, {})]) as server:
        with pytest.raises(LLMError, match="openai/stub"):
            await _model(server.url, max_retries=3).generate(MSGS, GenerateParams())
        assert len(server.requests) == 1
    null = {"choices": [{"message": {"role": "assistant", "content": None}}], "usage": {}}
    with ScriptedServer([(200, null, {})]) as server:
        with pytest.raises(LLMError, match="unusable reply"):
            await _model(server.url, max_retries=0).generate(MSGS, GenerateParams())


async def test_json_schema_is_asked_for_in_openais_spelling():
    schema = json.dumps({"type": "object", "properties": {"score": {"type": "integer"}}})
    with ScriptedServer([(200, OK_BODY, {})]) as server:
        await _model(server.url).generate(MSGS, GenerateParams(json_schema=schema, max_tokens=16))
    body = server.requests[0]["body"]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == json.loads(schema)
    assert body["max_tokens"] == 16 and body["model"] == "stub"


def test_the_rate_limiter_applies_to_the_litellm_backend():
    llm = get_llm(
        Config(model="litellm:openai/stub", base_url="http://127.0.0.1:9/v1", requests_per_minute=5, cache=False)
    )
    assert isinstance(llm.api, LiteLLMModel) and llm.rate_limiter.requests_per_minute == 5


def test_importing_halluscope_does_not_import_litellm():
    code = (
        "import sys, halluscope, halluscope.llm, halluscope.llm.litellm_backend; "
        "halluscope.llm.build_api(halluscope.Config(model='gpt-4o-mini', base_url='http://127.0.0.1:9/v1')); "
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
