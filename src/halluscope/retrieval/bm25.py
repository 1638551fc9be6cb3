"""The lexical retriever (BM25 via ``bm25s``): always available, the fallback when embeddings are not."""

from __future__ import annotations

from typing import Any

from halluscope.retrieval.embeddings import _show_progress

def _bm25_tokens(texts: list[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=_show_progress(len(texts)))


def _bm25_index(texts: list[str]) -> Any:
    import bm25s

    bm25 = bm25s.BM25()
    bm25.index(_bm25_tokens(texts), show_progress=_show_progress(len(texts)))
    return bm25
