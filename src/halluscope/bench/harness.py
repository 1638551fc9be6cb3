"""Several systems on the same items: ``halluscope bench --methods rouge,gate,geval,... [--peers ragas,deepeval]``.

Each method is an ordinary bench run (:func:`halluscope.bench.runner.run_bench`) in a sub-folder of its own named
after the system (``<out>/<system>/``: ``items.jsonl``, ``run.json``, ``results.json``, ...), all with the same
item selection (``--sample``, ``--seed``, ``--limit``), so every method sees the same items and each one resumes
on its own: a second run of the same command scores only what is missing. A peer (another library's faithfulness
metric, :mod:`halluscope.bench.peers`) gets a sub-folder too, its Reports in the same ``items.jsonl`` format.

Then the folder's table: every system's Report on every item becomes a :class:`~halluscope.bench.quality_table.Row`
with the item's gold beside it (``rows.jsonl``, rewritten from the sub-folders each time; ``run.json`` names the
dataset and the model), and ``quality.md`` / ``quality.json`` hold the quality-and-cost table over the items every
system has a Report for (:func:`halluscope.bench.quality_table.dataset_markdown`). FINAL matching uses the matches
the bench's ``final_matching`` suite stored with the named judge (``final_matches.jsonl`` in each sub-folder)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluscope.bench.builtin_suites.final_matching import FINAL_MATCHES_FILE, _load_matches
from halluscope.bench.datasets import Dataset
from halluscope.bench.engines import Engine
from halluscope.bench.folder import ITEMS_FILE, ItemStore, folder_identity_clash
from halluscope.bench.peers import Peer
from halluscope.bench.quality_table import ROWS_FILE, RUN_FILE, Row, dataset_markdown, split_score_kinds, summarize
from halluscope.bench.runner import BenchError, run_bench, select_examples
from halluscope.methods.base import Method
from halluscope.records import Example

QUALITY_MD = "quality.md"
QUALITY_JSON = "quality.json"


@dataclass
class MethodSpec:
    """One entry of ``--methods``: a method name and its options, e.g. ``dcr+batch_size=4+gate=lexical``."""

    name: str
    options: dict[str, str]

    @property
    def label(self) -> str:
        """The system's name in the table: ``dcr batch_size=4``."""
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.options.items())])

    @property
    def folder(self) -> str:
        return folder_name(self.label)


