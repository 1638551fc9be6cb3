"""``halluscope fit-verifier``: fit the fused verifier on labelled pairs, judged out of fold against the judge alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, check_output_file, fail, model_options

JUDGE_METHOD = "dcr"
JUDGE_OPTIONS: dict[str, Any] = {"order": "verdict_first", "explain": False}
"""The run the judge's probabilities are read from: the default check's composition, scoring only (no explanation
calls: the fused verifier needs only each claim's P(supported))."""

RunsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--runs",
        "-r",
        help=(
            "A bench output folder of the verdict-first default (`halluscope bench --methods "
            "dcr+order=verdict_first+explain=false -O FOLDER`, or its parent): the judge's probabilities are read "
            "from it (no LLM call). Repeatable; each folder's run.json names its dataset."
        ),
    ),
]
DatasetsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--dataset",
        "-d",
        help=(
            "Labelled pairs (a generic Example .jsonl: source, target, label or human_score; or a bench name: "
            "qags:dev, final:dev, summedits[:domain]) to score now with the verdict-first default (a resumable bench "
            "run under --work-dir, through the response cache). Repeatable."
        ),
    ),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Shared data folder (default ../shared/data).", envvar="HALLUSCOPE_DATA_DIR"),
]
ConsistentAtOpt = Annotated[
    float,
    typer.Option("--consistent-at", help="Items with a human score and no label are consistent at this score and up."),
]
L2Opt = Annotated[
    float, typer.Option("--l2", min=1e-6, max=1e6, help="L2 penalty on the standardised weights (C = 1/l2).")
]
EmRoundsOpt = Annotated[
    int, typer.Option("--em-rounds", min=1, max=50, help="Rounds of the claim-label EM (docs/verifiers.md).")
]
EmbeddingsOpt = Annotated[
    bool,
    typer.Option(
        "--embeddings/--no-embeddings",
        help="Add the embedding similarity feature (needs the embeddings extra at fit and at check time).",
    ),
]
LabelRuleOpt = Annotated[
    str,
    typer.Option(
        "--label-rule",
        help=(
            "How item labels become claim labels: noisy_or (an inconsistent item holds at least one unsupported "
            "claim; EM), lowest (its lowest-judge claim is the unsupported one, the others left out) or item (every "
            "claim takes its item's label, weight 1/claims). docs/verifiers.md."
        ),
    ),
]
SampleOpt = Annotated[
    int | None, typer.Option("--sample", min=1, help="With --dataset: the bench's seeded sample, N per stratum.")
]
WorkDirOpt = Annotated[Path, typer.Option("--work-dir", help="With --dataset: where the bench runs go (resumable).")]


def judged_items(
    runs: list[Path] | None,
    datasets: list[str] | None,
    flags: ModelFlags,
    data_dir: Path | None,
    consistent_at: float,
    embeddings: bool,
    sample: int | None,
    seed: int,
    work_dir: Path,
) -> list[Any]:
    """The labelled items with their claims' features: read from ``runs``, or scored now on ``datasets`` with the
    verdict-first default (an ordinary resumable bench run, whose replies the response cache keeps)."""
    from halluscope.bench.fused import load_run_items

    folders = list(runs or [])
    for spec in datasets or []:
        folders.append(_score_dataset(spec, flags, data_dir, sample, seed, work_dir))
    if not folders:
        raise fail("give the labelled pairs as --runs FOLDER (judge probabilities already computed) or --dataset")
    items = []
    for folder in folders:
        _, found = load_run_items(folder, data_dir, consistent_at=consistent_at, embeddings=embeddings)
        items.extend(found)
    return items


def _score_dataset(
    spec: str, flags: ModelFlags, data_dir: Path | None, sample: int | None, seed: int, work_dir: Path
) -> Path:
    import asyncio

    from halluscope.bench.datasets import load_dataset
    from halluscope.bench.folder import default_out_dir
    from halluscope.bench.runner import BenchError, run_bench
    from halluscope.methods import get_method

    data = load_dataset(spec, data_dir)
    try:
        method = get_method(JUDGE_METHOD, config=flags.config(), **JUDGE_OPTIONS)
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(str(exc)) from exc
    out = work_dir / default_out_dir(data.spec, "dcr+verdict_first", method.model_name, sample, seed).name
    try:
        asyncio.run(
            run_bench(
                method,
                data,
                out,
                sample=sample,
                seed=seed,
                n_bootstrap=0,
                progress=False,
                concurrency=flags.concurrency,
            )
        )
    except (BenchError, ValueError) as exc:
        raise fail(str(exc)) from exc
    return out


