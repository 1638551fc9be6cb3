"""The lazy grammar sampler (llm/lazy_grammar.py) against llama-cpp-python's full grammar, on SmolLM2-135M.

The lazy sampler must give exactly the tokens of grammar-constrained greedy decoding: every test here compares
the two byte for byte on the real model, and checks that the sampler really was lazy (it asked the grammar about
the whole vocabulary on a few steps only) and really constrained (it did need the full pass somewhere)."""

from __future__ import annotations

import json
import logging

import pytest

from halluscope.config import Config
from halluscope.llm import GenerateParams, build_api
from halluscope.llm import embedded as embedded_module
from halluscope.llm.lazy_grammar import LazyGrammarGreedy, LazyGrammarUnavailable, lazy_grammar_processor
from halluscope.methods.dove.replies import DoveCheckReply
from halluscope.methods.factscore import FactCheckReply, FactsReply
from halluscope.methods.geval import GevalReply
from tests.conftest import requires_embedded

pytestmark = [pytest.mark.embedded, requires_embedded]

SOURCE = (
    "The ferry opened in March 2021 and crosses the bay every 30 minutes. Two thirds of its cost came from a "
    "regional grant; the city paid the rest."
)

CASES = [
    (
        "facts",
        FactsReply,
        "Split this text into short atomic facts, one claim each: The ferry opened in 2021, "
        "runs every half hour and was paid for by the city alone.\n" + FactsReply.format_instructions(),
    ),
    (
        "fact check",
        FactCheckReply,
        f"SOURCE: {SOURCE}\nFACT: The city paid for the whole ferry.\n"
        "Does the SOURCE support the FACT?\n" + FactCheckReply.format_instructions(),
    ),
    (
        "rating",
        GevalReply,
        f"Rate from 1 to 5 how consistent this summary is with the source.\nSOURCE: {SOURCE}\n"
        "SUMMARY: The ferry runs every 30 minutes.\n" + GevalReply.format_instructions(),
    ),
    (
        "dove check",
        DoveCheckReply,
        f"{SOURCE}\nIs this fact stated by the text above: 'The ferry is free.'\n"
        + DoveCheckReply.format_instructions(),
    ),
]


@pytest.fixture(scope="module")
def llama():
    from llama_cpp import Llama

    model = Llama(
        model_path=str(embedded_module.resolve_gguf("smollm2")),
        n_ctx=2048,
        n_threads=1,
        n_threads_batch=1,
        seed=0,
        verbose=False,
    )
    yield model
    model.close()


def _full(llama, prompt: str, schema: dict, max_tokens: int = 96) -> dict:
    # the schema as halluscope sends it (keys sorted): property order shapes the grammar
    return llama.create_chat_completion(
        messages=[{"role": "user", "content": prompt}],
        temperature=0.0,
        max_tokens=max_tokens,
        response_format={"type": "json_object", "schema": json.loads(json.dumps(schema, sort_keys=True))},
    )


def _lazy(llama, prompt: str, schema: dict, max_tokens: int = 96) -> tuple[dict, LazyGrammarGreedy]:
    processor = lazy_grammar_processor(llama, json.dumps(schema, sort_keys=True))
    try:
        out = llama.create_chat_completion(
            messages=[{"role": "user", "content": prompt}],
            temperature=0.0,
            max_tokens=max_tokens,
            logits_processor=[processor],
        )
    finally:
        processor.close()
    return out, processor


def test_lazy_sampler_gives_the_full_grammars_reply_byte_for_byte(llama) -> None:
    full_passes = 0
    for name, reply, prompt in CASES:
        schema = reply.json_schema()
        expected = _full(llama, prompt, schema)
        got, processor = _lazy(llama, prompt, schema)
        assert processor.failed is None, name
        assert got["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"], name
        assert got["usage"]["completion_tokens"] == expected["usage"]["completion_tokens"], name
        assert got["choices"][0]["finish_reason"] == expected["choices"][0]["finish_reason"], name
        # one grammar check per generated token (and the end), the whole vocabulary only now and then
        assert processor.checks >= got["usage"]["completion_tokens"]
        assert processor.full_passes < processor.checks / 2, name
        full_passes += processor.full_passes
    assert full_passes > 0  # the grammar did overrule the model somewhere: the full pass was exercised


