"""What a reproduce protocol is made of: rows (one halluscope method + options per row of the paper's table), the
metrics that map suite results onto the paper's columns, the protocol itself, the run's context, and the choice
of rows."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluscope.bench.reproduce.builders import BuildMode, BuiltSet
from halluscope.bench.reproduce.checkpoints import Checkpoint
from halluscope.bench.reproduce.papers import PaperResults, load_paper_results
from halluscope.config import Config

REPRODUCE_JSON = "reproduce.json"
REPRODUCE_MD = "reproduce.md"

# What a suite needs from the data, for the "cannot compute" reason when it did not apply.
SUITE_NEEDS = {
    "final_matching": "gold inconsistency descriptions",
    "correlation": "human consistency scores",
    "montage_auc": "montage groups (truths and lies with difficulties)",
    "stress": "perturbation groups (an original row per group)",
    "probe_steps": "gold hallucinated spans",
    "span": "gold hallucinated spans",
    "rai_improvement": "improvement rounds (the improve method)",
    "binary": "binary labels",
}


class ReproduceError(RuntimeError):
    """A reproduce run that cannot go ahead (unknown paper or row, bad options, unusable folder)."""


@dataclass(frozen=True)
class Metric:
    """One column of the paper's table: where our value is in the row's bench results, and the paper's key."""

    key: str  # the metric key in the paper's results file (and in reproduce.json)
    label: str  # shown in the table
    suite: str  # the bench suite that computes it
    path: tuple[str, ...]  # where the value is inside results["metrics"][suite]
    undefined: str | None = None  # why the value can be undefined, when that is known in advance
    subset: bool = False  # the value is over a subset of the items by design (e.g. one perturbation's rows)
    paper_path: tuple[str, ...] | None = None
    """Where the paper's variant of the value is when the data allows it (e.g. the per-document correlation when
    documents repeat); ``path`` is used otherwise. The record names which one was used (``level``)."""
    level_names: tuple[str, str] = ("paper", "fallback")  # (name of paper_path's value, name of path's value)


@dataclass(frozen=True)
class Row:
    """One row of the paper's table. ``method=None``: a row of the paper that halluscope does not implement
    (kept for the layout, with ``reason``)."""

    id: str
    paper_row: str
    metrics: tuple[Metric, ...]
    method: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dataset: str = "main"
    reason: str | None = None
    analogue: bool = False  # the paper numbers shown are of the nearest analogue, not this method
    note: str | None = None
    checkpoint: Checkpoint | None = None  # the encoder checkpoint the row needs (its stage is in ``options``)

    def title(self) -> str:
        if self.method is None:
            return self.paper_row
        opts = " ".join(f"{k}={_opt(v)}" for k, v in self.options.items())
        return f"{self.id} (`{self.method}{' ' + opts if opts else ''}`)"


def _opt(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


@dataclass
class ReproduceContext:
    """Everything a protocol needs to build its data and run its rows."""

    out_dir: Path
    config: Config
    data_dir: Path | None = None
    dataset: str | None = None
    sample: int | None = None
    seed: int = 0
    limit: int | None = None
    builder: BuildMode = "no-llm"
    build_options: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    select_holdout: float | None = None  # FINAL: share of the items held out (not scored) for the variant choice
    select_on: Any = None  # FINAL: a Dataset the choices are made on instead (e.g. a user's file)
    llm: Any = None  # an LLM to use instead of one built from ``config`` (tests: the scripted fake)
    gold_llms: list[Any] = field(default_factory=list)
    """PROBE: the models that build the gold truthful claims and evidence (``--gold-model``; the first also
    decomposes, each finds evidence and votes); empty: no gold unless ``--build gold_evidence=self``."""
    _llm_built: Any = None

    def get_llm(self) -> Any:
        if self.llm is not None:
            return self.llm
        if self._llm_built is None:
            from halluscope.llm import get_llm

            self._llm_built = get_llm(self.config)
        return self._llm_built


@dataclass
class Protocol:
    """A paper's main evaluation protocol."""

    name: str
    description: str
    base_dataset: str
    rows: tuple[Row, ...]
    embedded_rows: tuple[str, ...]
    build: Callable[[ReproduceContext], Awaitable[BuiltSet]]
    sample_applies_to: str  # "items" (bench subsample) or "base" (the items the set is built from)
    protocol_notes: tuple[str, ...] = ()
    explain_missing: Callable[[Row, Metric, BuiltSet], str | None] | None = None

    @property
    def paper(self) -> PaperResults:
        return load_paper_results(self.name)

    def row(self, row_id: str) -> Row:
        for r in self.rows:
            if r.id == row_id:
                return r
        raise ReproduceError(f"{self.name} has no row {row_id!r}; rows: {', '.join(r.id for r in self.rows)}")

    def runnable_rows(self) -> list[Row]:
        return [r for r in self.rows if r.method is not None]


def is_embedded(config: Config) -> bool:
    model = config.model
    return (
        (model is None and not config.base_url) or model == "embedded" or bool(model and model.startswith("embedded:"))
    )


def select_rows(protocol: Protocol, methods: Sequence[str] | None, embedded: bool) -> tuple[list[Row], str]:
    """The rows to run, and how they were chosen (printed and recorded)."""
    runnable = protocol.runnable_rows()
    if methods:
        wanted = [m.strip() for item in methods for m in item.split(",") if m.strip()]
        if wanted == ["all"]:
            return runnable, "all rows (--methods all)"
        chosen = []
        for name in wanted:
            matches = [r for r in runnable if r.id == name] or [r for r in runnable if r.method == name]
            if not matches:
                known = ", ".join(r.id for r in runnable)
                raise ReproduceError(f"{protocol.name} has no row or method {name!r}; rows: {known}")
            chosen += [r for r in matches if r not in chosen]
        return chosen, f"rows chosen with --methods: {', '.join(r.id for r in chosen)}"
    if embedded:
        chosen = [protocol.row(r) for r in protocol.embedded_rows]
        return chosen, (
            f"embedded model: only the cheap rows {', '.join(r.id for r in chosen)} run by default "
            "(--methods all runs every row)"
        )
    return runnable, "all rows"
