"""Thin adapters that check an answer against the documents an LLM framework gave it (see docs/integrations.md).

- :mod:`halluscope.integrations.langchain`: a callback handler and a guard step (``HalluscopeGuard``)
  (``pip install 'halluscope[langchain]'``);
- :mod:`halluscope.integrations.llamaindex`: an evaluator and a guarded query engine (``GuardedQueryEngine``)
  (``pip install 'halluscope[llamaindex]'``).

Each module imports its framework only when imported itself; ``import halluscope`` never does.
"""

from __future__ import annotations

from collections.abc import Sequence

DOCUMENT_SEPARATOR = "\n\n"


def join_documents(texts: Sequence[str]) -> str:
    """The source a framework's documents make: their texts in the order given, blank-line separated."""
    return DOCUMENT_SEPARATOR.join(t for t in texts if t and t.strip())


def document_chunks(texts: Sequence[str]) -> list[str]:
    """The documents' texts as a list of chunks (blank ones dropped), checked as one source whose evidence names
    the chunk it comes from (``Evidence.chunk``: the index in this list; :mod:`halluscope.contexts`)."""
    return [t for t in texts if t and t.strip()]
