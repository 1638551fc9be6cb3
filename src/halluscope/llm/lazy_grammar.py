"""Grammar-constrained greedy decoding that asks the grammar about one token, not the whole vocabulary.

llama-cpp-python (0.3.x) samples a grammar-constrained reply with the chain penalties -> grammar -> greedy
(``Llama._init_sampler``): at every step the grammar is evaluated against every candidate token (151k for
Qwen2.5, 49k for SmolLM2) before the greedy pick, which is what made schema replies slower than plain text.
llama.cpp's own ``common`` sampler does it the other way round, and so does :class:`LazyGrammarGreedy`:

1. take the greedy token of the unconstrained logits;
2. ask a llama.cpp grammar sampler whether that single token is allowed (a one-element candidate array);
3. only when it is not, apply the grammar to the full candidate array and take the best allowed token;
4. accept the chosen token into the grammar state.

At temperature 0 this is the same token the full pass would pick: the greedy token, when allowed, is also the
first maximum among the allowed ones (ties resolve to the lowest id in both, like llama.cpp's greedy sampler),
and a rejected one falls back to the full pass itself. The reply ends where the constrained one does: once the
grammar is complete only end-of-generation is allowed, so the full pass picks it.

It runs as a llama-cpp-python *logits processor* (the first sampler of the chain, over the whole vocabulary,
index = token id), so the chat template, stop strings, streaming, usage and the KV-cache prefix reuse of
``create_chat_completion`` stay as they are. It is exact only for that chain at temperature 0 without repeat
penalties or logit bias (halluscope sends neither); :func:`lazy_grammar_processor` is used only then.

The grammar is the one llama-cpp-python's chat handler builds from ``response_format`` (its own schema ->
GBNF conversion, falling back to its generic JSON grammar where it does), so both paths constrain to the same
language. Anything missing in the low-level API raises :class:`LazyGrammarUnavailable` before generation, and
anything going wrong inside the processor (it runs in a C callback, where an exception cannot stop the
generation) marks it ``failed``: the caller then uses the full-grammar path (see ``llm/embedded.py``).
"""

from __future__ import annotations

import ctypes
import json
from typing import Any


class LazyGrammarUnavailable(RuntimeError):
    """The installed llama-cpp-python lacks something the lazy sampler needs; use the full-grammar path."""


def schema_grammar_text(schema: dict[str, Any]) -> tuple[str, str]:
    """The GBNF text and root rule llama-cpp-python's chat handler compiles for ``response_format`` =
    ``{"type": "json_object", "schema": schema}`` (same conversion, same fallback to its JSON grammar)."""
    try:
        from llama_cpp.llama_chat_format import _grammar_for_response_format
    except ImportError as exc:
        raise LazyGrammarUnavailable(f"llama_cpp.llama_chat_format._grammar_for_response_format: {exc}") from exc
    grammar = _grammar_for_response_format({"type": "json_object", "schema": schema}, verbose=False)
    text, root = getattr(grammar, "_grammar", None), getattr(grammar, "_root", None)
    if not isinstance(text, str) or not isinstance(root, str):
        raise LazyGrammarUnavailable("LlamaGrammar no longer exposes its GBNF text (_grammar, _root)")
    return text, root


class LazyGrammarGreedy:
    """A llama-cpp-python logits processor: greedy under a grammar, checking the greedy token first.

    Call :meth:`close` when the generation is over (it frees the llama.cpp grammar sampler). ``checks`` counts
    steps, ``full_passes`` the steps whose greedy token the grammar rejected; ``failed`` holds the reason when
    the processor could not constrain a step (the reply is then not to be trusted)."""

    def __init__(self, vocab: Any, grammar_text: str, root: str = "root"):
        try:
            import llama_cpp
            import numpy as np
        except ImportError as exc:
            raise LazyGrammarUnavailable(str(exc)) from exc
        needed = (
            "llama_sampler_init_grammar",
            "llama_sampler_apply",
            "llama_sampler_accept",
            "llama_sampler_free",
            "llama_token_data",
            "llama_token_data_array",
        )
        missing = [name for name in needed if not hasattr(llama_cpp, name)]
        if missing:
            raise LazyGrammarUnavailable(f"llama_cpp lacks {', '.join(missing)}")
        self._llama_cpp: Any = llama_cpp  # its ctypes structs are typed by c_int32 etc.: plain values go in
        self._np: Any = np
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar_text.encode("utf-8"), root.encode("utf-8"))
        if not self._sampler:
            raise LazyGrammarUnavailable("llama.cpp could not compile the grammar")
        self._one = (self._llama_cpp.llama_token_data * 1)()
        self._one_array = self._llama_cpp.llama_token_data_array(data=self._one, size=1, selected=-1, sorted=False)
        self._full: Any = None  # the whole vocabulary as candidates, allocated on the first rejection
        self._full_view: Any = None
        self._full_array: Any = None
        self._ids: Any = None
        self.checks = 0
        self.full_passes = 0
        self.failed: str | None = None

    def _allowed(self, token: int, logit: float) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, logit, 0.0
        self._one_array.size, self._one_array.selected, self._one_array.sorted = 1, -1, False
        self._llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return bool(self._one[0].logit != float("-inf"))

    def _best_allowed(self, scores: Any) -> int | None:
        np, llama_cpp = self._np, self._llama_cpp
        n = len(scores)
        if self._full is None or len(self._full) != n:
            self._full = (llama_cpp.llama_token_data * n)()
            self._full_view = np.frombuffer(
                self._full, dtype=np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
            )
            self._full_array = llama_cpp.llama_token_data_array(data=self._full, size=n, selected=-1, sorted=False)
            self._ids = np.arange(n, dtype=np.intc)
        view = self._full_view
        view["id"] = self._ids  # index = token id, as in the array llama.cpp hands the first sampler
        view["logit"] = scores
        view["p"] = 0.0
        self._full_array.size, self._full_array.selected, self._full_array.sorted = n, -1, False
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._full_array))
        logits = view["logit"]
        best = int(np.argmax(logits))  # first maximum: llama.cpp's greedy sampler breaks ties the same way
        if logits[best] == float("-inf"):
            return None
        return int(view["id"][best])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.failed:
            return scores
        try:
            self.checks += 1
            token = int(self._np.argmax(scores))
            if not self._allowed(token, float(scores[token])):
                self.full_passes += 1
                allowed = self._best_allowed(scores)
                if allowed is None:
                    self.failed = "the grammar allows no token (the full-grammar path would fail the same way)"
                    return scores
                token = allowed
                scores[token] = float("inf")  # the greedy sampler after this one now picks it
            self._llama_cpp.llama_sampler_accept(self._sampler, token)
        except Exception as exc:  # noqa: BLE001 - a C callback cannot raise; record it, the caller falls back
            self.failed = f"{type(exc).__name__}: {exc}"
        return scores

    def close(self) -> None:
        if self._sampler:
            self._llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None


def lazy_grammar_processor(llama: Any, json_schema: str) -> LazyGrammarGreedy:
    """The lazy processor for one generation of ``llama`` (a ``llama_cpp.Llama``) under ``json_schema`` (JSON
    text); raises :class:`LazyGrammarUnavailable` when the installed llama-cpp-python cannot run it."""
    text, root = schema_grammar_text(json.loads(json_schema))
    vocab = getattr(getattr(llama, "_model", None), "vocab", None)
    if vocab is None:
        raise LazyGrammarUnavailable("Llama._model.vocab is missing")
    return LazyGrammarGreedy(vocab, text, root)
