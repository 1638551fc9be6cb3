"""``halluscope fit-combiner``: fit one score from several methods' scores on labelled pairs, cross-validated."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, OptionOpt, check_output_file, fail, model_options, parse_options


@model_options()
def fit_combiner_command(
    output: Annotated[Path, typer.Option("--output", "-O", help="The combiner file to write (JSON).")],
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--runs",
            "-r",
            help=(
                "A bench output folder (its items.jsonl and run.json) of one member; repeat "
                "per member. NAME=FOLDER names the member (two runs of one method)."
            ),
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help=(
                "Comma-separated methods to score now on --dataset (each a "
                "resumable bench run under --work-dir), e.g. rouge,gate,geval."
            ),
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            "-d",
            help=(
                "Where the labels come from (names as `halluscope bench`: summedits[:domain], "
                "qags, final, or a .jsonl); default: the dataset of the first --runs folder."
            ),
        ),
    ] = None,
    option: OptionOpt = None,
    flags: ModelFlags = NO_FLAGS,
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample", min=1, help="With --methods: the bench's seeded stratified subsample, N per (split, domain)."
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="With --methods: only the first N items (after --sample).")
    ] = None,
    work_dir: Annotated[
        Path, typer.Option("--work-dir", help="With --methods: where the members' bench runs go (resumable).")
    ] = Path("runs"),
    folds: Annotated[
        int,
        typer.Option(
            "--folds",
            min=2,
            max=50,
            help="k of the k-fold cross-validation (stratified for labels; whole Example.group in one fold).",
        ),
    ] = 5,
    l2: Annotated[
        float,
        typer.Option(
            "--l2",
            min=1e-6,
            max=1e6,
            help="L2 penalty on the standardised weights (logistic: C = 1/l2; ridge: alpha = l2).",
        ),
    ] = 1.0,
    features: Annotated[
        str,
        typer.Option(
            "--features",
            help=(
                "all: each member's score, sub-scores and an unscored "
                "indicator; score: the scores (and indicators) only."
            ),
        ),
    ] = "all",
    target: Annotated[
        str,
        typer.Option(
            "--target", help="auto (labels when every item has one, else human scores), label or human_score."
        ),
    ] = "auto",
    min_gain: Annotated[
        float,
        typer.Option(
            "--min-gain",
            min=0.0,
            max=1.0,
            help="Refuse unless the combiner's out-of-fold figure beats its best member's by more than this.",
        ),
    ] = 0.0,
    transfer_by: Annotated[
        str | None,
        typer.Option(
            "--transfer-by",
            help=(
                "Also fit leaving out each value of this Example.meta key (e.g. "
                "domain on SummEdits) and score the held-out items."
            ),
        ),
    ] = None,
    bootstrap: Annotated[
        int, typer.Option("--bootstrap", min=0, max=100_000, help="Bootstrap resamples for the 95% CIs.")
    ] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the folds, the bootstrap and --sample.")] = 0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write the file even when the combiner does not beat its best member (marked accepted=false).",
        ),
    ] = False,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Also write the tables as Markdown to this file.")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Shared data folder (default ../shared/data).", envvar="HALLUSCOPE_DATA_DIR"),
    ] = None,
) -> None:
    """Fit a combiner of several methods' scores (and sub-scores) on labelled pairs: a small L2-regularised model
    (logistic for labels, ridge for human scores), k-fold cross-validated beside each member on the same folds.
    Refused (exit 1, no file) when it does not beat its best member out of fold, unless --force.
    Use it with `halluscope check --method ensemble -o combiner=FILE`."""
    from halluscope.bench.combiner import (
        CombinerError,
        MemberRuns,
        cv_markdown,
        fit_combiner,
        load_member_run,
        weights_markdown,
        write_combiner,
    )
    from halluscope.bench.datasets import DatasetError, load_dataset

    if (runs is None) == (methods is None):
        raise fail("give the members either as --runs FOLDER (repeatable) or as --methods a,b,c with --dataset")
    if features not in ("all", "score"):
        raise fail(f"--features must be all or score, got {features!r}")
    if target not in ("auto", "label", "human_score"):
        raise fail(f"--target must be auto, label or human_score, got {target!r}")
    check_output_file(output, "--output")
    check_output_file(markdown, "--markdown")
    from halluscope._optional import MissingExtraError, require

    try:
        require("sklearn", "bench", "fitting a combiner")  # before any member is scored
        if runs is not None:
            members: list[MemberRuns] = []
            for item in runs:
                name, sep, folder = item.partition("=")
                members.append(
                    load_member_run(folder, name) if sep and not Path(item).exists() else load_member_run(item)
                )
            spec = dataset or members[0].dataset
            if spec is None:
                raise fail("the first --runs folder names no dataset: give --dataset")
            data = load_dataset(spec, data_dir)
        else:
            if dataset is None:
                raise fail("--methods needs --dataset")
            data = load_dataset(dataset, data_dir)
            members = _score_members(
                data,
                [m.strip() for m in (methods or "").split(",") if m.strip()],
                option,
                flags,
                sample,
                limit,
                seed,
                work_dir,
            )
        fit = fit_combiner(
            data.examples,
            members,
            dataset=data.spec,
            folds=folds,
            seed=seed,
            l2=l2,
            features=features,  # type: ignore[arg-type]
            n_bootstrap=bootstrap,
            min_gain=min_gain,
            transfer_by=transfer_by,
            target=target,  # type: ignore[arg-type]
        )
    except (CombinerError, DatasetError, MissingExtraError) as exc:
        raise fail(str(exc)) from exc
    c = fit.combiner
    typer.echo(
        f"combiner of {', '.join(m.name for m in c.members)} on {c.data['dataset']}: n = {c.data['n']} "
        f"{c.data.get('labels') or ''}"
    )
    for m in members:
        extra = len(m.reports) - c.data["n"]
        if extra > 0:
            typer.echo(
                f"  {m.spec.name}: {extra} of its {len(m.reports)} items are not scored by every member (left out)"
            )
    table = cv_markdown(c)
    typer.echo("\n" + table + "\n\n" + weights_markdown(c))
    if dropped := c.dropped_features:
        typer.echo("\nleft out: " + "; ".join(f"{k} ({v})" for k, v in dropped.items()))
    if markdown is not None:
        markdown.write_text(table + "\n\n" + weights_markdown(c) + "\n", encoding="utf-8")
    if fit.refusal is not None and not force:
        typer.secho(f"refused: {fit.refusal}; no file written", err=True, fg=typer.colors.RED)
        raise typer.Exit(1)
    write_combiner(c, output)
    typer.echo(
        f"\nwrote {output}"
        + ("" if c.accepted else " (accepted=false: written with --force)")
        + f"; use it with: halluscope check --method ensemble -o combiner={output}"
    )


def _score_members(
    data: Any,
    names: list[str],
    option: list[str] | None,
    flags: ModelFlags,
    sample: int | None,
    limit: int | None,
    seed: int,
    work_dir: Path,
) -> list[Any]:
    """Each method scored on the dataset as an ordinary resumable bench run; its folder read back as a member.
    ``-o NAME.KEY=VALUE`` sets member NAME's option KEY."""
    import asyncio

    from halluscope.bench.combiner import CombinerError, load_member_run
    from halluscope.bench.folder import default_out_dir
    from halluscope.bench.runner import BenchError, run_bench
    from halluscope.methods import get_method

    if not names:
        raise fail("--methods names no method")
    options = parse_options(option)
    per_member: dict[str, dict[str, Any]] = {n: {} for n in names}
    for key, value in options.items():
        member, dot, name = key.partition(".")
        if not dot or member not in per_member:
            raise fail(
                f"-o {key}: member options are written MEMBER.OPTION=VALUE with MEMBER one of {', '.join(names)}"
            )
        per_member[member][name] = value
    config, concurrency = flags.config(), flags.concurrency
    members = []
    for name in names:
        try:
            method = get_method(name, config=config, **per_member[name])
        except (KeyError, TypeError, ValueError) as exc:
            raise fail(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from exc
        out = work_dir / default_out_dir(data.spec, name, method.model_name, sample, seed).name
        try:
            asyncio.run(
                run_bench(
                    method,
                    data,
                    out,
                    sample=sample,
                    seed=seed,
                    limit=limit,
                    n_bootstrap=0,
                    progress=False,
                    concurrency=concurrency,
                )
            )
        except (BenchError, ValueError) as exc:
            raise fail(str(exc)) from exc
        try:
            members.append(load_member_run(out))
        except CombinerError as exc:
            raise fail(str(exc)) from exc
    return members
