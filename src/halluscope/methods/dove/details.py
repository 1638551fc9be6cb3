"""``Report.details`` of ``dove``: :class:`DoveDetails`."""

from __future__ import annotations

from typing import Any

from halluscope.methods.details import PipelineDetails


class DoveDetails(PipelineDetails):
    """The pipeline's keys (``context`` also says which excerpt the sorter saw) plus the facts and the order."""

    decomposition: dict[str, list[str]] | None = None
    """The decomposed facts by kind: ``event_facts`` and ``descriptive_facts`` (their texts)."""
    unscored_facts: list[dict[str, Any]] | None = None
    """The facts that could not be checked: ``id`` and ``reason``."""
    order: dict[str, Any] | None = None
    """The event order: ``verified_events`` (ids), then the sorters' repairs or a ``note``."""
