"""The lexical retriever (BM25 via ``bm25s``): always available, the fallback when embeddings are not."""

from __future__ import annotations

from typing import Any

from halluscope.retrieval.embeddings import _show_progress


def _bm25_tokens(texts: list[str]) -> list[list[str]]:
    import bm25s

    tokens: list[list[str]] = bm25s.tokenize(
        texts, stopwords="en", return_ids=False, show_progress=_show_progress(len(texts))
    )
    return tokens


class _NoTerms:
    """The index of sentences that hold no term (only stopwords or punctuation, e.g. ``"a b c."``): every query
    scores 0 against each of them (``bm25s`` cannot index a corpus without a term)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def get_scores(self, tokens: list[str]) -> Any:
        import numpy as np

        return np.zeros(self.n, dtype=np.float32)


def _bm25_index(texts: list[str]) -> Any:
    import bm25s

    tokens = _bm25_tokens(texts)
    if not any(tokens):
        return _NoTerms(len(texts))
    bm25 = bm25s.BM25()
    bm25.index(tokens, show_progress=_show_progress(len(texts)))
    return bm25
