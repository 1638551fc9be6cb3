"""``Report.details`` of ``dcr`` (and of ``improve`` with its default evaluator): :class:`DcrDetails`."""

from __future__ import annotations

from typing import Any, Literal

from halluscope.methods.details import PipelineDetails


class DcrDetails(PipelineDetails):
    """The pipeline's keys plus what DCE said beyond one verdict per unit and how AMC weighed it."""

    other_reasons: list[dict[str, Any]] | None = None
    """DCE's reasons that are about no judged unit: ``reason``, ``mark`` and ``sentence`` (1-based, or null)."""
    amc_weights: Literal["paper", "auto"] | None = None
    """The AMC weighting that produced the score (the ``amc_weights`` option)."""
    dce_is_consistent: bool | None = None
    """DCE's own overall is-consistent answer (recorded only, never used in the score); absent when it gave none."""
