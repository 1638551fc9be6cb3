"""A 10,000-word source and a 20-claim target, checked offline: retrieval (top-K snippets per claim) and
verdict-first scoring with the default method, and where the time goes.

    python benchmarks/long_source.py --model embedded:qwen2.5-coder-1.5b [--words 10000] [--claims 20]
        [--top-k 2] [--window 1] [--retriever bm25] [--method dcr] [--out bench_out/long_source.json]

The source: the SQuALITY dev stories (``$HALLUSCOPE_DATA_DIR/squality/dev.jsonl``, else ``../shared/data``)
joined in file order and cut at the sentence that reaches ``--words`` words. The target: the first ``--claims``
sentences of the human plot summaries of the stories the source holds (``plot_summaries[0]``, story by story),
with every fourth of them made false by a fixed edit (a number or a name from elsewhere in the source would need
judgement; the edit negates the sentence's first auxiliary or inserts "never"), so some claims are flagged and
explained. Without the data folder a synthetic source and target are built (numbered facts; every fourth claim
contradicts its fact).

Prints (and writes with ``--out``) the total seconds, the calls and tokens, and the split: ``decompose`` (the
sentence decomposer), ``retrieve + other`` (index, snippet selection, aggregation: the total less the rest),
``score`` (the short yes/no replies), ``explain`` (reason, quote and fix of the flagged claims), with the
load average before and after. One run is one measurement on a shared machine: say what else ran.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

NEGATE = re.compile(r"\b(is|was|are|were|has|had|will|can|did|does|do)\b")


def _words(text: str) -> int:
    return len(text.split())


def falsify(sentence: str) -> str:
    """The sentence made false by a fixed edit: its first auxiliary negated, else "never" after its subject."""
    match = NEGATE.search(sentence)
    if match:
        return sentence[: match.end()] + " not" + sentence[match.end() :]
    first, _, rest = sentence.partition(" ")
    return f"{first} never {rest}" if rest else sentence


def build_from_squality(path: Path, words: int, claims: int) -> tuple[str, list[str]]:
    from halluscope.text.sentences import split_sentences

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    parts: list[str] = []
    used = []
    total = 0
    for row in rows:
        kept = []
        for sentence in split_sentences(row["document"]):
            kept.append(sentence.text)
            total += _words(sentence.text)
            if total >= words:
                break
        parts.append(" ".join(kept))
        used.append(row)
        if total >= words:
            break
    sentences: list[str] = []
    for row in used:
        summary = row["plot_summaries"][0] if row.get("plot_summaries") else ""
        sentences += [s.text for s in split_sentences(summary)]
    chosen = sentences[:claims]
    return "\n\n".join(parts), [falsify(s) if i % 4 == 3 else s for i, s in enumerate(chosen)]


def build_synthetic(words: int, claims: int) -> tuple[str, list[str]]:
    facts = []
    i = 0
    while sum(_words(f) for f in facts) < words:
        facts.append(
            f"Station {i} of the survey recorded {i * 7 % 97 + 3} nesting birds on the northern ridge, "
            f"and the team leader there was volunteer number {i * 13 % 89 + 1}."
        )
        i += 1
    step = max(1, len(facts) // claims)
    target = []
    for k in range(claims):
        j = k * step
        birds = j * 7 % 97 + 3
        target.append(f"Station {j} of the survey recorded {birds + (5 if k % 4 == 3 else 0)} nesting birds.")
    return " ".join(facts), target


def made_false(verdicts: list[Any], claims: list[str]) -> dict[str, Any] | None:
    """How the verdicts tell the claims made false (every fourth) from the others: how many of each were flagged,
    and the AUC of P(supported) (1 = every true claim above every false one); None when the verdicts do not line
    up with the claims one to one."""
    from halluscope.bench.metrics import roc_auc

    if len(verdicts) != len(claims):
        return None
    false = [i % 4 == 3 for i in range(len(claims))]
    flagged = [v.label != "supported" for v in verdicts]
    probabilities = [v.support_probability for v in verdicts]
    auc = None
    if all(p is not None for p in probabilities):
        value = roc_auc([0 if f else 1 for f in false], probabilities)
        auc = None if value is None else round(value, 3)
    return {
        "false": sum(false),
        "false_flagged": sum(f and g for f, g in zip(false, flagged)),
        "true_flagged": sum(g and not f for f, g in zip(false, flagged)),
        "auc_support_probability": auc,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:qwen2.5-coder-1.5b")
    parser.add_argument("--method", default=None, help="default: halluscope's default method and its options")
    parser.add_argument("--words", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=20)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--retriever", default="bm25", choices=["bm25", "embedding", "auto"])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--synthetic", action="store_true", help="build the synthetic source even with the data")
    parser.add_argument(
        "-o", "--option", action="append", default=[], metavar="KEY=VALUE", help="a method option (repeatable)"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from halluscope.cli.common import parse_options
    from halluscope.config import Config, resolve_method
    from halluscope.methods import get_method

    data = Path(os.environ.get("HALLUSCOPE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    squality = data / "squality" / "dev.jsonl"
    if squality.is_file() and not args.synthetic:
        source, claims = build_from_squality(squality, args.words, args.claims)
        origin = str(squality)
    else:
        source, claims = build_synthetic(args.words, args.claims)
        origin = "synthetic"
    target = " ".join(claims)
    name, options = resolve_method(
        args.method,
        {
            "retrieval": "always",
            "top_k": args.top_k,
            "window": args.window,
            "retriever": args.retriever,
            **parse_options(args.option),
        },
    )
    config = Config(model=args.model, cache=False, max_tokens=args.max_tokens)
    method = get_method(name, config=config, **options)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    decomposed = method.make_decomposer()
    import asyncio

    t_dec = time.perf_counter()
    asyncio.run(decomposed(target))
    decompose_s = time.perf_counter() - t_dec
    report = method.check(source, target)
    total = time.perf_counter() - t0
    vf = report.details.get("verdict_first", {})
    seconds = vf.get("seconds", {})
    score_s, explain_s = seconds.get("score", 0.0), seconds.get("explain", 0.0)
    result: dict[str, Any] = {
        "source": origin,
        "source_words": _words(source),
        "claims": len(report.verdicts),
        "method": name,
        "options": options,
        "model": args.model,
        "total_s": round(total, 1),
        "split_s": {
            "decompose": round(decompose_s, 2),
            "retrieve_and_other": round(total - decompose_s - score_s - explain_s, 1),
            "score": round(score_s, 1),
            "explain": round(explain_s, 1),
        },
        "calls": report.usage.calls,
        "prompt_tokens": report.usage.prompt_tokens,
        "cached_prompt_tokens": report.usage.cached_prompt_tokens,
        "completion_tokens": report.usage.completion_tokens,
        "score": report.score,
        "flagged": len(vf.get("flagged", [])),
        "findings": len(report.findings),
        "findings_with_evidence_span": sum(any(e.span for e in f.evidence) for f in report.findings),
        "findings_with_fix": sum(bool(f.fix) for f in report.findings),
        "made_false": made_false(report.verdicts, claims),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**result, "report": report.model_dump(mode="json")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
