"""The five papers' published numbers, kept as small JSON files next to this module (``paper_results/``).

Each file transcribes the rows of a paper's main results table(s) that correspond to data halluscope has,
exactly as printed (``unit`` says whether a value is a percentage, a fraction or a count), with the table
or figure each number comes from, the model that produced it and the dataset it was measured on. The
loader validates every file (:class:`PaperResults`), so a typo in a number's shape, a unit, or a missing
table reference fails at load time, not in a report.

Lookup: :meth:`PaperResults.lookup` returns the number of ``(row, metric)`` for a chosen model, falling back
to the paper's reference model and then to the first entry that has the metric.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Unit = Literal["percent", "fraction", "count"]
Qualifier = Literal["=", ">", "<", "~"]
PAPERS: tuple[str, ...] = ("dove", "dcr", "final", "longdoc", "probe")


class QualifiedValue(BaseModel):
    """A number the paper gives only as a bound or approximately (e.g. "recall above 80%")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    qualifier: Qualifier = "="


class PaperEntry(BaseModel):
    """The values of one paper row for one model, from one table or figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    row: str
    """The paper's row label (e.g. "DoveScore", "E2E CoT")."""
    model: str | None
    """The model behind the numbers (None for model-free metrics such as ROUGE)."""
    table: str
    """Where the numbers are printed: "Table 4", "Figure 4a (stated in §4.2)", ..."""
    values: dict[str, float | QualifiedValue]
    """metric key (halluscope's name for it) -> the number as printed."""
    unit: Unit | None = None
    """Overrides the paper-level unit."""
    dataset: str | None = None
    """Overrides the paper-level dataset description."""
    split: str | None = None
    note: str | None = None

    @field_validator("values")
    @classmethod
    def _not_empty(cls, values: dict[str, float | QualifiedValue]) -> dict[str, float | QualifiedValue]:
        if not values:
            raise ValueError("an entry needs at least one value")
        return values


class PaperNumber(BaseModel):
    """One published number, resolved: the value on halluscope's scale (fractions stay fractions, percentages
    become fractions, counts stay counts) plus everything needed to cite it."""

    model_config = ConfigDict(frozen=True)

    paper: str
    row: str
    metric: str
    value: float
    printed: float
    qualifier: Qualifier
    unit: Unit
    model: str | None
    table: str
    dataset: str
    split: str
    note: str | None = None

    def cite(self) -> str:
        """``gpt-4o-mini, Table 4`` (model first; no model for model-free metrics)."""
        return ", ".join(x for x in (self.model, self.table) if x)

    def display(self, digits: int = 3) -> str:
        """The value as shown next to ours: ``0.691``, ``> 0.950``, ``111``."""
        prefix = "" if self.qualifier == "=" else f"{self.qualifier} "
        if self.unit == "count":
            return f"{prefix}{self.value:g}"
        return f"{prefix}{self.value:.{digits}f}"


class PaperResults(BaseModel):
    """One paper's file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper: str
    seed: str
    """The file name of the paper in the project's seeds folder."""
    title: str
    reference_model: str
    """The model whose numbers are shown by default when a row has several."""
    dataset: str
    split: str
    unit: Unit
    tables: dict[str, str] = Field(min_length=1)
    """Table/figure -> what it reports."""
    notes: list[str] = Field(default_factory=list)
    entries: list[PaperEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> PaperResults:
        if self.paper not in PAPERS:
            raise ValueError(f"unknown paper {self.paper!r}; expected one of {', '.join(PAPERS)}")
        for entry in self.entries:
            if not any(entry.table == t or entry.table.startswith(t + " ") for t in self.tables):
                raise ValueError(f"{entry.row!r}: table {entry.table!r} is not described in 'tables'")
            unit = entry.unit or self.unit
            for metric, raw in entry.values.items():
                value = raw.value if isinstance(raw, QualifiedValue) else raw
                if unit == "fraction" and not -1.0 <= value <= 1.0:
                    raise ValueError(f"{entry.row!r} {metric}: {value} is not a fraction")
                if unit == "percent" and not 0.0 <= value <= 100.0:
                    raise ValueError(f"{entry.row!r} {metric}: {value} is not a percentage")
                if unit == "count" and (value < 0 or value != int(value)):
                    raise ValueError(f"{entry.row!r} {metric}: {value} is not a count")
        return self

    def rows(self) -> list[str]:
        return list(dict.fromkeys(e.row for e in self.entries))

    def models(self, row: str) -> list[str | None]:
        return list(dict.fromkeys(e.model for e in self.entries if e.row == row))

    def numbers(self, row: str, metric: str) -> list[PaperNumber]:
        """Every published value of ``(row, metric)``, one per model/table, in file order."""
        return [self._number(e, metric) for e in self.entries if e.row == row and metric in e.values]

    def lookup(self, row: str, metric: str, model: str | None = None) -> PaperNumber | None:
        """The number to show for ``(row, metric)``: ``model``'s if given and present, else the reference
        model's, else the first one; None when the paper has no such number."""
        found = self.numbers(row, metric)
        for wanted in (model, self.reference_model):
            if wanted is None:
                continue
            for number in found:
                if number.model is not None and number.model.lower() == wanted.lower():
                    return number
        return found[0] if found else None

    def _number(self, entry: PaperEntry, metric: str) -> PaperNumber:
        raw = entry.values[metric]
        printed, qualifier = (raw.value, raw.qualifier) if isinstance(raw, QualifiedValue) else (raw, "=")
        unit = entry.unit or self.unit
        return PaperNumber(
            paper=self.paper,
            row=entry.row,
            metric=metric,
            value=printed / 100.0 if unit == "percent" else printed,
            printed=printed,
            qualifier=qualifier,
            unit=unit,
            model=entry.model,
            table=entry.table,
            dataset=entry.dataset or self.dataset,
            split=entry.split or self.split,
            note=entry.note,
        )


@cache
def load_paper_results(paper: str) -> PaperResults:
    """The validated published numbers of ``paper`` (one of :data:`PAPERS`)."""
    if paper not in PAPERS:
        raise KeyError(f"unknown paper {paper!r}; choose from {', '.join(PAPERS)}")
    text = resources.files(__package__).joinpath("paper_results", f"{paper}.json").read_text(encoding="utf-8")
    return PaperResults.model_validate(json.loads(text))
