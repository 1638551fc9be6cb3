"""``halluscope reproduce PAPER``: a seed paper's main evaluation protocol, the paper's numbers beside ours."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, cast

import typer

from halluscope.cli.common import (
    NO_FLAGS,
    OLD_OUT_HELP,
    BootstrapOpt,
    JudgeApiKeyOpt,
    JudgeBaseUrlOpt,
    JudgeModelOpt,
    ModelFlags,
    either,
    fail,
    model_options,
    parse_options,
)

if TYPE_CHECKING:
    from halluscope.bench.reproduce.core import Protocol


def _default_out(paper: str, model: str | None, sample: int | None, seed: int, limit: int | None) -> Path:
    import re

    parts = ["reproduce", paper, model or "embedded"]
    if sample:
        parts.append(f"sample{sample}-seed{seed}")
    if limit is not None:
        parts.append(f"limit{limit}")
    return Path("runs") / "-".join(re.sub(r"[^A-Za-z0-9._+]+", "-", p).strip("-") for p in parts)


def _list_rows(protocol: Protocol, embedded: bool) -> None:
    typer.echo(f"{protocol.name}: {protocol.description}\n")
    defaults = set(protocol.embedded_rows) if embedded else {r.id for r in protocol.runnable_rows()}
    for row in protocol.rows:
        if row.method is None:
            typer.echo(f"  {row.id:22s} {row.paper_row}  [paper only: {row.reason}]")
            continue
        mark = "*" if row.id in defaults else " "
        opts = " ".join(f"{k}={v}" for k, v in row.options.items())
        label = f"(paper's nearest analogue: {row.paper_row})" if row.analogue else row.paper_row
        typer.echo(f"{mark} {row.id:22s} {label}  [{row.method} {opts}]".rstrip())
    typer.echo(
        f"\n* = run by default{' on the embedded model' if embedded else ''}; "
        "choose with --methods ID[,ID...] or --methods all"
    )


@model_options()
def reproduce_command(  # noqa: C901 - the reproduce command's flags, each validated where it is read
    paper: Annotated[str, typer.Argument(help="dove, dcr, final, longdoc or probe.")],
    methods: Annotated[
        list[str] | None,
        typer.Option(
            "--methods",
            help=(
                "Rows to run: row ids or method names, comma-separated or repeated, or 'all' (see "
                "--list). Default: every row, or a cheap subset on the embedded model."
            ),
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            "-d",
            help=(
                "Base data instead of the protocol's default (a dataset spec "
                "or a .jsonl; an already built set is used as it is)."
            ),
        ),
    ] = None,
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample",
            min=1,
            help=(
                "Seeded subsample: N items per split/domain (final, dcr), or N "
                "base items to build the set from (dove, longdoc, probe)."
            ),
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="Only the first N items (after --sample); raising it later resumes."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --sample, the builders and the bootstrap.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option("--output", "-O", help="Output folder (default runs/reproduce-<paper>-<model>[-sample..])."),
    ] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help=OLD_OUT_HELP)] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Shared data folder (default ../shared/data).", envvar="HALLUSCOPE_DATA_DIR"),
    ] = None,
    builder: Annotated[
        str,
        typer.Option(
            "--builder",
            help=(
                "How generated sets are built: llm (the paper's way), no-llm (halluscope's model-free variant), auto "
                "(no-llm on the embedded model, else llm)."
            ),
        ),
    ] = "auto",
    build_option: Annotated[
        list[str] | None,
        typer.Option(
            "--build",
            "-b",
            help=(
                "Builder option KEY=VALUE (repeatable): montage level/max_events/difficulties, inject "
                "facts_from/weave/complexities/max_sentences, perturb perturbations/unit/insert_with/max_sentences."
            ),
        ),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            help=(
                "Method option KEY=VALUE for every row whose method has it (a row's own options win), e.g. -o top_k=1."
            ),
        ),
    ] = None,
    flags: ModelFlags = NO_FLAGS,
    judge_model: JudgeModelOpt = None,
    judge_base_url: JudgeBaseUrlOpt = None,
    judge_api_key: JudgeApiKeyOpt = None,
    gold_model: Annotated[
        list[str] | None,
        typer.Option(
            "--gold-model",
            help=(
                "probe: the model(s) that build Table 2's gold truthful claims and evidence "
                "(comma-separated or repeated; the first decomposes, each finds evidence and votes; "
                "same endpoint as --base-url). As in the PROBE paper, the scored model may be one of the voters "
                "(--build gold_voters=others keeps it out). Without it no gold is built; --build "
                "gold_evidence=self builds it with the scored model alone (rows labelled 'self-built gold')."
            ),
        ),
    ] = None,
    select_holdout: Annotated[
        float | None,
        typer.Option(
            "--select-holdout",
            help=(
                "final: hold out this share of the items (seeded, e.g. 0.3) for the prompt-variant choice and "
                "score only the rest (default: the choice is made on the scored items, in-sample)."
            ),
        ),
    ] = None,
    select_on: Annotated[
        str | None,
        typer.Option(
            "--select-on",
            help="final: a dataset spec or .jsonl the prompt variant is chosen on instead of the scored items.",
        ),
    ] = None,
    paper_model: Annotated[
        str | None,
        typer.Option(
            "--paper-model",
            help=(
                "Show the paper's numbers for this model where a row has "
                "several (default: the paper's reference model)."
            ),
        ),
    ] = None,
    bootstrap: BootstrapOpt = 1000,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="Hide progress bars.")] = False,
    list_rows: Annotated[bool, typer.Option("--list", help="List the protocol's rows and exit.")] = False,
) -> None:
    """Run PAPER's main evaluation protocol with the configured model and write reproduce.json and reproduce.md:
    the paper's table layout, its published numbers (model, table) beside ours (95% CI, n, unscored, cost).
    Resumable: a re-run reuses the built data and every finished item. Rows that cannot be computed say why.

    Which of our values is the headline, and why: "ours, all items" is the minimum over every outcome the items
    the method could not score might have had (a miss, the wrong side of every threshold, the exact lowest
    correlation over their scores, per document where the correlation is per document; "bound" where only a
    value provably no higher could be computed). Beside it: the value over the scored items and the coverage.
    So a method cannot look better by leaving the hard items unscored. Rows take their options from the paper
    plan and -o only: the config file's [options.METHOD] and threshold are not used, and every option a row used
    is printed in it."""
    out = either("--output", out, "--out", old_out)
    import asyncio

    from halluscope.bench.reproduce import (
        ReproduceContext,
        ReproduceError,
        get_protocol,
        render_terminal,
        run_reproduce,
    )
    from halluscope.bench.reproduce.builders import BuildError
    from halluscope.bench.reproduce.core import is_embedded
    from halluscope.llm import LLMError, get_llm

    try:
        protocol = get_protocol(paper)
    except ReproduceError as exc:
        raise fail(str(exc)) from exc
    config, concurrency = flags.config(), flags.concurrency
    embedded = is_embedded(config)
    if list_rows:
        _list_rows(protocol, embedded)
        return
    if sample is not None and sample < 1:
        raise fail("--sample must be >= 1")
    if builder not in ("auto", "llm", "no-llm"):
        raise fail(f"--builder must be auto, llm or no-llm, got {builder!r}")
    mode = cast(Literal["llm", "no-llm"], ("no-llm" if embedded else "llm") if builder == "auto" else builder)
    judge = None
    if judge_model is not None and judge_model.strip().lower() == "none":
        raise fail("--judge-model none skips the matching in bench; reproduce needs its judge: name a model")
    if judge_model or judge_base_url or judge_api_key:
        try:
            judge = get_llm(config.with_overrides(model=judge_model, base_url=judge_base_url, api_key=judge_api_key))
        except (ValueError, LLMError) as exc:
            raise fail(f"judge model: {exc}") from exc
    gold_llms = []
    for name in [g.strip() for item in gold_model or [] for g in item.split(",") if g.strip()]:
        if paper != "probe":
            raise fail("--gold-model applies to reproduce probe only")
        try:
            gold_llms.append(get_llm(config.with_overrides(model=name)))
        except (ValueError, LLMError) as exc:
            raise fail(f"gold model {name}: {exc}") from exc
    selection = None
    if select_on:
        from halluscope.bench.datasets import DatasetError, load_dataset

        try:
            selection = load_dataset(select_on, data_dir)
        except DatasetError as exc:
            raise fail(f"--select-on: {exc}") from exc
    if select_holdout is not None and not 0 < select_holdout < 1:
        raise fail("--select-holdout must be between 0 and 1")
    folder = out or _default_out(paper, config.model or ("embedded" if embedded else None), sample, seed, limit)
    ctx = ReproduceContext(
        out_dir=folder,
        config=config,
        data_dir=data_dir,
        dataset=dataset,
        sample=sample,
        seed=seed,
        limit=limit,
        builder=mode,
        build_options=parse_options(build_option),
        progress=not no_progress,
        select_holdout=select_holdout,
        select_on=selection,
        gold_llms=gold_llms,
    )
    if builder == "auto" and mode == "no-llm" and protocol.sample_applies_to == "base":
        typer.secho(
            "note: embedded model: the evaluation set is built without an LLM (--builder llm for the paper's way)",
            err=True,
        )
    try:
        result = asyncio.run(
            run_reproduce(
                protocol,
                ctx,
                methods=methods,
                options=parse_options(option),
                judge=judge,
                paper_model=paper_model,
                n_bootstrap=bootstrap,
                concurrency=concurrency,
                echo=lambda text: typer.secho(text, err=True),
            )
        )
    except (ReproduceError, BuildError, ValueError, LLMError) as exc:
        raise fail(str(exc)) from exc
    typer.echo(render_terminal(result))
    typer.echo(f"\nwrote {folder}/reproduce.json and reproduce.md ({result['wall_time_s']} s)")
