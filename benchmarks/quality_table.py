"""The dev-data quality table: every system of several ``halluscope bench --methods`` output folders (one per
dataset and model), one row per system and model -- a thin wrapper over :mod:`halluscope.bench.quality_table`.

    python benchmarks/quality_table.py runs/qags-qwen runs/summedits-qwen runs/final-qwen runs/qags-smollm2 \\
        [--min-items 10] [--out quality.md]

Each folder is one dataset on one model (its ``run.json``); the table puts a system's QAGS Spearman, its SummEdits
AUC (overall and per domain) and its FINAL description-matching F1 side by side, each with its 95 % bootstrap CI
and coverage, computed from the folder's ``rows.jsonl`` alone. Nothing is measured here.
"""

from __future__ import annotations

import sys

from halluscope.bench.quality_table import main

if __name__ == "__main__":
    main(sys.argv[1:])
