"""``halluscope bench-fused``: the leave-one-dataset-out table of the fused verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from halluscope.cli.common import NO_FLAGS, ModelFlags, check_output_file, fail, model_options
from halluscope.cli.fit_verifier import (
    ConsistentAtOpt,
    DataDirOpt,
    DatasetsOpt,
    EmbeddingsOpt,
    EmRoundsOpt,
    L2Opt,
    LabelRuleOpt,
    RunsOpt,
    SampleOpt,
    WorkDirOpt,
    judged_items,
)


@model_options()
def bench_fused_command(
    runs: RunsOpt = None,
    dataset: DatasetsOpt = None,
    flags: ModelFlags = NO_FLAGS,
    l2: L2Opt = 1.0,
    em_rounds: EmRoundsOpt = 5,
    label_rule: LabelRuleOpt = "noisy_or",
    embeddings: EmbeddingsOpt = False,
    consistent_at: ConsistentAtOpt = 1.0,
    sample: SampleOpt = None,
    work_dir: WorkDirOpt = Path("runs"),
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, max=100_000, help="Bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap and --sample.")] = 0,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Also write the table to this file.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write every figure as JSON here.")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Leave one dataset out: each dataset fold (QAGS, each SummEdits domain, FINAL, or each --dataset / --runs
    dataset) held out in turn, the fused verifier and its ablations fitted on the others and scored on it, beside
    ROUGE, the gate and the current default (item AUC with 95% CIs, paired differences, Brier and ECE)."""
    from halluscope._optional import MissingExtraError, require
    from halluscope.bench.datasets import DatasetError
    from halluscope.bench.fused import LABEL_RULES, FusedFitError, lodo_json, lodo_markdown, lodo_table

    check_output_file(markdown, "--markdown")
    if label_rule not in LABEL_RULES:
        raise fail(f"--label-rule must be one of {', '.join(LABEL_RULES)}, got {label_rule!r}")
    check_output_file(json_out, "--json")
    try:
        require("sklearn", "bench", "fitting the fused verifier")
        items = judged_items(runs, dataset, flags, data_dir, consistent_at, embeddings, sample, seed, work_dir)
        table = lodo_table(items, l2=l2, em_rounds=em_rounds, label_rule=label_rule, n_bootstrap=bootstrap, seed=seed)
    except (FusedFitError, DatasetError, MissingExtraError) as exc:
        raise fail(str(exc)) from exc
    text = lodo_markdown(table)
    typer.echo(text)
    if markdown is not None:
        markdown.write_text(text + "\n", encoding="utf-8")
    if json_out is not None:
        json_out.write_text(json.dumps(lodo_json(table), indent=2) + "\n", encoding="utf-8")
