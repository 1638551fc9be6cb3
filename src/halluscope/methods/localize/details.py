"""``Report.details`` of ``localize``: :class:`LocalizeDetails`."""

from __future__ import annotations

from typing import Any, Literal

from halluscope.methods.details import MethodDetails


class LocalizeDetails(MethodDetails):
    """The 2-step filter (when one ran) and the localized descriptions."""

    filter: dict[str, Any] | None = None
    """The 2-step filter's outcome: ``kind`` (self, oracle or a method) and its answer."""
    localized: bool | None = None
    """Whether the localization step ran (false when the filter judged the text consistent)."""
    descriptions: list[str] | None = None
    """The inconsistency descriptions the model gave (empty when there is none)."""
    score: dict[str, Any] | None = None
    """How the score was computed: ``kind`` (probability: the self filter's P(consistent); label: ``1/(1+n)``), the
    option asked (``requested``), ``label_score``, ``probability_score`` where there is one, and ``why`` when the
    label score was used."""
    prompt_variant: Literal[1, 2] | None = None
    """The prompt variant sent (1 or 2)."""
    prompt_variant_note: str | None = None
    """With ``variant=auto`` in a single check: which variant was used and why."""
