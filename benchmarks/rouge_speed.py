"""ROUGE-1/2/L speed and equality on SQuALITY-length pairs: halluscope's C-speed ROUGE vs rouge-score.

Each pair is a SQuALITY dev story (~5k words, the reference) and one of its plot summaries (the prediction),
scored for rouge1, rouge2 and rougeL with the Porter stemmer, as ``halluscope bench --method rouge`` does.
Timed in this order, in one fresh process (so halluscope's per-word stem cache starts empty and its cost is
in the figures):

- ``halluscope rouge_scores``: :func:`halluscope.methods.rouge.rouge_scores` on the two texts;
- ``halluscope rouge method``: ``Rouge().acheck`` (also reuses the tokens of a story across its summaries);
- ``rouge-score``: ``RougeScorer([...], use_stemmer=True).score``.

Prints seconds per pair, the speed-ups and the largest absolute difference over every P/R/F.

    python benchmarks/rouge_speed.py            # first 40 pairs (10 stories x 4 summaries)
    python benchmarks/rouge_speed.py --pairs 0  # every dev pair (rouge-score takes ~2 s per pair)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from rouge_score import rouge_scorer

from halluscope.methods.rouge import ROUGE_TYPES, Rouge, rouge_scores

DATA = Path(os.environ.get("HALLUSCOPE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def load_pairs(limit: int) -> list[tuple[str, str]]:
    path = DATA / "squality" / "dev.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} not found (set HALLUSCOPE_DATA_DIR)")
    pairs = [(row["document"], summary) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
             for row in [json.loads(line)] for summary in row["plot_summaries"]]
    return pairs[:limit] if limit > 0 else pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=40, help="how many (story, summary) pairs; 0 = all")
    args = parser.parse_args()
    pairs = load_pairs(args.pairs)
    words_src = sum(len(s.split()) for s, _ in pairs) / len(pairs)
    words_tgt = sum(len(t.split()) for _, t in pairs) / len(pairs)
    print(f"{len(pairs)} SQuALITY dev pairs: sources {words_src:.0f} words, summaries {words_tgt:.0f} words on average")

    t0 = time.perf_counter()
    fast = [rouge_scores(s, t) for s, t in pairs]
    t_fast = time.perf_counter() - t0

    method = Rouge()

    async def run_method() -> list[float | None]:
        return [(await method.acheck(s, t)).score for s, t in pairs]

    t0 = time.perf_counter()
    asyncio.run(run_method())
    t_method = time.perf_counter() - t0

    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    t0 = time.perf_counter()
    slow = [scorer.score(s, t) for s, t in pairs]
    t_slow = time.perf_counter() - t0

    diff = max(abs(getattr(a[k], f) - getattr(b[k], f)) for a, b in zip(slow, fast) for k in ROUGE_TYPES
               for f in ("precision", "recall", "fmeasure"))
    n = len(pairs)
    print(f"{'':27s} {'total s':>9s} {'s/pair':>9s} {'speed-up':>9s}")
    print(f"{'rouge-score':27s} {t_slow:9.2f} {t_slow / n:9.4f} {1.0:9.1f}")
    print(f"{'halluscope rouge_scores':27s} {t_fast:9.2f} {t_fast / n:9.4f} {t_slow / t_fast:9.1f}")
    print(f"{'halluscope rouge method':27s} {t_method:9.2f} {t_method / n:9.4f} {t_slow / t_method:9.1f}")
    print(f"max |difference| over {n} pairs x 3 types x P/R/F: {diff:.3g}")


if __name__ == "__main__":
    main()
