"""One typed record of features per claim, computed once from what the stages already produce.

* the judge: the verdict-first verifier's P(supported) as it is (``judge_prob``) and as a logit (``judge_logit``, P
  clipped to [0.001, 0.999]: the two together let the model bend the judge's scale); ``judge_missing`` = 1 when the
  claim was not scored (P then 0.5, the logit 0); a label without a probability counts as P = 1 or 0;
* the no-LLM gate's findings on the claim (:class:`~halluscope.methods.gate.LexicalGate`, its own signals): the
  counts of numbers, dates and names the source never mentions (the claim's novel entities and numbers, by kind),
  negation flip and whole-for-part clash (0/1), its support score, the 3-gram coverage of its best window and the
  share of its content words found in the source and in that window;
* lexical support against the claim's best source snippet: the highest ROUGE-1 and ROUGE-2 precision of the claim
  against its BM25 source windows (:func:`~halluscope.methods.rouge.rouge_scores`, the claim as the prediction);
* embedding similarity (cosine of the claim and its closest source sentence, all-MiniLM-L6-v2) where the
  ``embeddings`` extra is installed and asked for; absent, ``embedding_missing`` = 1 and the similarity 0 (never
  an error);
* the claim's shape: log(1 + words) and its relative position among the target's claims (0 first, 1 last).

Nothing here calls an LLM: the judge's probability comes in with the verdict.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from halluscope.methods.gate import LexicalGate, _bm25_index
from halluscope.records import Claim, Verdict
from halluscope.text.lexical import tokens

JUDGE_FEATURES = ("judge_prob", "judge_logit", "judge_missing")
LEXICAL_FEATURES = (
    "missing_numbers",
    "missing_dates",
    "missing_names",
    "negation_flip",
    "whole_for_part",
    "gate_score",
    "ngram_coverage",
    "content_found_source",
    "content_found_window",
    "rouge1_precision",
    "rouge2_precision",
)
EMBEDDING_FEATURES = ("embedding_similarity", "embedding_missing")
SHAPE_FEATURES = ("log_length", "position")
FEATURE_NAMES = (*JUDGE_FEATURES, *LEXICAL_FEATURES, *EMBEDDING_FEATURES, *SHAPE_FEATURES)
"""Every feature, in the order of :meth:`ClaimFeatures.vector`."""

P_CLIP = 0.001
"""P(supported) is clipped to [P_CLIP, 1 - P_CLIP] before its logit (a 0/1 label without a probability too)."""


@dataclass(frozen=True)
class ClaimFeatures:
    """The features of one claim (see the module docstring); ``judge_p`` is the judge's P(supported) as it came
    (None when the claim was not scored), kept beside its logit for the reports."""

    claim_id: str
    judge_p: float | None
    judge_prob: float
    judge_logit: float
    judge_missing: float
    missing_numbers: float
    missing_dates: float
    missing_names: float
    negation_flip: float
    whole_for_part: float
    gate_score: float
    ngram_coverage: float
    content_found_source: float
    content_found_window: float
    rouge1_precision: float
    rouge2_precision: float
    embedding_similarity: float
    embedding_missing: float
    log_length: float
    position: float

    def vector(self, names: Sequence[str] = FEATURE_NAMES) -> list[float]:
        """The values of ``names``, in that order."""
        return [float(getattr(self, n)) for n in names]

    def record(self) -> dict[str, Any]:
        """The features as a JSON-ready dict."""
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def judge_probability(verdict: Verdict | None) -> float | None:
    """The judge's P(supported) of a verdict: its probability, else its label as 0/1; None when unscored."""
    if verdict is None or verdict.label == "unscored":
        return None
    if verdict.support_probability is not None:
        return float(verdict.support_probability)
    return 1.0 if verdict.label == "supported" else 0.0


def logit(p: float) -> float:
    q = min(1.0 - P_CLIP, max(P_CLIP, p))
    return math.log(q / (1.0 - q))