def folder_name(label: str) -> str:
    """A system's sub-folder: its label with anything but letters, digits, ``._=`` made ``+``."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "+", label).strip("+")


def parse_methods(text: str) -> list[MethodSpec]:
    """``--methods``: comma-separated method names, each optionally with ``+key=value`` options of its own
    (``rouge,geval,dcr+batch_size=4``); ``none``: no method (the peers alone). The same system twice is refused."""
    specs: list[MethodSpec] = []
    if text.strip() == "none":
        return specs
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, *pairs = entry.split("+")
        options: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"--methods: {entry!r}: options follow the method as +key=value, got {pair!r}")
            options[key.strip()] = value.strip()
        spec = MethodSpec(name.strip(), options)
        if any(s.label == spec.label for s in specs):
            raise ValueError(f"--methods names {spec.label!r} twice")
        specs.append(spec)
    if not specs:
        raise ValueError("--methods names no method")
    return specs


async def run_systems(
    methods: list[tuple[str, Method]],
    dataset: Dataset,
    out_dir: Path,
    *,
    peers: Sequence[Peer] = (),
    skipped: dict[str, str] | None = None,
    judge: Any = None,
    model: str | None = None,
    endpoint: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    n_bootstrap: int = 1000,
    retry_unscored: bool = False,
    concurrency: int | None = None,
    progress: bool = True,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Run (or resume) every ``(label, method)`` and every peer on the same items of ``dataset``, each in
    ``out_dir/<label>/``, then write the folder's table; returns ``quality.json``'s content (``meta``,
    ``summary``: one entry per system, and ``results``: each method's ``results.json`` by label)."""
    examples = select_examples(dataset, sample=sample, seed=seed, limit=limit)
    if not examples:
        raise BenchError(f"dataset {dataset.spec} has no items to run (after --sample/--limit)")
    labels = [label for label, _ in methods] + [peer.name for peer in peers]
    if len(set(labels)) != len(labels):
        raise BenchError(f"two systems share a name: {labels}")
    out_dir = Path(out_dir)
    # what the items are: the dataset and the selection (each method's own run.json pins its options and model,
    # so a method can be added to the folder later and a different model for a method already there is refused)
    identity = {"dataset": dataset.spec, "sample_per_stratum": sample, "sample_seed": seed if sample else None}
    clash = folder_identity_clash(out_dir / RUN_FILE, identity)
    if clash:
        raise BenchError(f"{out_dir} holds a run with other settings ({clash}): use another --output")
    # the model (of the LLM systems) that names the folder's rows in the table of several folders
    (out_dir / RUN_FILE).write_text(json.dumps({**identity, "model": model}, indent=2) + "\n", encoding="utf-8")
    results: dict[str, Any] = {}
    for label, method in methods:
        results[label] = await run_bench(
            method,
            dataset,
            out_dir / folder_name(label),
            judge=judge,
            sample=sample,
            seed=seed,
            limit=limit,
            n_bootstrap=n_bootstrap,
            retry_unscored=retry_unscored,
            concurrency=concurrency,
            progress=progress,
            engine=engine,
        )
    for peer in peers:
        await run_peer(peer, examples, out_dir / folder_name(peer.name), retry_unscored=retry_unscored)
    rows = collect_rows(labels, examples, out_dir, dataset.spec, getattr(judge, "name", None))
    complete = [e.id for e in examples if all(any(r.system == s and r.item == e.id for r in rows) for s in labels)]
    rows, systems = split_score_kinds(rows, labels)
    table_rows = [r for r in rows if r.item in set(complete)]
    (out_dir / ROWS_FILE).write_text("".join(r.as_json() + "\n" for r in rows), encoding="utf-8")
    meta = {
        "dataset": dataset.spec,
        "model": model,
        "endpoint": endpoint,
        "items_run": len(complete),
        "items_asked": len(examples),
        "judge": getattr(judge, "name", None),
        "skipped": dict(skipped or {}),
    }
    quality: dict[str, Any] = {
        "meta": meta,
        "summary": summarize(table_rows, systems, n_bootstrap, seed),
        "results": results,
    }
    (out_dir / QUALITY_JSON).write_text(
        json.dumps({k: v for k, v in quality.items() if k != "results"}, indent=2, default=str) + "\n", encoding="utf-8"
    )
    (out_dir / QUALITY_MD).write_text(dataset_markdown(quality["summary"], meta), encoding="utf-8")
    return quality


async def run_peer(peer: Peer, examples: list[Example], folder: Path, *, retry_unscored: bool = False) -> None:
    """A peer on every example it has no Report for yet, one at a time, each Report appended as it arrives."""
    store = ItemStore(folder / ITEMS_FILE)
    done = store.load()
    pending = [e for e in examples if e.id not in done or (retry_unscored and done[e.id].score is None)]
    if not pending:
        return
    with store.open() as fh:
        for example in pending:
            # the peers run their own event loops (asyncio.run): each item in a worker thread of its own
            report = await asyncio.to_thread(peer.score, example.source, example.target)
            ItemStore.write(fh, example.id, report)


def collect_rows(
    labels: list[str], examples: list[Example], out_dir: Path, dataset: str, judge: str | None
) -> list[Row]:
    """Every system's Report on each example (in example order) as a Row, with its FINAL matching when the bench
    stored one for that Report's descriptions."""
    rows: list[Row] = []
    for label in labels:
        folder = out_dir / folder_name(label)
        done = ItemStore(folder / ITEMS_FILE).load()
        matches = _load_matches(folder / FINAL_MATCHES_FILE)
        for example in examples:
            report = done.get(example.id)
            if report is None:
                continue
            row = Row.from_report(label, example, report, dataset)
            found = matches.get(example.id)
            if (
                found is not None
                and row.scored
                and example.descriptions is not None
                and found.n_pred == len(row.predicted_descriptions or [])
            ):
                row.match = {
                    "judge": judge,
                    "n_gold": found.n_gold,
                    "n_pred": found.n_pred,
                    "matched_gold": found.matched_gold,
                    "unscored_reason": found.unscored_reason,
                }
            rows.append(row)
    return rows
