"""FActScore's options (:class:`FactScoreOptions`): the method's, and the ones its localizer takes a view of."""

from __future__ import annotations

from pydantic import Field

from halluscope.options import MAX_BATCH_SIZE, ClaimOptions

DEFAULT_DEDUPLICATOR = "llm"
"""FActScore's own deduplicator (the paper's: the model picks one description of each group), used when
``deduplicator`` names none."""
RETIRED_DEDUP = {"dedup": "deduplicator=NAME (llm, fuzzy, none, or any registered deduplicator)"}


class FactScoreOptions(ClaimOptions):
    retired_spellings = RETIRED_DEDUP

    describe: bool = True
    """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

    deduplicator: str | None = None
    """How descriptions repeated across facts are merged (the deduplicator stage): llm (the default, the paper's: the
    model keeps one of each group of duplicates, by number), fuzzy (no LLM call; near-identical wordings only), none,
    or any registered deduplicator (`halluscope stages deduplicator`); its options as deduplicator.OPTION."""

    dedup_threshold: float = Field(default=85.0, ge=0, le=100)
    """Fuzzy de-duplication (deduplicator=fuzzy, and the fallback of deduplicator=llm): word-order-insensitive
    similarity (0-100) at which two descriptions merge."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one call
    per fact; with retrieval every fact has its own snippets and its own calls)."""
