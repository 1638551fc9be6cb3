"""The retrieval step as a callable (:class:`Retrieve`) and the one context-window check that decides when retrieval
is needed (:func:`fits_in_context`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from halluscope.options import StageOptions, options_view
from halluscope.retrieval.cache import shared_index
from halluscope.retrieval.config import RetrievalConfig
from halluscope.retrieval.index import Snippet, SourceIndex


def fits_in_context(llm: Any, text: str, reserve_tokens: int | Callable[[], int] = 1024) -> bool:
    """Whether ``text`` plus ``reserve_tokens`` (prompt wording and reply; a callable is asked only when the window
    is known) fits the model's context window: the one such check, used by the claim pipeline and the methods to
    switch to retrieval instead of truncating. Unknown window = assume it fits (the backend raises
    ContextOverflowError if it does not)."""
    window = llm.context_window
    if window is None:
        return True
    tokens = llm.count_tokens(text)
    fits: bool = tokens + (reserve_tokens() if callable(reserve_tokens) else reserve_tokens) <= window
    return fits


class Retrieve:
    """Callable form: ``await Retrieve(config)(source, queries) -> list[list[Snippet]]`` (the source's index comes
    from the process-wide cache, built off the event loop)."""

    name = "retrieve"  # the retrieval step as a callable (no stage kind: not in the stage registry)
    Options: ClassVar[type[StageOptions]] = options_view(
        "RetrieveOptions",
        RetrievalConfig,
        list(RetrievalConfig.model_fields),
        "The retrieval settings (RetrievalConfig).",
    )

    @classmethod
    def from_options(cls, model: Any, options: StageOptions) -> Retrieve:
        """The step from its options (``Retrieve.from_options(None, Retrieve.Options(top_k=3))``); no model."""
        return cls(RetrievalConfig(**options.model_dump()))

    def __init__(self, config: RetrievalConfig | None = None):
        self.config = config or RetrievalConfig()

    async def __call__(self, source: str | SourceIndex, queries: Sequence[str]) -> list[list[Snippet]]:
        index = (
            source.with_config(self.config)
            if isinstance(source, SourceIndex)
            else await shared_index(source, self.config)
        )
        return await asyncio.to_thread(index.retrieve_many, queries)
