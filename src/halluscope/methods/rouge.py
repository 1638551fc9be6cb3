"""``rouge``: ROUGE-1/2/L precision of the target against the source (no LLM).

Precision asks "how much of the target's n-grams appear in the source", which is the direction that
matters for grounding. The score is the mean of the three precisions unless ``variant`` picks one.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any, Literal

from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.records import Report

_TOKEN = re.compile(r"[a-z0-9]", re.I)
Variant = Literal["mean", "rouge1", "rouge2", "rougeL"]


@register_method
class Rouge(Method):
    name = "rouge"
    description = "ROUGE-1/2/L precision of the target vs the source (lexical overlap baseline, no LLM)."
    uses_llm = False

    def __init__(self, llm=None, config=None, variant: Variant = "mean"):
        super().__init__(llm, config)
        if variant not in ("mean", "rouge1", "rouge2", "rougeL"):
            raise ValueError(f"unknown rouge variant {variant!r}")
        self.variant = variant

    def options(self) -> dict[str, Any]:
        return {"variant": self.variant}

    @cached_property
    def _scorer(self):
        from rouge_score import rouge_scorer

        return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)

    async def run(self, source: str, target: str) -> Report:
        for name, text in (("source", source), ("target", target)):
            if not _TOKEN.search(text):
                # rouge-score keeps only [a-z0-9] tokens; scoring 0 here would be an invented verdict.
                return Report(method=self.name, unscored_reason=f"{name} has no a-z/0-9 tokens for ROUGE")
        scores = self._scorer.score(source, target)  # (reference, prediction)
        sub = {k: float(v.precision) for k, v in scores.items()}
        score = sum(sub.values()) / len(sub) if self.variant == "mean" else sub[self.variant]
        return Report(method=self.name, score=min(1.0, max(0.0, score)), subscores=sub)
