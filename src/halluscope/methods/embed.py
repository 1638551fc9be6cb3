"""``embed``: embedding-similarity baseline (no LLM; the long-document stress-test paper's sentence encoder used as the
metric itself).

Each target sentence is embedded and compared with every source sentence; its score is the best cosine
similarity (the closest source sentence), and the target's score is the mean over its sentences. Cosines
below 0 are clipped to 0 so the score stays in [0, 1]. This measures "is each sentence close to something in
the source", not entailment: a negated or number-swapped sentence stays close to its source sentence, so
expect it to miss such edits. It needs the ``embeddings`` extra (no BM25 fallback: BM25 scores are not
similarities on a fixed scale).

Per-sentence details (best source span, cosine, information density of long-document stress-test paper Eq. 3) are in
``Report.details["sentences"]``. With ``flag_below`` set, sentences whose best cosine is below it become
``unsupported`` verdicts and findings, so the baseline can also be scored on span metrics.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from halluscope.config import Config
from halluscope.llm import LLM
from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.methods.details import MethodDetails
from halluscope.options import MethodOptions
from halluscope.records import Claim, Evidence, Finding, Report, Verdict
from halluscope.retrieval import DEFAULT_EMBEDDING_MODEL, RetrievalConfig, resolve_retriever, shared_index
from halluscope.text import split_sentences


class EmbedOptions(MethodOptions):
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """Sentence-transformers model name or local directory."""

    flag_below: float | None = Field(default=None, ge=-1.0, le=1.0)
    """If set, target sentences whose best cosine is below this are reported as findings."""


class EmbedDetails(MethodDetails):
    """``Report.details`` of ``embed``."""

    sentences: list[dict[str, Any]] | None = None
    """Per target sentence: its best source span, the cosine and the information density (long-document stress-test
    paper Eq. 3)."""
    retrieval: dict[str, Any] | None = None
    """The embedding index's settings."""


@register_method
class Embed(Method):
    name = "embed"
    description = "Embedding similarity: per target sentence the max cosine to a source sentence, averaged (no LLM)."
    uses_llm = False

    Options = EmbedOptions
    Details: ClassVar[type[MethodDetails]] = EmbedDetails

    def __init__(self, llm: LLM | None = None, config: Config | None = None, **options: Any):
        super().__init__(llm, config, **options)
        resolve_retriever("embedding")  # fail now, with the install hint, when the extra is missing
        self.embedding_model = self.opts.embedding_model  # type: ignore[attr-defined]
        self.flag_below = self.opts.flag_below  # type: ignore[attr-defined]

    async def run(self, source: str, target: str) -> Report:
        config = RetrievalConfig(retriever="embedding", top_k=1, window=0, embedding_model=self.embedding_model)
        index = await shared_index(source, config)
        sentences = await asyncio.to_thread(split_sentences, target)  # CPU work: off the event loop
        if not sentences or not len(index):
            return Report(method=self.name, unscored_reason="no sentences in the source or the target")
        await asyncio.to_thread(index.embed_queries, [s.text for s in sentences])
        claims, verdicts, findings, rows = [], [], [], []
        best_scores: list[float] = []
        for s in sentences:
            scores = index.sentence_scores(s.text)
            best = int(np.argmax(scores))
            cosine = float(scores[best])
            source_sentence = index.sentences[best]
            claim = Claim(text=s.text, kind="sentence", id=f"s{s.index + 1}", target_spans=[s.span])
            claims.append(claim)
            best_scores.append(min(1.0, max(0.0, cosine)))  # float32 cosines can overshoot 1 slightly
            rows.append(
                {
                    "id": claim.id,
                    "span": s.span.model_dump(),
                    "max_cosine": cosine,
                    "best_source_span": source_sentence.span.model_dump(),
                    "density": float(np.mean(scores)),
                }
            )
            if self.flag_below is not None:
                evidence = [Evidence(text=source_sentence.text, span=source_sentence.span, relation="related")]
                low = cosine < self.flag_below
                verdict = Verdict(
                    claim=claim,
                    label="unsupported" if low else "supported",
                    score=cosine,
                    evidence=evidence,
                    reason=f"closest source sentence has cosine {cosine:.3f}",
                )
                verdicts.append(verdict)
                if low:
                    findings.append(
                        Finding(
                            description=f'"{s.text}" has no close counterpart in the source (best cosine '
                            f"{cosine:.3f} < {self.flag_below}).",
                            kind="unsupported",
                            target_spans=[s.span],
                            evidence=evidence,
                            claim_ids=[claim.id or ""],
                        )
                    )
        return Report(
            method=self.name,
            score=float(np.mean(best_scores)),
            claims=claims,
            verdicts=verdicts,
            findings=findings,
            subscores={"min_sentence": float(min(best_scores))},
            details=EmbedDetails.build(sentences=rows, retrieval=index.describe()),
        )
