"""How the pending items of a bench run get scored: an :class:`Engine` yields each item's Report as it finishes
(:class:`LocalEngine`: this process's event loop; ``halluscope.bench.ray_engine.RayEngine``: actors on a Ray
cluster). Every engine scores an item with :func:`score_example`; the runner owns everything else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from halluscope.methods.base import InputError, Method
from halluscope.records import Example, Report


async def score_example(method: Method, example: Example) -> Report:
    """One item, scored the way every engine scores it: ``method.acheck_example``; bad input (empty or
    non-text source/target) becomes an unscored Report instead of stopping the run."""
    try:
        return await method.acheck_example(example)
    except InputError as exc:
        return Report(method=method.name, model=method.model_name, unscored_reason=f"bad input: {exc}")


class Engine(Protocol):
    """Scores the pending items of a run: yields ``(example id, Report)`` as each item finishes, in any order.

    The runner owns everything else (identity, resume, the one writer of ``items.jsonl``, metrics).
    ``concurrency`` is the run's total number of items in flight."""

    name: str

    def results(
        self, method: Method, pending: Sequence[Example], concurrency: int
    ) -> AsyncGenerator[tuple[str, Report], None]: ...


class LocalEngine:
    """Every item on this process's event loop, at most ``concurrency`` at a time."""

    name = "local"

    async def results(
        self, method: Method, pending: Sequence[Example], concurrency: int
    ) -> AsyncGenerator[tuple[str, Report], None]:
        sem = asyncio.Semaphore(concurrency)

        async def one(ex: Example) -> tuple[Example, Report]:
            async with sem:
                return ex, await score_example(method, ex)

        tasks = [asyncio.ensure_future(one(ex)) for ex in pending]
        try:
            for fut in asyncio.as_completed(tasks):
                ex, report = await fut
                yield ex.id, report
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
