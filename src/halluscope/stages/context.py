"""Context selection, the one retrieval protocol of the claim methods (long-document stress-test paper §3.2, Eq. 1): the
whole source when the verifier's prompt fits the model's context window (``retrieval=auto``), else per claim the top-K
source sentences each widened to 2w+1 sentences (:class:`RetrievalSelector`, the ``retrieval`` context selector)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from halluscope.options import RetrievalOptions, StageOptions, options_view
from halluscope.records import Claim
from halluscope.stages import Context, Selection, register_stage


@register_stage("retrieval", "context_selector")
class RetrievalSelector:
    """The whole source when it fits (``retrieval=auto``) or always/never as asked; otherwise top-K snippets
    of 2w+1 source sentences per claim."""

    name: str  # set by @register_stage
    uses_llm: ClassVar[bool] = False
    Options: ClassVar[type[StageOptions]] = options_view(
        "RetrievalSelectorOptions",
        RetrievalOptions,
        list(RetrievalOptions.model_fields),
        (
            "The retrieval protocol (long-document stress-test paper): when "
            "to retrieve, K snippets of 2w+1 sentences per claim."
        ),
    )

    def __init__(
        self,
        model: Any = None,
        options: StageOptions | None = None,
        *,
        fits: Callable[[str, Sequence[Claim]], bool] | None = None,
    ):
        self.opts: RetrievalOptions = options or self.Options()  # type: ignore[assignment]
        self.fits: Callable[[str, Sequence[Claim]], bool] = fits or (lambda source, claims: True)

    async def __call__(self, source: str, claims: Sequence[Claim]) -> Selection:
        mode = self.opts.retrieval
        if mode == "never":
            return full_source(source, claims, "retrieval=never: the whole source is sent")
        if mode == "always":
            return await self.retrieve(source, claims, "requested (retrieval=always)")
        if self.fits(source, claims):
            return full_source(source, claims, "retrieval=auto: the whole source fits the model's context")
        return await self.retrieve(source, claims, "retrieval=auto: the source does not fit the model's context window")

    async def retrieve(self, source: str, claims: Sequence[Claim], why: str) -> Selection:
        index = await shared_source_index(source, self.opts)
        texts = [c.text for c in claims]
        snippets = await asyncio.to_thread(index.retrieve_many, texts)
        contexts = {
            claim_id(c): [
                Context(
                    text=s.text, kind="snippet", span=s.span, rank=i, score=s.score, sentences=tuple(s.sentence_indices)
                )
                for i, s in enumerate(snips)
            ]
            for c, snips in zip(claims, snippets)
        }
        details = index.describe()
        details["merge_windows"] = self.opts.merge_windows
        density = {claim_id(c): index.density(c.text) for c in claims}
        if any(v is not None for v in density.values()):
            details["density"] = density
        return Selection("retrieval", why, contexts, details)


async def shared_source_index(source: str, opts: RetrievalOptions) -> Any:
    """The index of ``source`` with the method's retrieval settings, from the process-wide index cache
    (:mod:`halluscope.retrieval.cache`)."""
    from halluscope.retrieval import RetrievalConfig, shared_index

    return await shared_index(
        source,
        RetrievalConfig(
            top_k=opts.top_k,
            window=opts.window,
            retriever=opts.retriever,
            merge_windows=opts.merge_windows,
            embed_all_up_to=opts.embed_all_up_to,
        ),
    )


def full_source(source: str, claims: Sequence[Claim], why: str) -> Selection:
    ctx = Context(text=source, kind="source")
    return Selection("full", why, {claim_id(c): [ctx] for c in claims})


def claim_id(claim: Claim) -> str:
    """The claim's id, the key of its contexts in a :class:`~halluscope.stages.Selection` (pipeline claims have
    ids)."""
    if not claim.id:
        raise ValueError("pipeline claims need ids")
    return claim.id
