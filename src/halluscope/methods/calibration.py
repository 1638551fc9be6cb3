"""The calibration hook: what a method may fix on development items before a benchmark scores it.

Most methods have nothing to choose (``Method.needs_calibration`` is False and the bench calls nothing). A method
that leaves a choice to a dev set (FINAL's ``localize``: prompt variant, 2-step threshold) answers True and
implements ``Method.calibrate(dev_items, bench)``: it may score methods on the dev items through ``bench`` (each
an ordinary resumable bench run in its own folder) and returns the method with concrete options plus a
:class:`Calibration` record, which the bench keeps in ``results.json``, pins in ``run.json`` and renders in
``results.md``. The bench knows no method by name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from halluscope.records import Example, Report


class ScoreOnItems(Protocol):
    """Score ``method`` (a :class:`~halluscope.methods.base.Method`, typed ``Any`` here since ``methods.base``
    imports this module) on ``items`` as a bench run in ``out`` (resumable, its own ``items.jsonl``): returns that
    run's ``results.json`` content and the reports in the order of ``items``."""

    def __call__(
        self, method: Any, items: list[Example], name: str, out: Path, *, judge: Any, suites: Sequence[str]
    ) -> Awaitable[tuple[dict[str, Any], list[Report]]]: ...


@dataclass(frozen=True)
class CalibrationBench:
    """What the bench hands a calibrating method."""

    out_dir: Path
    """The run's folder: calibration runs go below it, so a re-run resumes them."""
    selection_name: str
    """Names the dev items in the record (e.g. ``final:dev split dev``)."""
    score: ScoreOnItems
    judge: Any = None
    """The run's judge model (None: no judge)."""
    evaluated_ids: Sequence[str] = field(default_factory=tuple)
    """The items the run evaluates (to record how many dev items were also evaluated)."""


class Calibration(Protocol):
    """A method's record of its dev-set choices."""

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...  # the whole record (results.json)

    def choices(self) -> dict[str, Any]: ...  # the decisions alone (run.json pins them)

    def markdown(self) -> list[str]: ...  # lines for results.md
