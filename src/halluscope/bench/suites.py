"""Pluggable metric suites. A suite looks at the labelled examples and the reports a method produced for
them and returns metrics, Markdown tables and plots. The bench runner calls every suite whose
``applies`` says yes, so a new method or generator adds its own metrics without changing the harness.

    @register_suite("montage_auc", applies=lambda exs: any(e.difficulty for e in exs))
    def montage_auc(examples, reports, ctx): ...
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluscope.records import Example, Report


@dataclass
class SuiteContext:
    out_dir: Path  # where plots go
    method: str
    model: str | None
    dataset: str
    judge: Any = None  # an LLM for suites that need a judge (e.g. FINAL matching); None if not configured
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. reports of the same items from a dev split


@dataclass
class SuiteResult:
    metrics: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable; CIs as {"value","low","high"}
    tables: list[tuple[str, str]] = field(default_factory=list)  # (title, markdown table)
    plots: list[Path] = field(default_factory=list)


SuiteFn = Callable[[list[Example], list[Report], SuiteContext], "SuiteResult | Awaitable[SuiteResult]"]


@dataclass(frozen=True)
class Suite:
    name: str
    fn: SuiteFn
    applies: Callable[[list[Example]], bool]


_SUITES: dict[str, Suite] = {}


def register_suite(name: str, applies: Callable[[list[Example]], bool] = lambda examples: True):
    def deco(fn: SuiteFn) -> SuiteFn:
        if name in _SUITES and _SUITES[name].fn is not fn:
            raise ValueError(f"suite {name!r} is already registered")
        _SUITES[name] = Suite(name, fn, applies)
        return fn

    return deco


def suites() -> dict[str, Suite]:
    return dict(_SUITES)
