"""The perturbation names and the records a perturbation run produces: output rows, skips, per-group results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from halluscope.records import Example, LLMCall, Usage

PerturbationName = Literal[
    "paraphrased",
    "simplified",
    "synonym_replaced",
    "less_diverse",
    "negated",
    "compressed",
    "added_source_sentence",
]
PERTURBATIONS: tuple[str, ...] = (
    "paraphrased",
    "simplified",
    "synonym_replaced",
    "less_diverse",
    "negated",
    "compressed",
    "added_source_sentence",
)
ORIGINAL = "original"  # difficulty of the unperturbed row in each group

Unit = Literal["target", "sentence"]
InsertWith = Literal["auto", "tfidf", "retrieval", "llm"]


class PerturbationSkip(BaseModel):
    """A perturbation that was not produced, and why (the raw replies are kept for audit)."""

    model_config = ConfigDict(extra="forbid")

    example_id: str
    perturbation: str
    reason: str
    calls: list[LLMCall] = Field(default_factory=list)


@dataclass
class PerturbOutcome:
    """What one perturbation stage made of one original: the perturbed row, or the skip with its reason."""

    perturbation: str
    example: Example | None = None
    skip: PerturbationSkip | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass
class GroupResult:
    """All rows produced for one original: the original first, then the kept perturbations."""

    original: Example
    rows: list[Example]
    skips: list[PerturbationSkip]
    usage: Usage

    @property
    def kept(self) -> int:
        return max(0, len(self.rows) - 1)


def usage_of(calls: Sequence[LLMCall]) -> Usage:
    total = Usage()
    for call in calls:
        total = total + call.usage
    return total


def skipped(original: Example, perturbation: str, reason: str, calls: list[LLMCall]) -> PerturbOutcome:
    """The outcome of a perturbation that was not produced (its calls are kept on the skip)."""
    return PerturbOutcome(
        perturbation,
        skip=PerturbationSkip(example_id=original.id, perturbation=perturbation, reason=reason, calls=calls),
        usage=usage_of(calls),
    )


def perturbed_row(original: Example, perturbation: str, target: str, meta: dict[str, Any]) -> Example:
    """A kept perturbation of ``original``: same source, group = the original's id, label 1, no descriptions."""
    return Example(
        id=f"{original.id}::{perturbation}",
        source=original.source,
        target=target,
        label=1,
        descriptions=[],
        group=original.id,
        difficulty=perturbation,
        split=original.split,
        meta={"perturbation": perturbation, "original_id": original.id, **meta},
    )


def original_row(original: Example) -> Example:
    """The unperturbed row of a group."""
    meta = dict(original.meta)
    if original.difficulty is not None:
        meta["input_difficulty"] = original.difficulty
    if original.group is not None:
        meta["input_group"] = original.group
    return original.model_copy(
        update={
            "label": 1 if original.label is None else original.label,
            "descriptions": original.descriptions if original.descriptions is not None else [],
            "group": original.id,
            "difficulty": ORIGINAL,
            "meta": {**meta, "perturbation": ORIGINAL, "original_id": original.id},
        }
    )
