"""``python -m llama_cpp.server`` that decodes like halluscope's embedded backend (``--server-decoding embedded``).

llama-cpp-python's server turns a ``json_object`` + ``schema`` response format into a grammar that is checked
against every candidate token at every step (~35 ms per token on the 1.5B model's 151k vocabulary here, see
``docs/structured_output.md``). halluscope's embedded backend instead asks the grammar about the greedy token
first (:mod:`halluscope.llm.lazy_grammar`): the same tokens, at about plain text's speed. This wrapper gives the
server started by ``benchmarks/cost.py`` the same decoding, so a benchmark through the server measures what the
embedded backend does, for halluscope and the peers alike:

    python benchmarks/lazy_llama_server.py --model X.gguf ...   # the arguments of python -m llama_cpp.server

The lazy pick is made on the raw logits, before llama.cpp's repetition penalties, so it equals the full grammar's
token only without them. The embedded backend calls llama-cpp-python with ``repeat_penalty=1.0`` (its default);
llama_cpp.server fills in ``repeat_penalty=1.1`` for every request that does not name one (OpenAI clients never
do). This server therefore decodes every request with ``repeat_penalty=1.0`` -- the embedded backend's decoding,
not llama_cpp.server's -- and takes the lazy path for a non-streamed schema request at temperature 0 without
penalties, a grammar or a logits processor of its own; anything else, or a schema the lazy sampler cannot compile
or constrain, gets llama.cpp's full grammar. ``LAZY_LLAMA_SERVER_LOG`` names a file that gets one line per schema
request saying which way it was decoded (the benchmark's check that the lazy path ran).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import llama_cpp

from halluscope.llm.lazy_grammar import LazyGrammarUnavailable, lazy_grammar_processor


def _note(way: str) -> None:
    path = os.environ.get("LAZY_LLAMA_SERVER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(way + "\n")


def _lazy_schema(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a request the lazy sampler takes, else None."""
    fmt = kwargs.get("response_format") or {}
    if fmt.get("type") != "json_object" or not fmt.get("schema"):
        return None
    if kwargs.get("stream") or kwargs.get("grammar") is not None or kwargs.get("logits_processor"):
        return None
    if kwargs.get("temperature") != 0 or kwargs.get("logit_bias"):
        return None
    if kwargs.get("repeat_penalty", 1.0) != 1.0 or kwargs.get("frequency_penalty") or kwargs.get("presence_penalty"):
        return None  # the penalties act after the lazy pick: it would not be the full grammar's token
    return fmt["schema"]


def patch_llama() -> None:
    full = llama_cpp.Llama.create_chat_completion

    @functools.wraps(full)
    def create_chat_completion(self: llama_cpp.Llama, *args: Any, **kwargs: Any) -> Any:
        kwargs["repeat_penalty"] = 1.0  # the embedded backend's decoding (llama-cpp-python's default)
        schema = _lazy_schema(kwargs)
        if schema is None or args:
            return full(self, *args, **kwargs)
        try:
            processor = lazy_grammar_processor(self, json.dumps(schema))
        except LazyGrammarUnavailable as exc:
            _note(f"full (unavailable: {exc})")
            return full(self, **kwargs)
        lazy_kwargs = {k: v for k, v in kwargs.items() if k not in ("response_format", "logits_processor")}
        try:
            out = full(self, **lazy_kwargs, logits_processor=llama_cpp.LogitsProcessorList([processor]))
        finally:
            processor.close()
        if processor.failed is None:
            _note("lazy")
            return out
        _note(f"full (lazy failed: {processor.failed})")
        return full(self, **kwargs)

    llama_cpp.Llama.create_chat_completion = create_chat_completion  # type: ignore[method-assign]


def main() -> None:
    patch_llama()
    from llama_cpp.server.__main__ import main as server_main

    sys.argv[0] = "llama_cpp.server"
    server_main()


if __name__ == "__main__":
    main()
