"""Leave-one-domain-out on the shared SummEdits data: ``train-verifier`` beside the ``gate`` and ``rouge`` methods.

For each held-out SummEdits domain (news, samsum, scitldr, sales_call), a verifier is trained with
:class:`halluscope.verifier_training.VerifierTrainer` (what ``halluscope train-verifier`` runs) on the
``evaluation`` rows of the other three domains, then the held-out domain's ``test`` rows are scored by

- the trained verifier: P(supported) of the saved (best-dev-epoch) model on the training pair format
  (premise = the ``premise_sentences`` source sentences closest to the summary by BM25, hypothesis = the summary);
- the ``gate`` method (defaults) and the ``rouge`` method (defaults), through the bench's ``score_example``.

AUC-ROC (label 1 = consistent) with a 95% percentile bootstrap CI (1,000 resamples, seed 0, as ``halluscope
bench`` computes them, an unscored item counted as wrong) on exactly the same rows for the three scorers.

Resumable: everything lives in ``--out``: ``OUT/<domain>/model`` is the training folder (``train-verifier``
resumes from its checkpoint after any kill, ``kill -9`` included) and ``OUT/<domain>/scores.json`` the fold's
per-row scores and metrics; a re-run skips a fold whose ``scores.json`` exists. ``OUT/table.md`` is rewritten
from every finished fold at the end.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/train_verifier_lodo.py --out lodo --epochs 1
    ... --domains scitldr,news        # only these held-out domains (another process can take the others)
    ... --max-train-pairs 200          # cap the training rows per fold (deterministic: by a seeded hash of the id)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

DOMAINS = ("news", "samsum", "scitldr", "sales_call")


def cap_rows(examples: list[Any], limit: int | None, seed: int) -> list[Any]:
    """The first ``limit`` examples in the order of a seeded hash of their id (deterministic, label-blind)."""
    if not limit or len(examples) <= limit:
        return examples
    return sorted(examples, key=lambda e: hashlib.sha256(f"{seed}:{e.id}".encode()).hexdigest())[:limit]


def verifier_scores(model_dir: Path, examples: list[Any], premise_sentences: int, max_length: int,
                    batch_size: int) -> list[float]:
    import torch
    import transformers

    from halluscope.verifier_training import make_pairs

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    pairs = make_pairs(examples, premise_sentences)
    out: list[float] = []
    with torch.no_grad():
        for i in range(0, len(pairs), batch_size):
            batch = pairs[i:i + batch_size]
            enc = tokenizer([p.premise for p in batch], [p.hypothesis for p in batch], truncation="only_first",
                            max_length=max_length, padding=True, return_tensors="pt")
            out += torch.softmax(model(**enc).logits.float(), dim=-1)[:, 1].tolist()
    return out


def method_scores(name: str, examples: list[Any]) -> list[float | None]:
    from halluscope.bench.runner import score_example
    from halluscope.methods import get_method

    method = get_method(name)

    async def run() -> list[float | None]:
        return [(await score_example(method, e)).score for e in examples]

    return asyncio.run(run())


def auc_ci(labels: list[int], scores: list[float | None]) -> dict[str, Any]:
    import numpy as np

    from halluscope.bench import metrics as M

    y = np.asarray(labels)
    s = M.worst_case_scores(scores, labels)
    ci = M.bootstrap_ci(lambda idx: M.roc_auc(y[idx], s[idx]), len(labels), n_resamples=1000, seed=0)
    ci["n_unscored"] = sum(v is None for v in scores)
    return ci


def run_fold(held_out: str, args: argparse.Namespace) -> dict[str, Any]:
    from halluscope.bench.datasets import load_summedits, resolve_data_dir
    from halluscope.verifier_training import SETTINGS_FILE, TrainSettings, VerifierTrainer

    fold = Path(args.out) / held_out
    scores_file = fold / "scores.json"
    if scores_file.is_file():
        print(f"[{held_out}] finished before; skipped", flush=True)
        result: dict[str, Any] = json.loads(scores_file.read_text())
        return result
    root = resolve_data_dir(args.data_dir)
    others = "+".join(d for d in DOMAINS if d != held_out)
    train_rows = [e for e in load_summedits(root, others).examples if e.split == "evaluation"]
    train_rows = cap_rows(train_rows, args.max_train_pairs, args.seed)
    test_rows = [e for e in load_summedits(root, held_out).examples if e.split == "test"]
    settings = TrainSettings(epochs=args.epochs, seed=args.seed)
    print(f"[{held_out}] training on {len(train_rows)} evaluation rows of {others}; "
          f"{len(test_rows)} test rows held out", flush=True)
    started = time.perf_counter()
    VerifierTrainer(train_rows, fold / "model", settings,
                    progress=lambda line: print(f"[{held_out}] {line}", flush=True)).run()
    train_s = time.perf_counter() - started
    trained = json.loads((fold / "model" / SETTINGS_FILE).read_text())
    labels = [int(e.label) for e in test_rows]
    started = time.perf_counter()
    scores = {
        "verifier": verifier_scores(fold / "model", test_rows, settings.premise_sentences, settings.max_length,
                                    settings.batch_size),
        "gate": method_scores("gate", test_rows),
        "rouge": method_scores("rouge", test_rows),
    }
    result = {
        "held_out": held_out, "trained_on": others, "train_rows": len(train_rows), "test_rows": len(test_rows),
        "max_train_pairs": args.max_train_pairs, "settings": trained.get("settings"),
        "train_pairs": trained.get("train_pairs"), "dev_pairs": trained.get("dev_pairs"),
        "dev_auc": trained.get("dev_auc"), "best_epoch": trained.get("epoch"),
        "history": trained.get("history"), "resumed_from": trained.get("resumed_from"),
        "seconds": {"train_this_run": round(train_s, 1), "score": round(time.perf_counter() - started, 1)},
        "auc": {name: auc_ci(labels, values) for name, values in scores.items()},
        "items": [{"id": e.id, "label": y, **{name: values[i] for name, values in scores.items()}}
                  for i, (e, y) in enumerate(zip(test_rows, labels))],
    }
    tmp = scores_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, scores_file)
    print(f"[{held_out}] " + ", ".join(f"{k} AUC {fmt(v)}" for k, v in result["auc"].items()), flush=True)
    return result


def fmt(ci: dict[str, Any]) -> str:
    if ci.get("value") is None:
        return "-"
    if ci.get("low") is None:
        return f"{ci['value']:.3f}"
    return f"{ci['value']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def table(out: Path) -> str:
    rows = ["| held-out domain (test rows) | n | train / dev pairs | dev AUC (epoch) | verifier | gate | rouge |",
            "|---|---|---|---|---|---|---|"]
    for d in DOMAINS:
        path = out / d / "scores.json"
        if not path.is_file():
            rows.append(f"| {d} | not run | | | | | |")
            continue
        r = json.loads(path.read_text())
        dev = "-" if r["dev_auc"] is None else f"{r['dev_auc']:.3f}"
        rows.append(f"| {d} | {r['test_rows']} | {r['train_pairs']} / {r['dev_pairs']} | {dev} ({r['best_epoch']}) "
                    f"| {fmt(r['auc']['verifier'])} | {fmt(r['auc']['gate'])} | {fmt(r['auc']['rouge'])} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the folds (models, scores, table.md)")
    parser.add_argument("--domains", default=",".join(DOMAINS), help="held-out domains to run, comma-separated")
    parser.add_argument("--epochs", type=int, default=1, help="train-verifier epochs (its other settings: defaults)")
    parser.add_argument("--max-train-pairs", type=int, default=None,
                        help="cap the training rows per fold (seeded hash of the id; default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--data-dir", default=None, help="the shared data folder (default: ../shared/data)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    domains = [d for d in args.domains.split(",") if d]
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        sys.exit(f"unknown domain(s) {unknown}; choose from {', '.join(DOMAINS)}")
    for d in domains:
        run_fold(d, args)
    out = Path(args.out)
    text = table(out)
    (out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