def test_a_reply_cut_by_max_tokens_is_cut_at_the_same_token(llama) -> None:
    name, reply, prompt = CASES[0]
    expected = _full(llama, prompt, reply.json_schema(), max_tokens=9)
    got, _ = _lazy(llama, prompt, reply.json_schema(), max_tokens=9)
    assert got["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
    assert got["choices"][0]["finish_reason"] == expected["choices"][0]["finish_reason"] == "length"


def test_without_the_grammar_the_model_does_not_keep_to_the_schema(llama) -> None:
    """What the equality above rests on: SmolLM2 unconstrained writes something else than the schema reply."""
    _, reply, prompt = CASES[1]
    free = llama.create_chat_completion(messages=[{"role": "user", "content": prompt}], temperature=0.0, max_tokens=96)
    constrained, _ = _lazy(llama, prompt, reply.json_schema())
    assert free["choices"][0]["message"]["content"] != constrained["choices"][0]["message"]["content"]
    reply.parse(constrained["choices"][0]["message"]["content"])  # the lazy reply validates


def test_a_missing_low_level_function_is_reported_before_generation(monkeypatch, llama) -> None:
    import llama_cpp

    monkeypatch.delattr(llama_cpp, "llama_sampler_apply")
    with pytest.raises(LazyGrammarUnavailable, match="llama_sampler_apply"):
        lazy_grammar_processor(llama, json.dumps(FactCheckReply.json_schema()))


def _backend(grammar: str):
    return build_api(Config(model="embedded:smollm2", cache=False, embedded_grammar=grammar))


def _params(reply, temperature: float = 0.0) -> GenerateParams:
    return GenerateParams(
        temperature=temperature,
        max_tokens=80,
        json_mode=True,
        json_schema=json.dumps(reply.json_schema(), sort_keys=True),
    )


def _spy(monkeypatch) -> list[LazyGrammarGreedy]:
    made: list[LazyGrammarGreedy] = []

    def recording(llama, json_schema):
        made.append(lazy_grammar_processor(llama, json_schema))
        return made[-1]

    monkeypatch.setattr(embedded_module, "lazy_grammar_processor", recording)
    return made


async def test_the_embedded_backend_uses_it_by_default_with_the_same_replies(monkeypatch) -> None:
    made = _spy(monkeypatch)
    lazy, full = _backend("lazy"), _backend("full")
    assert lazy.grammar == "lazy" and full.grammar == "full" and lazy is not full
    _, reply, prompt = CASES[1]
    messages = [{"role": "user", "content": prompt}]
    expected = await full.generate(messages, _params(reply))
    assert made == []  # the switch to the old path really is the old path
    got = await lazy.generate(messages, _params(reply))
    assert len(made) == 1 and made[0].failed is None
    assert got.text == expected.text and got.usage.completion_tokens == expected.usage.completion_tokens
    again = await lazy.generate(
        [{"role": "user", "content": prompt.replace("whole ferry", "ferry alone")}], _params(reply)
    )
    assert again.usage.cached_prompt_tokens > 0  # the KV prefix is still reused on the lazy path
    await lazy.generate(messages, _params(reply, temperature=0.7))
    assert len(made) == 2  # sampling at a temperature keeps llama.cpp's grammar (the lazy pick is greedy)


async def test_env_switch_selects_the_old_path(monkeypatch) -> None:
    monkeypatch.setenv("HALLUSCOPE_EMBEDDED_GRAMMAR", "full")
    assert Config().embedded_grammar == "full"
    monkeypatch.delenv("HALLUSCOPE_EMBEDDED_GRAMMAR")
    assert Config().embedded_grammar == "lazy"


async def test_unavailable_lazy_sampler_falls_back_to_the_full_grammar_with_one_log_line(monkeypatch, caplog) -> None:
    def unavailable(llama, json_schema):
        raise LazyGrammarUnavailable("llama_cpp lacks llama_sampler_apply")

    _, reply, prompt = CASES[3]
    messages = [{"role": "user", "content": prompt}]
    expected = await _backend("full").generate(messages, _params(reply))
    monkeypatch.setattr(embedded_module, "lazy_grammar_processor", unavailable)
    backend = embedded_module.EmbeddedModel("smollm2", n_ctx=2048, grammar="lazy")
    try:
        with caplog.at_level(logging.WARNING, logger="halluscope.llm.embedded"):
            first = await backend.generate(messages, _params(reply))
            second = await backend.generate(messages, _params(reply))
    finally:
        backend.close()
    assert first.text == second.text == expected.text
    lines = [r.getMessage() for r in caplog.records if "lazy grammar sampler unavailable" in r.getMessage()]
    assert len(lines) == 1 and "llama_sampler_apply" in lines[0]


async def test_a_step_it_could_not_constrain_asks_again_with_the_full_grammar(monkeypatch, caplog) -> None:
    def broken(llama, json_schema):
        processor = lazy_grammar_processor(llama, json_schema)
        processor.failed = "simulated failure"  # as if a step had raised inside the C callback
        return processor

    _, reply, prompt = CASES[2]
    messages = [{"role": "user", "content": prompt}]
    expected = await _backend("full").generate(messages, _params(reply))
    monkeypatch.setattr(embedded_module, "lazy_grammar_processor", broken)
    backend = embedded_module.EmbeddedModel("smollm2", n_ctx=2048, grammar="lazy")
    try:
        with caplog.at_level(logging.WARNING, logger="halluscope.llm.embedded"):
            got = await backend.generate(messages, _params(reply))
    finally:
        backend.close()
    assert got.text == expected.text
    reply.parse(got.text)
    assert any("simulated failure" in r.getMessage() for r in caplog.records)


def _lazy_server_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "lazy_llama_server.py"
    spec = importlib.util.spec_from_file_location("lazy_llama_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_servers_patch_decodes_like_the_embedded_backend(monkeypatch, tmp_path, llama) -> None:
    """``benchmarks/lazy_llama_server.py`` (``cost.py --server-decoding embedded``) turns llama_cpp.server's requests
    into the embedded backend's decoding: repeat_penalty 1.0 whatever the server filled in, and a schema request at
    temperature 0 through the lazy sampler, with the full grammar's reply; penalties of the request's own keep the
    full grammar (the lazy pick comes before them)."""
    import llama_cpp

    _, reply, prompt = CASES[3]  # a prompt on which repeat_penalty 1.1 changes the reply
    schema = json.loads(json.dumps(reply.json_schema(), sort_keys=True))
    request = dict(
        messages=[{"role": "user", "content": prompt}],
        temperature=0.0,
        max_tokens=96,
        response_format={"type": "json_object", "schema": schema},
        grammar=None,
        stream=False,
    )
    expected = llama.create_chat_completion(**request)  # llama-cpp-python's default repeat_penalty is 1.0
    server_default = llama.create_chat_completion(**request, repeat_penalty=1.1)
    assert server_default["choices"][0]["message"]["content"] != expected["choices"][0]["message"]["content"]
    with_presence = dict(request, presence_penalty=1.5)
    expected_presence = llama.create_chat_completion(**with_presence, repeat_penalty=1.0)

    log = tmp_path / "ways.log"
    monkeypatch.setenv("LAZY_LLAMA_SERVER_LOG", str(log))
    monkeypatch.setattr(llama_cpp.Llama, "create_chat_completion", llama_cpp.Llama.create_chat_completion)
    _lazy_server_module().patch_llama()
    got = llama.create_chat_completion(**request, repeat_penalty=1.1)  # what llama_cpp.server sends by default
    assert got["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]
    assert got["usage"] == expected["usage"]
    assert log.read_text().splitlines() == ["lazy"]
    presence = llama.create_chat_completion(**with_presence, repeat_penalty=1.1)
    assert presence["choices"][0]["message"]["content"] == expected_presence["choices"][0]["message"]["content"]
    assert log.read_text().splitlines() == ["lazy"]  # not lazy: the request's own penalty applies