def _rouge_precisions(claim: str, windows: Sequence[str]) -> tuple[float, float]:
    """The highest ROUGE-1 and ROUGE-2 precision of the claim against any window (0 without windows)."""
    from halluscope.methods.rouge import rouge_scores  # here: listing the stages imports no method composition

    best1 = best2 = 0.0
    for text in windows:
        scores = rouge_scores(text, claim, types=("rouge1", "rouge2"))
        best1 = max(best1, scores["rouge1"].precision)
        best2 = max(best2, scores["rouge2"].precision)
    return best1, best2


def embedding_similarities(claims: Sequence[str], sentences: Sequence[str]) -> list[float] | None:
    """Per claim, the cosine similarity to its closest source sentence; None when the ``embeddings`` extra is not
    installed or the encoder cannot be loaded (the feature is then absent, never an error)."""
    from halluscope.retrieval.config import embeddings_available

    if not claims or not sentences or not embeddings_available():
        return None
    try:
        from halluscope.retrieval.embeddings import encode

        c = encode(list(claims))
        s = encode(list(sentences))
    except (ImportError, OSError, RuntimeError, ValueError):
        return None
    return [float(v) for v in (c @ s.T).max(axis=1)]


def claim_features_sync(
    claims: Sequence[Claim],
    judged: Sequence[Verdict | None],
    source: str,
    index: Any,
    gate: LexicalGate | None = None,
    embeddings: bool = False,
) -> list[ClaimFeatures]:
    """The features of ``claims`` (in order; ``judged[i]`` the judge's verdict on claim i, None when it has none)
    against ``source`` and its BM25 ``index`` (:func:`~halluscope.retrieval.shared_index`)."""
    if len(claims) != len(judged):
        raise ValueError(f"{len(claims)} claims but {len(judged)} verdicts")
    gate = gate or LexicalGate()
    sims = embedding_similarities([c.text for c in claims], [s.text for s in index.sentences]) if embeddings else None
    n = len(claims)
    out = []
    for i, (claim, verdict) in enumerate(zip(claims, judged)):
        decision = gate.judge(claim, source, None, index)
        signals = decision.signals
        windows = [s.text for s in index.retrieve(claim.text)]
        r1, r2 = _rouge_precisions(claim.text, windows)
        p = judge_probability(verdict)
        out.append(
            ClaimFeatures(
                claim_id=claim.id or f"c{i + 1}",
                judge_p=p,
                judge_prob=p if p is not None else 0.5,
                judge_logit=logit(p) if p is not None else 0.0,
                judge_missing=0.0 if p is not None else 1.0,
                missing_numbers=float(len(signals["missing_numbers"])),
                missing_dates=float(len(signals["missing_dates"])),
                missing_names=float(len(signals["missing_names"])),
                negation_flip=float(bool(signals["negation_flip"])),
                whole_for_part=float(bool(signals["whole_for_part"])),
                gate_score=float(decision.score),
                ngram_coverage=float(signals["coverage"]),
                content_found_source=float(signals["content_precision_source"]),
                content_found_window=float(signals["content_precision_window"]),
                rouge1_precision=r1,
                rouge2_precision=r2,
                embedding_similarity=sims[i] if sims is not None else 0.0,
                embedding_missing=0.0 if sims is not None else 1.0,
                log_length=math.log1p(len(tokens(claim.text))),
                position=i / (n - 1) if n > 1 else 0.0,
            )
        )
    return out


async def claim_features(
    claims: Sequence[Claim], judged: Sequence[Verdict | None], source: str, embeddings: bool = False
) -> list[ClaimFeatures]:
    """:func:`claim_features_sync` with the source's shared BM25 index, off the event loop."""
    gate = LexicalGate()
    index = await _bm25_index(source, gate.opts)
    return await asyncio.to_thread(claim_features_sync, claims, judged, source, index, gate, embeddings)
