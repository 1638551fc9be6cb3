"""Typed ``Report.details``: each method declares the keys it writes as a :class:`MethodDetails` model.

``Report.details`` stays a plain ``dict`` (the server, the HTML report, the bench, the tabular export and the
integrations read it as one, and its JSON is part of the stable output). What the model adds is a check: a
method builds its details through its model (:meth:`MethodDetails.build` for a key or a few, :meth:`check` for
a whole dict), so an undeclared key (a typo) or a value of the wrong type fails with a ``ValidationError``
where it is written; ``Method.acheck`` checks the finished details once more against the method's
``Details``. The dict a method builds is the dict it passed in, in the same key order with the same values:
the model validates, it never converts, so a report's JSON is what it was before the models existed.

Every key is optional (a key absent from a report is absent from the dict, e.g. when a check ended early);
``None`` is accepted only for the keys a model lists in ``nullable``. Users read a report's details typed
with ``DcrDetails.model_validate(report.details)`` (attributes, and ``model_fields_set`` for the keys the
report has).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


class MethodDetails(BaseModel):
    """The keys a method writes into ``Report.details``. Subclasses declare each key as an optional field with
    a docstring; ``extra="forbid"`` and ``strict=True`` make an undeclared key or a wrong type an error."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True)
    nullable: ClassVar[frozenset[str]] = frozenset()
    """The keys whose value may be ``None`` when present (every other present key must hold a value)."""

    @model_validator(mode="before")
    @classmethod
    def _no_null_unless_nullable(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            bad = [k for k, v in data.items() if v is None and k in cls.model_fields and k not in cls.nullable]
            if bad:
                raise ValueError(f"{cls.__name__}: {', '.join(bad)} may not be null")
        return data

    @classmethod
    def build(cls, **values: Any) -> dict[str, Any]:
        """``values`` as a details dict (same order, same values) once they validate against this model."""
        cls.model_validate(values)
        return dict(values)

    @classmethod
    def check(cls, details: Mapping[str, Any]) -> dict[str, Any]:
        """``details`` (unchanged, as a dict) once it validates against this model."""
        cls.model_validate(dict(details))
        return dict(details)

    @classmethod
    def keys_doc(cls) -> list[tuple[str, str]]:
        """(key, its docstring) for every declared key, in declaration order (for ``halluscope methods NAME``)."""
        return [(name, " ".join((f.description or "").split())) for name, f in cls.model_fields.items()]


class FreeDetails(MethodDetails):
    """The default for a method that declares no details model (a third-party method): any key is accepted."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    nullable: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _no_null_unless_nullable(cls, data: Any) -> Any:
        return data


class NoDetails(MethodDetails):
    """A method that writes no details (``rouge``): any key is an error."""


class PipelineDetails(MethodDetails):
    """The keys every claim pipeline (:class:`~halluscope.methods.pipeline.ClaimPipeline`) writes."""

    stages: dict[str, str] | None = None
    """The stage each role ran, by role: ``decomposer``, ``context_selector``, ``verifier`` (and a method's own,
    e.g. dove's ``sorter``)."""
    gate: dict[str, Any] | None = None
    """With a gate (cascade): how many claims it settled and how, and which went on to the verifier."""
    score: dict[str, Any] | None = None
    """How the score was computed: ``kind`` (probability or label), the option asked (``requested``), both
    scores where computed (``label_score``, ``probability_score``), how many judged verdicts carry a probability,
    and ``why`` when the label score was used or probabilities were missing."""
    verdict_first: dict[str, Any] | None = None
    """With ``order=verdict_first``: the claims scored, the ones flagged and explained, the explanations that
    failed, the facts of each flagged sentence split to find its failing one (``facts``) and why a generated reason
    gave way to the plain one (``reason_replaced``)."""
    context: dict[str, Any] | None = None
    """The context selection: ``mode`` (full/retrieval), ``why``, the retrieval settings and, in retrieval
    mode, the snippets per claim and the label on each snippet tried."""
