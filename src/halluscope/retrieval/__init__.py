"""The one retrieval stage every sentence/claim verifier uses on long sources (long-document stress-test paper §3.2,
SPEC "Long sources").

A :class:`SourceIndex` splits the source into sentences once and embeds them once (or builds a BM25 index
when no embedding model is installed). For each query (a target sentence or claim) it returns K snippets
exactly as the long-document paper (Eq. 1): the top-K source sentences by cosine similarity, each widened by
a symmetric window of ``w`` sentences into its own snippet of 2w+1 sentences (fewer only at the document
edges). Snippets come back best first, carry their exact source character span, and may overlap: two
adjacent hits give two overlapping snippets, each verified on its own. ``RetrievalConfig(merge_windows=True)``
merges windows that share a sentence instead (not the paper's protocol: fewer snippets, so fewer verifier
calls, and a merged snippet only adds context). :meth:`Snippet.to_dict` describes a snippet for a Report.

The max over a claim's snippets (Eq. 2) is the claim pipeline's
(:func:`halluscope.stages.snippets.max_over_snippets`). :meth:`SourceIndex.density` is the claim information
density of Eq. 3.

Embeddings are computed once per text: :func:`encode` looks every text up in an :class:`EmbeddingCache`
keyed by (model name, sha256 of the text) -- a bounded in-memory LRU in front of a SQLite file next to the
LLM response cache (``embeddings.sqlite`` in the folder of ``Config().cache_path``; another file with
``HALLUSCOPE_EMBEDDING_CACHE_PATH``; ``HALLUSCOPE_EMBEDDING_CACHE=false`` turns both off) -- and encodes
only the misses, in one batch. :func:`shared_index` keeps a process-wide, bounded cache of built indexes,
so checking many targets against one source (several summaries, perturbations, montage lies) splits and
embeds it once; the top-K/window settings are per call and do not rebuild anything.
"""

from halluscope.retrieval.cache import (
    SHARED_INDEX_CACHE_SIZE,
    IndexCache,
    IndexKey,
    clear_caches,
    shared_index,
    shared_index_cache,
    shared_index_sync,
)
from halluscope.retrieval.config import (
    DEFAULT_EMBEDDING_MODEL,
    EMBED_ALL_UP_TO,
    EMBEDDING_CACHE_FILE,
    PROGRESS_FROM,
    EmbeddingsUnavailable,
    RetrievalConfig,
    RetrieverName,
    embeddings_available,
    resolve_retriever,
)
from halluscope.retrieval.embedding_cache import (
    EmbeddingCache,
    clear_embedding_caches,
    default_embedding_cache,
    embedding_cache_enabled,
    embedding_cache_path,
    text_key,
)
from halluscope.retrieval.embeddings import encode, load_encoder
from halluscope.retrieval.index import SPLIT_PROGRESS_CHARS, Snippet, SourceIndex
from halluscope.retrieval.stage import Retrieve, fits_in_context

__all__ = [
    "DEFAULT_EMBEDDING_MODEL",
    "EMBED_ALL_UP_TO",
    "EMBEDDING_CACHE_FILE",
    "PROGRESS_FROM",
    "SHARED_INDEX_CACHE_SIZE",
    "SPLIT_PROGRESS_CHARS",
    "EmbeddingCache",
    "EmbeddingsUnavailable",
    "IndexCache",
    "IndexKey",
    "Retrieve",
    "RetrievalConfig",
    "RetrieverName",
    "Snippet",
    "SourceIndex",
    "clear_caches",
    "clear_embedding_caches",
    "default_embedding_cache",
    "embedding_cache_enabled",
    "embedding_cache_path",
    "embeddings_available",
    "encode",
    "fits_in_context",
    "load_encoder",
    "resolve_retriever",
    "shared_index",
    "shared_index_cache",
    "shared_index_sync",
    "text_key",
]
