"""``halluscope generate montage``: build MontageLie groups (truth + reordered lies) as harness JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, fail, model_options


def _read_items(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise fail(f"input file not found: {path}")
    items: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise fail(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(item, dict):
                raise fail(f"{path}:{lineno}: expected a JSON object per line")
            items.append(item)
    return items


def _pairs(
    items: list[dict[str, Any]], source_field: str, target_field: str, id_field: str, targets_per_item: int | None
) -> Iterator[tuple[str, Any, str, dict[str, Any]]]:
    """(group, source, target, origin meta) for every target; a list-valued target gives one group each."""
    for n, item in enumerate(items):
        if source_field not in item or target_field not in item:
            raise fail(
                f"item {n} lacks the field {source_field!r} or {target_field!r} (see --source-field/--target-field)"
            )
        item_id = str(item.get(id_field, n))
        source, targets = item[source_field], item[target_field]
        if isinstance(targets, str):
            yield item_id, source, targets, {"source_id": item_id}
            continue
        if not isinstance(targets, list):
            raise fail(f"item {item_id}: {target_field!r} must be a string or a list of strings")
        for k, target in enumerate(targets[:targets_per_item]):
            if isinstance(target, str) and target.strip():
                yield f"{item_id}#{k}", source, target, {"source_id": item_id, "target_index": k}


@model_options()
def montage_command(
    input: Annotated[Path, typer.Argument(help="JSONL with a source and a correct target per line.")],
    output: Annotated[Path, typer.Option("--output", "-O", help="Where to write the Example JSONL.")],
    level: Annotated[
        str,
        typer.Option(
            help=(
                "'event' (the paper's: LLM decomposition into chronological events, incremental lies) or 'sentence' "
                "(reorder the original sentences, no LLM; not the paper's construction, labelled in each row's meta)."
            )
        ),
    ] = "event",
    difficulty: Annotated[
        list[str] | None,
        typer.Option(
            "--difficulty", help="Difficulty to generate (repeatable): easy, medium, hard, extreme. Default: all four."
        ),
    ] = None,
    old_difficulty: Annotated[
        list[str] | None,
        typer.Option("-d", hidden=True, help="Old short spelling of --difficulty (-d is --dataset elsewhere)."),
    ] = None,
    paraphrase: Annotated[
        bool, typer.Option(help="Also paraphrase truth and lies with a different narrative technique (LLM).")
    ] = False,
    seed: Annotated[int, typer.Option(help="Random seed (each group draws from its own seeded generator).")] = 0,
    max_events: Annotated[
        int | None,
        typer.Option(
            min=1, help="Keep only the first N events (sentences) of each target; the truth is cut the same way."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Use only the first N input lines.")] = None,
    targets_per_item: Annotated[
        int | None, typer.Option(min=1, help="When the target field is a list, use at most this many per line.")
    ] = None,
    source_field: Annotated[str, typer.Option(help="Field holding the source text.")] = "source",
    target_field: Annotated[
        str,
        typer.Option(
            help="Field holding the correct target (a string or a list of strings, e.g. SQuALITY's plot_summaries)."
        ),
    ] = "target",
    id_field: Annotated[str, typer.Option(help="Field holding the item id.")] = "id",
    split: Annotated[str | None, typer.Option(help="Value for the examples' split field.")] = None,
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Build montage-lie groups: per target, the truth (label 1) and lies whose event order is shuffled to an
    exact ShuffleD per difficulty (label 0), sharing a group id. The default is the paper's event-level
    construction (needs a model: --model / --base-url, else the embedded one); --level sentence needs none."""
    if old_difficulty:
        difficulty = (difficulty or []) + old_difficulty
    import asyncio

    from rich.progress import track

    from halluscope.generators.montage import DIFFICULTIES, MontageGenerator
    from halluscope.llm import LLMError

    items = _read_items(input)[:limit]
    pairs = list(_pairs(items, source_field, target_field, id_field, targets_per_item))
    if not pairs:
        raise fail("no (source, target) pairs in the input")
    try:
        generator = MontageGenerator(
            config=flags.config(),
            level=level,  # type: ignore[arg-type]
            difficulties=difficulty or DIFFICULTIES,
            paraphrase=paraphrase,
            seed=seed,
            max_events=max_events,
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    output.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    skipped: list[dict[str, str]] = []
    with output.open("w", encoding="utf-8") as out:
        for group, source, target, meta in track(pairs, description="montage", transient=True):
            try:
                result = asyncio.run(generator.generate(source, target, group, split=split, meta=meta))
            except LLMError as exc:
                raise fail(f"group {group}: {exc}") from exc
            for ex in result.examples:
                out.write(ex.model_dump_json() + "\n")
            written += len(result.examples)
            skipped += result.skipped
    typer.echo(f"wrote {written} examples from {len(pairs)} targets to {output}")
    if generator.level == "sentence":
        typer.echo(
            "note: sentence-level lies are not the paper's construction (reordered original sentences; "
            "ROUGE tells them from the truth more easily, see docs/dove.md); meta['construction'] says so"
        )
    if skipped:
        typer.echo(f"skipped {len(skipped)} lies:")
        for s in skipped[:20]:
            typer.echo(f"  {s['group']} {s['difficulty']}: {s['reason']}")
        if len(skipped) > 20:
            typer.echo(f"  ... and {len(skipped) - 20} more")
