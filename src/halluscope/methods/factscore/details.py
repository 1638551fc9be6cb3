"""``Report.details`` of ``factscore``: :class:`FactScoreDetails`."""

from __future__ import annotations

from halluscope.methods.details import PipelineDetails


class FactScoreDetails(PipelineDetails):
    """The pipeline's keys plus the de-duplication of the findings' descriptions."""

    descriptions_before_dedup: int | None = None
    """How many finding descriptions there were before de-duplication."""
    dedup_error: str | None = None
    """Why the LLM de-duplication could not be used (the fuzzy one ran instead); absent when it worked."""
    dedup_note: str | None = None
    """What the de-duplication could not do (e.g. descriptions too many to compare pairwise); absent otherwise."""
