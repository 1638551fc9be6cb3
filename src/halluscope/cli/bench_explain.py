"""``halluscope bench-explain build|score|run``: the explanation benchmark (docs/benchmarks.md, "Explanations").

``build`` writes the seeded explanation set once (resumable) and its targets file; ``score`` scores reports of any
halluscope version (``check --input`` result rows, or whole reports) against the set; ``run`` checks the targets
with a method in-process (as ``check --input`` does, resumable) and scores the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, OptionOpt, fail, model_options, parse_options

SetOpt = Annotated[Path, typer.Option("--set", help="The explanation set (.jsonl).")]
OutputOpt = Annotated[
    Path, typer.Option("--output", "-O", help="Folder for explain.json and explain.md (and run's reports).")
]
BootstrapOpt = Annotated[int, typer.Option("--bootstrap", min=0, help="Bootstrap resamples for the CIs (0: none).")]


def build_command(
    explain_set: SetOpt = Path("explain_set.jsonl"),
    targets: Annotated[
        Path, typer.Option("--targets", help="The targets file for `halluscope check --input` (.jsonl).")
    ] = Path("explain_targets.jsonl"),
    items: Annotated[int, typer.Option("--items", min=1, help="Items in the set (a larger number extends it).")] = 30,
    seed: Annotated[int, typer.Option("--seed", help="The seed of a newly built set.")] = 7,
    max_source_chars: Annotated[
        int, typer.Option("--max-source-chars", min=100, help="Skip sources longer than this.")
    ] = 4000,
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help="The shared dev data folder (default: ../shared/data).")
    ] = None,
) -> None:
    """Build (or complete) the seeded explanation set from the consistent pairs of the shared dev data, one injected
    error per item with its gold, and write its targets file."""
    from halluscope.bench.datasets import DatasetError, resolve_data_dir
    from halluscope.bench.explain_set import ExplainSetConfig, build_explain_set, write_targets

    config = ExplainSetConfig(seed=seed, items=items, max_source_chars=max_source_chars)
    try:
        rows = build_explain_set(explain_set, config, resolve_data_dir(data_dir))
    except (DatasetError, ValueError) as exc:
        raise fail(str(exc)) from exc
    write_targets(targets, rows)
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row["generator"]] = kinds.get(row["generator"], 0) + 1
    typer.echo(json.dumps({"set": str(explain_set), "targets": str(targets), "items": len(rows), "generators": kinds}))


def _items(path: Path) -> list[dict[str, Any]]:
    from halluscope.bench.explain_set import read_explain_set

    if not path.is_file():
        raise fail(f"{path} not found: build it first with `halluscope bench-explain build --set {path}`")
    try:
        return read_explain_set(path)[1]
    except ValueError as exc:
        raise fail(str(exc)) from exc


def _score_and_write(items: list[dict[str, Any]], runs: list[tuple[str, Path]], output: Path, bootstrap: int) -> None:
    from halluscope.bench.explain_score import markdown_table, read_reports, score_reports

    results = []
    for label, path in runs:
        try:
            rows = read_reports(path)
        except (OSError, ValueError) as exc:
            raise fail(f"{path}: {exc}") from exc
        summary, outcomes = score_reports(items, rows, n_bootstrap=bootstrap)
        label = label or summary.get("method") or path.stem
        results.append({"label": label, "reports": str(path), **summary, "per_item": outcomes})
    output.mkdir(parents=True, exist_ok=True)
    table = markdown_table([(r["label"], r) for r in results])
    (output / "explain.json").write_text(json.dumps({"runs": results}, indent=2), encoding="utf-8")
    (output / "explain.md").write_text(table, encoding="utf-8")
    typer.echo(table, nl=False)


def score_command(
    reports: Annotated[
        list[str],
        typer.Option(
            "--reports",
            help="A reports file (.jsonl), LABEL=FILE to name its row; repeat for a before/after table.",
        ),
    ],
    explain_set: SetOpt = Path("explain_set.jsonl"),
    output: OutputOpt = Path("explain_results"),
    bootstrap: BootstrapOpt = 1000,
) -> None:
    """Score reports against the set: `check --input TARGETS --output FILE` result rows, or {"id", "report"} lines
    with whole reports, from any halluscope version (matched by id)."""
    items = _items(explain_set)
    runs: list[tuple[str, Path]] = []
    for given in reports:
        label, sep, named = given.partition("=")
        runs.append((label, Path(named)) if sep and not Path(given).exists() else ("", Path(given)))
    for _, found in runs:
        if not found.is_file():
            raise fail(f"reports file not found: {found}")
    _score_and_write(items, runs, output, bootstrap)


@model_options()
def run_command(
    explain_set: SetOpt = Path("explain_set.jsonl"),
    output: OutputOpt = Path("explain_results"),
    method: Annotated[str | None, typer.Option("--method", help="Method (default: check's default).")] = None,
    option: OptionOpt = None,
    bootstrap: BootstrapOpt = 1000,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Check the set's targets with a method in-process (resumable, as `check --input` does: the reports go to
    OUTPUT/reports.jsonl) and score them."""
    from halluscope.bench.explain_set import write_targets
    from halluscope.methods.named import build_method
    from halluscope.sync import run_sync
    from halluscope.tabular import TableError, check_file

    items = _items(explain_set)
    config = flags.config()
    try:
        chosen = build_method(method, config=config, options=parse_options(option))
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(str(exc).strip("'\"")) from exc
    output.mkdir(parents=True, exist_ok=True)
    targets, reports = output / "targets.jsonl", output / "reports.jsonl"
    write_targets(targets, items)
    try:
        run_sync(check_file(chosen, targets, reports, progress=not no_progress))
    except TableError as exc:
        raise fail(str(exc)) from exc
    _score_and_write(items, [("", reports)], output, bootstrap)
