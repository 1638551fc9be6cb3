"""A very long source with DCR and retrieval: wall time of one check over a synthetic source of
``--words`` words with ``-o retrieval=always`` and the default retriever (MiniLM embeddings when installed).
The LLM is a scripted fake (every excerpt judged consistent, AMC by rule), so the time is halluscope's own:
sentence splitting, the index, retrieval.

    HF_HUB_OFFLINE=1 python benchmarks/long_source.py --words 1000000
    HF_HUB_OFFLINE=1 python benchmarks/long_source.py --words 1000000 --embed-all   # seed 003: every sentence

Past ``embed_all_up_to`` (5,000) source sentences the index announces it and embeds only BM25's 100 candidates
per claim; ``--embed-all`` passes ``embed_all_up_to=None`` (the paper's protocol, with a progress bar).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from halluscope.llm import LLM, FakeModel  # noqa: E402
from halluscope.methods import get_method  # noqa: E402

_NOUNS = ("ferry harbour council grant budget bridge school river market mayor engineer contract storm "
          "festival museum railway tunnel factory village island").split()
_VERBS = "approved funded delayed opened inspected rebuilt closed expanded sold repaired".split()


def synthetic_source(words: int, seed: int = 0) -> str:
    """Sentences of 12-20 words about numbered things, so every sentence is distinct and retrievable."""
    rng = random.Random(seed)
    out: list[str] = []
    count = 0
    i = 0
    while count < words:
        n = rng.randint(12, 20)
        body = [rng.choice(_NOUNS) if j % 3 else rng.choice(_VERBS) for j in range(n - 4)]
        sentence = f"In year {1900 + i % 120} the {' '.join(body)} number {i}."
        out.append(sentence[0].upper() + sentence[1:])
        count += len(sentence.split())
        i += 1
    return " ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--embed-all", action="store_true", help="embed_all_up_to=None: the paper's protocol")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    source = synthetic_source(args.words)
    sentences = source.split(". ")
    target = " ".join(sentences[k].rstrip(".") + "." for k in (10, 20_000 % len(sentences), len(sentences) // 2))
    reply = json.dumps({"reason": "Consistent: the excerpt says so.", "is_consistent": True})
    llm = LLM(FakeModel(default=reply), cache=None)
    options = {"retrieval": "always", "amc": "rule"}
    if args.embed_all:
        options["embed_all_up_to"] = None
    method = get_method("dcr", llm=llm, **options)
    started = time.perf_counter()
    report = method.check(source, target)
    seconds = time.perf_counter() - started
    retrieval = report.details.get("context") or {}
    print(json.dumps({"words": len(source.split()), "chars": len(source), "options": options,
                      "seconds": round(seconds, 1), "score": report.score, "unscored": report.unscored_reason,
                      "llm_calls": report.usage.calls, "retrieval": {k: v for k, v in retrieval.items() if k != "density"}
                      if isinstance(retrieval, dict) else retrieval}, indent=1))


if __name__ == "__main__":
    main()
