"""Pluggable metric suites. A suite looks at the labelled examples and the reports a method produced for
them and returns metrics, Markdown tables and plots. The bench runner calls every suite whose
``applies`` says yes, so a new method or generator adds its own metrics without changing the harness.

    @register_suite("montage_auc", applies=lambda exs: any(e.difficulty for e in exs))
    def montage_auc(examples, reports, ctx): ...

``reports[i]`` is the report for ``examples[i]``; unscored reports are included so a suite can count
them: use :func:`scored_pairs` to drop them (and report how many were dropped). Suites live in modules
listed in :data:`SUITE_MODULES`; the bench runner imports them (this module stays cheap to import).
A suite module for a new metric appends its dotted module path to ``SUITE_MODULES`` (or, in another
package, declares it in the ``halluscope.suites`` entry point group).
"""

from __future__ import annotations

import importlib
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
    n_bootstrap: int = 1000  # resamples for bootstrap CIs (0 = no CIs)
    prompts_dir: Path | None = None  # prompt overrides for suites that prompt a judge


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


def register_suite(
    name: str, applies: Callable[[list[Example]], bool] = lambda examples: True
) -> Callable[[SuiteFn], SuiteFn]:
    def deco(fn: SuiteFn) -> SuiteFn:
        if name in _SUITES and _SUITES[name].fn is not fn:
            raise ValueError(f"suite {name!r} is already registered")
        _SUITES[name] = Suite(name, fn, applies)
        return fn

    return deco


def suites() -> dict[str, Suite]:
    return dict(_SUITES)


# Modules that define suites, imported by the bench runner (keep the built-ins first); a third-party package
# declares its suite module in the ``halluscope.suites`` entry point group instead.
SUITE_MODULES: list[str] = [
    "halluscope.bench.builtin_suites",
    "halluscope.bench.suite_stress",
    "halluscope.bench.suite_improve",
    "halluscope.bench.suite_probe",
    "halluscope.bench.suite_explain",
]


def load_suite_modules(modules: list[str] | None = None) -> dict[str, Suite]:
    """Import every suite module (registering its suites) and return all registered suites."""
    from halluscope.plugins import load_entry_points

    for module in SUITE_MODULES if modules is None else modules:
        importlib.import_module(module)
    if modules is None:
        load_entry_points("halluscope.suites")  # a plugin's module registers its suites when imported
    return suites()


def scored_pairs(examples: list[Example], reports: list[Report]) -> tuple[list[Example], list[Report], int]:
    """The (example, report) pairs whose report has a score, and how many were unscored."""
    if len(examples) != len(reports):
        raise ValueError(f"{len(examples)} examples but {len(reports)} reports")
    keep = [(e, r) for e, r in zip(examples, reports) if r.score is not None]
    return [e for e, _ in keep], [r for _, r in keep], len(examples) - len(keep)
