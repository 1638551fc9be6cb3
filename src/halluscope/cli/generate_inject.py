"""``halluscope generate inject``: weave invented facts into faithful targets, recording the gold spans."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, fail, finite_number, model_options


@model_options()
def inject_command(  # noqa: C901 - the inject command's flags, each validated where it is read
    dataset: Annotated[
        str,
        typer.Argument(
            help=(
                "Faithful targets: a dataset spec (e.g. 'squality:dev', "
                "'summedits:news') or a harness-format .jsonl file."
            )
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-O", help="Where to write the Example JSONL.")],
    complexity: Annotated[
        list[int] | None,
        typer.Option(
            "--complexity",
            "-c",
            help="Complexity level 1-3 (repeatable; level c injects c facts). Default: 1, 2 and 3.",
        ),
    ] = None,
    weave: Annotated[
        str,
        typer.Option(
            help=(
                "'llm' (the model edits the text, insertions tagged and verified) or "
                "'boundary' (no LLM: facts inserted as sentences at sentence boundaries)."
            )
        ),
    ] = "llm",
    fact: Annotated[
        list[str] | None,
        typer.Option(
            "--fact",
            help=(
                "Use these facts instead of inventing them with the LLM "
                "(repeatable; the same facts go into every item)."
            ),
        ),
    ] = None,
    facts_from: Annotated[
        str,
        typer.Option(
            help=(
                "Where facts come from when no --fact is given: 'llm' (invented) or 'donor' (no LLM: "
                "sentences from targets of other sources in the same dataset, closest topic first)."
            )
        ),
    ] = "llm",
    split: Annotated[
        str | None, typer.Option(help="Keep only input items of this split (e.g. 'evaluation' for SummEdits dev).")
    ] = None,
    sample: Annotated[
        int | None,
        typer.Option(min=1, help="Draw this many input items at random (seeded) instead of taking them in order."),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Use at most this many input items.")] = None,
    max_sentences: Annotated[
        int | None,
        typer.Option(min=1, help="Cut each input target to its first N sentences before injecting (long summaries)."),
    ] = None,
    include_inconsistent: Annotated[
        bool,
        typer.Option(
            help="Also inject into items labelled inconsistent (by default only label 1 / unlabelled items are used)."
        ),
    ] = False,
    truth: Annotated[
        bool,
        typer.Option(help="Also write each original target as a consistent example (label 1, difficulty 'truth')."),
    ] = True,
    seed: Annotated[int, typer.Option(help="Random seed (sampling and boundary placement).")] = 0,
    gold_evidence: Annotated[
        bool,
        typer.Option(
            "--gold-evidence",
            help=(
                "Also build gold truthful claims and their gold source evidence by multi-judge consensus "
                "(PROBE's decomposer, evidence finder and judges; PROBE paper §3.3), so the PROBE suite can "
                "score decomposition, evidence finding and evidence evaluation. Costs LLM calls per claim."
            ),
        ),
    ] = False,
    gold_judge: Annotated[
        list[str] | None,
        typer.Option(
            "--gold-judge",
            help=(
                "A judge model for --gold-evidence, at the same endpoint (repeatable; each finds evidence "
                "once and votes on every candidate; the paper uses 4). Default: the main model."
            ),
        ),
    ] = None,
    gold_samples: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=(
                "Votes per judge for --gold-evidence (votes after the first are "
                "sampled). Default: 1 with several judges, 3 with one."
            ),
        ),
    ] = None,
    gold_consensus: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            callback=finite_number,
            help="Share of ALL votes that must say PASS for a passage to become gold evidence (paper: 3 of 4 = 0.75).",
        ),
    ] = 0.75,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Folder of the shared benchmark data (default: ../shared/data or HALLUSCOPE_DATA_DIR)."),
    ] = None,
    flags: ModelFlags = NO_FLAGS,
) -> None:
    """Invent plausible facts the source does not support and weave them into faithful targets at complexity
    1-3. Each written Example has label 0, the facts as descriptions, the inserted text as gold spans and each
    fact as a gold hallucinated claim (meta.gold_claims); --gold-evidence adds the truthful gold claims and
    their gold evidence."""
    import asyncio
    from collections import Counter

    from rich.progress import track

    from halluscope.bench.datasets import DatasetError, load_dataset
    from halluscope.generators.inject import COMPLEXITIES, GoldEvidenceBuilder, InjectionGenerator
    from halluscope.llm import LLMError, get_llm
    from halluscope.records import Example
    from halluscope.text import split_sentences

    levels = complexity or list(COMPLEXITIES)
    if not 0 < gold_consensus <= 1:
        raise fail("--gold-consensus must be in (0, 1]")
    if gold_samples is not None and gold_samples < 1:
        raise fail("--gold-samples must be at least 1")
    if (gold_judge or gold_samples is not None) and not gold_evidence:
        raise fail("--gold-judge / --gold-samples need --gold-evidence")
    if any(c not in COMPLEXITIES for c in levels):
        raise fail("--complexity must be 1, 2 or 3")
    if weave not in ("llm", "boundary"):
        raise fail("--weave must be 'llm' or 'boundary'")
    if facts_from not in ("llm", "donor"):
        raise fail("--facts-from must be 'llm' or 'donor'")
    if fact is not None and len(fact) < max(levels):
        raise fail(f"complexity {max(levels)} needs {max(levels)} --fact values, got {len(fact)}")
    try:
        items = load_dataset(dataset, data_dir).examples
    except (DatasetError, OSError) as exc:
        raise fail(str(exc)) from exc
    donors = list(items) if fact is None and facts_from == "donor" else None  # the whole dataset, before sampling
    if split is not None:
        items = [e for e in items if e.split == split]
    if not include_inconsistent:
        items = [e for e in items if e.label != 0]
    if sample is not None:
        items = random.Random(seed).sample(items, min(sample, len(items)))
    items = items[:limit]
    if max_sentences is not None:
        cut = []
        for e in items:
            sents = split_sentences(e.target)
            if len(sents) > max_sentences:
                e = e.model_copy(
                    update={
                        "target": e.target[: sents[max_sentences - 1].span.end],
                        "meta": {**e.meta, "target_cut_to_sentences": max_sentences},
                    }
                )
            cut.append(e)
        items = cut
    if not items:
        raise fail("no input items left after filtering (check --split / --include-inconsistent)")

    needs_llm = (fact is None and donors is None) or weave == "llm" or gold_evidence
    config = flags.config()
    llm = get_llm(config) if needs_llm else None
    builder = None
    if gold_evidence and llm is not None:
        judges = [get_llm(config.with_overrides(model=name)) for name in gold_judge or []]
        builder = GoldEvidenceBuilder(llm, judges=judges, samples=gold_samples, consensus=gold_consensus)
    generator = InjectionGenerator(
        llm,
        weave=weave,  # type: ignore[arg-type]
        seed=seed,
        include_truth=truth,
        gold_evidence=builder,
    )
    written: list[Example] = []
    dropped: Counter[str] = Counter()
    reasons: list[str] = []
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as out:  # streamed, so an interrupted run keeps what it made
        for example in track(items, description="inject", transient=True):
            try:
                examples, failures = asyncio.run(generator.generate(example, levels, fact, donors))
            except LLMError as exc:
                raise fail(f"item {example.id}: {exc}") from exc
            for ex in examples:
                out.write(ex.model_dump_json(exclude_none=True) + "\n")
            out.flush()
            written += examples
            for f in failures:
                dropped[f.drop_kind or "other"] += 1
                reasons.append(f"{example.id}: {f.dropped}")
    injected = sum(e.label == 0 for e in written)
    typer.echo(
        f"wrote {len(written)} examples ({injected} injected, {len(written) - injected} truths) "
        f"from {len(items)} items to {output}"
    )
    if builder is not None:
        firsts: dict[str | None, Example] = {}
        for e in written:  # the truthful gold is built once per item: count it on the item's first example
            firsts.setdefault(e.group, e)
        per_item = list(firsts.values())
        complete = [e for e in written if e.meta.get("gold_claims_complete")]
        kept = sum(not c.get("hallucinated") for e in per_item for c in e.meta.get("gold_claims", []))
        uncertain = sum(len(e.meta.get("gold_claims_uncertain", [])) for e in per_item)
        typer.echo(
            f"gold evidence ({builder.description['votes_per_passage']} votes per passage, "
            f"{builder.description['pass_votes_needed']} PASS needed): {len(complete)} of {len(written)} "
            f"examples have complete gold claims; over {len(per_item)} items, {kept} truthful claims kept "
            f"with consensus evidence, {uncertain} uncertain"
        )
        failed = sorted({e.meta["gold_claims_error"] for e in written if "gold_claims_error" in e.meta})
        for reason in failed[:5]:
            typer.echo(f"  gold not built: {reason[:200]}")
    if dropped:
        typer.echo(
            f"dropped {sum(dropped.values())} of {len(items) * len(levels)} injections: "
            + ", ".join(f"{k}={v}" for k, v in dropped.most_common())
        )
        for r in reasons[:10]:
            typer.echo(f"  {r[:200]}")