@model_options()
def fit_verifier_command(
    output: Annotated[Path, typer.Option("--output", "-O", help="The fused verifier file to write (JSON).")],
    runs: RunsOpt = None,
    dataset: DatasetsOpt = None,
    flags: ModelFlags = NO_FLAGS,
    folds: Annotated[int, typer.Option("--folds", min=2, max=50, help="k of the out-of-fold check.")] = 5,
    l2: L2Opt = 1.0,
    em_rounds: EmRoundsOpt = 5,
    label_rule: LabelRuleOpt = "noisy_or",
    embeddings: EmbeddingsOpt = False,
    consistent_at: ConsistentAtOpt = 1.0,
    sample: SampleOpt = None,
    work_dir: WorkDirOpt = Path("runs"),
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, max=100_000, help="Bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the folds, the bootstrap and --sample.")] = 0,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Write the file even when it does not beat the judge out of fold (training.accepted=false)."
        ),
    ] = False,
    data_dir: DataDirOpt = None,
) -> None:
    """Fit the fused verifier (the verdict-first judge's P(supported) with the claim's lexical support) on labelled
    pairs. It is checked out of fold (folds grouped by item) against the judge alone and refused (exit 1, no file)
    unless its item-level AUC is higher. Use it with `halluscope check -o verifier=fused:FILE`."""
    from halluscope._optional import MissingExtraError, require
    from halluscope.bench import metrics as M
    from halluscope.bench.datasets import DatasetError
    from halluscope.bench.fused import LABEL_RULES, FusedFitError, check_fit, fit_model
    from halluscope.methods.fused.features import EMBEDDING_FEATURES, FEATURE_NAMES

    check_output_file(output, "--output")
    if label_rule not in LABEL_RULES:
        raise fail(f"--label-rule must be one of {', '.join(LABEL_RULES)}, got {label_rule!r}")
    names = FEATURE_NAMES if embeddings else tuple(n for n in FEATURE_NAMES if n not in EMBEDDING_FEATURES)
    try:
        require("sklearn", "bench", "fitting the fused verifier")
        items = judged_items(runs, dataset, flags, data_dir, consistent_at, embeddings, sample, seed, work_dir)
        check = check_fit(
            items,
            names,
            folds=folds,
            l2=l2,
            em_rounds=em_rounds,
            label_rule=label_rule,
            seed=seed,
            n_bootstrap=bootstrap,
        )
    except (FusedFitError, DatasetError, MissingExtraError) as exc:
        raise fail(str(exc)) from exc
    typer.echo(
        f"{check.n} items ({sum(it.label for it in items)} consistent), "
        f"{sum(len(it.features) for it in items)} claims; {check.folds} folds grouped by item"
    )
    typer.echo(f"out-of-fold item AUC: fused {_f(check.fused_auc)}, judge alone {_f(check.judge_auc)}")
    typer.echo(f"fused - judge: {M.format_ci(check.diff)}")
    if check.refusal is not None and not force:
        typer.secho(f"refused: {check.refusal}; no file written", err=True, fg=typer.colors.RED)
        raise typer.Exit(1)
    datasets = sorted({it.fold for it in items})
    training = {
        "data": datasets,
        "accepted": check.refusal is None,
        **({"refusal": check.refusal} if check.refusal else {}),
        "out_of_fold": {
            "folds": check.folds,
            "item_auc_fused": check.fused_auc,
            "item_auc_judge": check.judge_auc,
            "fused_minus_judge": check.diff,
        },
    }
    try:
        model = fit_model(
            items,
            names,
            l2=l2,
            em_rounds=em_rounds,
            label_rule=label_rule,
            folds=folds,
            seed=seed,
            training=training,
        )
    except FusedFitError as exc:
        raise fail(str(exc)) from exc
    model.save(output)
    typer.echo("weights (standardised): " + ", ".join(f"{k} {v:+.3f}" for k, v in model.weights().items()))
    typer.echo(f"wrote {output}; use it with: halluscope check -o verifier=fused:{output}")


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
