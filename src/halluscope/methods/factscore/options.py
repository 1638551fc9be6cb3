"""FActScore's options (:class:`FactScoreOptions`): the method's, and the ones its localizer takes a view of."""

from __future__ import annotations

from pydantic import Field, field_validator

from halluscope.options import MAX_BATCH_SIZE, ClaimOptions
from halluscope.stages import stage_spec


class FactScoreOptions(ClaimOptions):
    describe: bool = True
    """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

    dedup: str = "llm"
    """How descriptions repeated across facts are merged (the deduplicator stage): llm (the paper's: the model keeps
    one of each group of duplicates, by number), fuzzy (no LLM call; near-identical wordings only), none, or any
    registered deduplicator (`halluscope stages deduplicator`)."""

    deduplicator: str | None = None
    """The deduplicator stage by its kind's name (the same choice as dedup, which it replaces when given; its options
    as deduplicator.OPTION)."""

    dedup_threshold: float = Field(default=85.0, ge=0, le=100)
    """Fuzzy de-duplication (dedup=fuzzy, and the fallback of dedup=llm): word-order-insensitive similarity (0-100) at
    which two descriptions merge."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one call
    per fact; with retrieval every fact has its own snippets and its own calls)."""

    @field_validator("dedup")
    @classmethod
    def _registered(cls, value: str) -> str:
        stage_spec("deduplicator", value)  # an unknown name: the error lists the registered ones
        return value
