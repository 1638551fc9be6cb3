"""Start-up warm-up: import the built-in methods and the libraries their first check would import lazily, before
the service reports ready.

The CLI keeps these imports lazy (``halluscope check`` pays only for the method it runs); a long-running
service pays them once at start instead of in its first request. Two reasons: a broken install (a missing or
incompatible core dependency) fails the start, not a user's request; and the memory a server grows by while it
answers is what its requests cost, not a one-time import (~37 MB: numpy and scipy.sparse, which the BM25
backend needs, are most of it; see docs/service.md).

Not imported here: the embedding model (sentence-transformers, torch), the embedded model (llama.cpp) and
LiteLLM: optional, large, and loaded by the first request that names them.
"""

from __future__ import annotations

import importlib
import logging

from halluscope.methods import list_methods, method_class
from halluscope.stages import stages

# modules that the first check of a built-in method imports lazily, by what needs them
FIRST_USE_MODULES: tuple[tuple[str, str], ...] = (
    ("halluscope.llm.openai_compat", "the OpenAI-compatible client (httpx)"),
    ("halluscope.llm.litellm_backend", "telling a LiteLLM model name from others (not litellm itself)"),
    ("halluscope.text.sentences", "sentence splitting"),
    ("pysbd", "sentence splitting"),
    ("halluscope.retrieval", "retrieval of source snippets"),
    ("bm25s", "the BM25 retriever (with scipy.sparse)"),
)


def warm_up() -> list[str]:
    """Import every built-in method, the built-in stages and :data:`FIRST_USE_MODULES`; the names imported, in
    order. An ``ImportError`` (a broken install) propagates: the service must not report ready without them."""
    done: list[str] = []
    for name in list_methods():
        cls = method_class(name)  # imports the method's module (third-party ones are imported already)
        done.append(f"{cls.__module__}:{cls.__name__}")
    stages()  # the stage registry (a stage whose optional dependency is missing is skipped, as on first use)
    done.append("halluscope.stages")
    for module, _why in FIRST_USE_MODULES:
        importlib.import_module(module)
        done.append(module)
    logging.getLogger("halluscope.server").debug("warmed up: %s", ", ".join(done))
    return done
