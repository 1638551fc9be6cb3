"""Claim matching (step 1 of PROBE's metrics, reused by every later step) and span overlap."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from halluscope.bench.suite_probe.gold import GoldClaim
from halluscope.records import Claim, Span

MIN_CLAIM_SIMILARITY = 70.0
"""rapidfuzz token-sort ratio (0-100) two claim texts need to be matched."""
EVIDENCE_MIN_OVERLAP = 0.5
"""A found passage hits a gold evidence span when they share this fraction of the shorter one's characters."""


def claim_similarity(a: str, b: str) -> float:
    return float(fuzz.token_sort_ratio(a, b, processor=default_process))


Similarity = Callable[[str, str], float]  # 0-100, compared with ``min_similarity``
ClaimMatching = Literal["lexical", "semantic", "auto"]
MIN_SEMANTIC_SIMILARITY = 70.0  # cosine >= 0.70 of the two claims' sentence embeddings, as 0-100


class SemanticSimilarity:
    """Cosine of two claims' sentence embeddings (the long-document stress-test paper's encoder,
    ``retrieval.load_encoder``), scaled to 0-100; texts are encoded once each."""

    def __init__(self, model: str | None = None):
        from halluscope.retrieval import DEFAULT_EMBEDDING_MODEL, load_encoder

        self.model_name = model or DEFAULT_EMBEDDING_MODEL
        self.encoder = load_encoder(self.model_name)
        self._vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if todo:
            for t, v in zip(todo, self.encoder.encode(todo, normalize_embeddings=True)):
                self._vectors[t] = np.asarray(v, dtype=float)

    def __call__(self, a: str, b: str) -> float:
        self.encode([a, b])
        return float(np.dot(self._vectors[a], self._vectors[b])) * 100


def claim_matcher(kind: ClaimMatching = "lexical") -> tuple[Similarity, float, str]:
    """(similarity, threshold, name) for claim matching. ``semantic`` needs the embeddings extra; ``auto`` is
    semantic when it is installed, else lexical. The name goes into the results (which matching gave a number)."""
    if kind not in ("lexical", "semantic", "auto"):
        raise ValueError(f"claim matching must be lexical, semantic or auto, got {kind!r}")
    if kind != "lexical":
        from halluscope.retrieval import EmbeddingsUnavailable, embeddings_available

        if kind == "semantic" or embeddings_available():
            try:
                sim = SemanticSimilarity()
                return (
                    sim,
                    MIN_SEMANTIC_SIMILARITY,
                    (f"semantic ({sim.model_name} cosine >= {MIN_SEMANTIC_SIMILARITY / 100:.2f}, spans overlapping)"),
                )
            except (EmbeddingsUnavailable, OSError) as exc:
                if kind == "semantic":
                    raise ValueError(f"semantic claim matching is unavailable: {exc}") from exc
    return (
        claim_similarity,
        MIN_CLAIM_SIMILARITY,
        (f"lexical (token-sort ratio >= {MIN_CLAIM_SIMILARITY:.0f}, spans overlapping)"),
    )


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def match_claim(
    claim: Claim,
    gold: Sequence[GoldClaim],
    min_similarity: float = MIN_CLAIM_SIMILARITY,
    similarity: Similarity = claim_similarity,
) -> GoldClaim | None:
    """``claim``'s gold claim (see the package docstring), or None. Ties go to the larger span overlap, then the
    first gold claim."""
    best, best_key = None, None
    for g in gold:
        sim = similarity(claim.text, g.text)
        if sim < min_similarity:
            continue
        overlap = max((_overlap(s, g.span) for s in claim.target_spans), default=0) if g.span is not None else 0
        if claim.target_spans and g.span is not None and overlap == 0:
            continue
        key = (sim, overlap)
        if best_key is None or key > best_key:
            best, best_key = g, key
    return best


def hits(found: Span, gold: Span, min_overlap: float = EVIDENCE_MIN_OVERLAP) -> bool:
    """Whether a found passage hits a gold evidence span (shares ``min_overlap`` of the shorter one)."""
    shorter = min(len(found), len(gold))
    return shorter > 0 and _overlap(found, gold) >= min_overlap * shorter


def _chars(spans: Sequence[Span]) -> set[int]:
    return {i for s in spans for i in range(s.start, s.end)}
