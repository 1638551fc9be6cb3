"""``Report.details`` of ``probe``: :class:`ProbeDetails`."""

from __future__ import annotations

from typing import Any

from halluscope.methods.details import PipelineDetails


class ProbeDetails(PipelineDetails):
    """The pipeline's keys plus the record of PROBE's four steps."""

    steps: dict[str, Any] | None = None
    """What each step produced: decomposition, evidence_finding, evidence_evaluation, localization."""
    source_mode: str | None = None
    """The context selection's mode (``full`` or ``retrieval``), as in ``context.mode``."""
    verifier: dict[str, Any] | None = None
    """The PROBE verifier's settings (absent when another verifier was swapped in)."""
