"""``halluscope generate perturb``: meaning-preserving perturbations of consistent targets (stress tests)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from halluscope.cli.common import NO_FLAGS, OLD_OUT_HELP, ModelFlags, either, fail, model_options

if TYPE_CHECKING:
    from halluscope.generators.perturb import PerturbGenerator
    from halluscope.records import Example, Usage


@model_options()
def perturb_command(
    input: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            "-d",
            help="Dataset name (e.g. squality:dev) or an Example .jsonl file. Required.",
            show_default=False,
        ),
    ] = None,
    old_input: Annotated[
        str | None, typer.Option("--input", "-i", hidden=True, help="Old spelling of --dataset.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--output", "-O", help="Output Example JSONL (originals + perturbations). Required.", show_default=False
        ),
    ] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help=OLD_OUT_HELP)] = None,
    perturbation: Annotated[
        list[str] | None,
        typer.Option(
            "--perturbation", "-p", help="Perturbation to produce (repeatable or comma-separated; default all seven)."
        ),
    ] = None,
    unit: Annotated[
        str, typer.Option(help="Rewrite the whole target ('target', as the paper) or each sentence ('sentence').")
    ] = "target",
    insert_with: Annotated[
        str,
        typer.Option(
            help=(
                "added_source_sentence: auto | tfidf | retrieval | llm (auto "
                "= retrieval stage if present, else tfidf; no LLM)."
            )
        ),
    ] = "auto",
    limit: Annotated[int | None, typer.Option(min=1, help="Use only the first N originals (after --sample).")] = None,
    sample: Annotated[
        int | None, typer.Option(min=1, help="Seeded random subsample of N originals (input order kept).")
    ] = None,
    max_words: Annotated[
        int | None, typer.Option(min=1, help="Only originals whose target has at most this many words.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling and sentence insertion.")] = 0,
    require_tags: Annotated[
        bool,
        typer.Option(
            "--require-tags", help="Reject replies without <rewritten> tags (default: take an untagged reply whole)."
        ),
    ] = False,
    skipped: Annotated[
        Path | None,
        typer.Option(
            help="Where to log skipped perturbations with reasons and raw replies (default: OUT with .skipped.jsonl)."
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Shared data folder.", envvar="HALLUSCOPE_DATA_DIR")
    ] = None,
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Write each original plus its meaning-preserving perturbations as harness Example JSONL."""
    input = either("--dataset", input, "--input", old_input)
    if input is None:
        raise fail("--dataset is required (a dataset name or an Example .jsonl)")
    out = either("--output", out, "--out", old_out)
    if out is None:
        raise fail("--output is required (the Example JSONL to write)")
    from halluscope.bench.datasets import DatasetError, load_dataset
    from halluscope.generators.perturb import PERTURBATIONS, PerturbGenerator, word_count

    names = [p.strip() for item in (perturbation or []) for p in item.split(",") if p.strip()] or list(PERTURBATIONS)
    try:
        originals = load_dataset(input, data_dir).examples
    except DatasetError as exc:
        raise fail(str(exc)) from exc
    if max_words is not None:
        originals = [e for e in originals if word_count(e.target) <= max_words]
    if sample is not None:
        if sample < 1:
            raise fail("--sample must be >= 1")
        keep = set(random.Random(seed).sample(range(len(originals)), min(sample, len(originals))))
        originals = [e for i, e in enumerate(originals) if i in keep]
    if limit is not None:
        originals = originals[: max(0, limit)]
    if not originals:
        raise fail("no originals to perturb (check --dataset, --max-words, --sample, --limit)")

    config = flags.config()
    try:
        generator = PerturbGenerator(
            config=config,
            perturbations=names,
            unit=unit,  # type: ignore[arg-type]
            insert_with=insert_with,  # type: ignore[arg-type]
            seed=seed,
            require_tags=require_tags,
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    skipped = skipped or out.with_suffix(".skipped.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary = asyncio.run(_generate(generator, originals, out, skipped))
    elapsed = time.perf_counter() - started

    kept, skip_reasons, usage = summary
    typer.echo(
        f"{len(originals)} originals -> {out} ({sum(kept.values())} perturbations kept, "
        f"{sum(skip_reasons.values())} skipped -> {skipped}) in {elapsed:.1f}s"
    )
    for name in generator.perturbations:
        typer.echo(f"  {name:22s} kept {kept.get(name, 0)}")
    for (name, reason), n in skip_reasons.most_common(12):
        typer.echo(f"  skipped {name}: {n} x {reason[:100]}")
    model_name = generator.llm.name if generator.needs_llm else "none"
    typer.echo(
        f"model {model_name}: {usage.calls} LLM calls, {usage.prompt_tokens}+{usage.completion_tokens} "
        f"tokens, {usage.cache_hits} cache hits"
    )


async def _generate(
    generator: PerturbGenerator, originals: Sequence[Example], out: Path, skipped_path: Path
) -> tuple[Counter[str | None], Counter[tuple[str, str]], Usage]:
    from rich.progress import Progress

    from halluscope.records import Usage

    order = {e.id: i for i, e in enumerate(originals)}
    ready: dict[int, list[Example]] = {}
    next_to_write = 0
    kept: Counter[str | None] = Counter()
    skip_reasons: Counter[tuple[str, str]] = Counter()
    usage = Usage()
    # Groups are written in input order as soon as every earlier group is done, so the file is
    # deterministic and still grows during a long run.
    with (
        out.open("w", encoding="utf-8") as fh,
        skipped_path.open("w", encoding="utf-8") as skip_fh,
        Progress(transient=True) as progress,
    ):
        task = progress.add_task("perturbing", total=len(originals))
        async for group in generator.run(originals):
            usage = usage + group.usage
            for row in group.rows[1:]:
                kept[row.difficulty] += 1
            for skip in group.skips:
                skip_reasons[(skip.perturbation, _reason_kind(skip.reason))] += 1
                skip_fh.write(skip.model_dump_json() + "\n")
            skip_fh.flush()
            ready[order[group.original.id]] = group.rows
            while next_to_write in ready:
                for row in ready.pop(next_to_write):
                    fh.write(row.model_dump_json(exclude_none=True) + "\n")
                fh.flush()
                next_to_write += 1
            progress.advance(task)
    return kept, skip_reasons, usage


def _reason_kind(reason: str) -> str:
    """Reasons without their item-specific tail, for the summary counts."""
    return reason.split(": ", 2)[1] if reason.startswith("unparseable reply") and ": " in reason else reason[:80]
