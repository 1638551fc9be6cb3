"""The explanation set: consistent summaries of the shared dev data, each with one injected error and its gold
(docs/benchmarks.md, "Explanations").

**Where the items come from**: the consistent pairs of the shared dev data — SummEdits rows with ``label == 1``
(one per source document, every domain), QAGS-CNNDM rows with ``consistency == 1.0`` (detokenized, as the
citation set reads them) and FINAL rows with no human description. The three are shuffled with the seed and
taken in turn (SummEdits, QAGS, FINAL, SummEdits, ...); a source longer than ``max_source_chars`` is skipped.

**The error**: one per item, from :mod:`halluscope.generators.single_error` (no LLM, so the same seed and data give
the same file): item ``k`` tries first the generator whose turn it is in :data:`ORDER` (position ``k``; a third of
the turns are invented sentences), then the other swaps (never an invented sentence out of its turn), and keeps
the first that applies; a pair none applies to is skipped. Each item records the
generator, the span of the changed text in the new target, the injected and the original text, the relation
gold (``contradicts`` / ``not_mentioned``) and the gold source sentence (None for an invented sentence).

**Built once, resumable**: the set is a JSONL file whose first line holds the build settings; items are appended
one by one. Building again with the same settings keeps every item already written and appends the rest (a larger
``items`` extends the set with the same first items); other settings are refused. The targets file
(:func:`write_targets`) holds ``id``, ``source``, ``target``, ``gold_spans`` and the gold (``meta``) per item: input
for ``halluscope check --input`` in any version, and for ``halluscope bench --dataset`` (its ``explanations`` suite,
:mod:`halluscope.bench.suite_explain`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from halluscope.bench.citation_set import detokenize
from halluscope.bench.datasets import load_final, load_qags, load_summedits
from halluscope.generators.single_error import inject_one
from halluscope.records import Example

ORDER = ("swap.number", "inject.donor", "swap.name", "swap.negation", "swap.date", "inject.donor")
"""The generators' turns: item ``k`` tries them from position ``k % len(ORDER)`` on, wrapping around."""

SOURCES = ("summedits", "qags", "final")


@dataclass(frozen=True)
class ExplainSetConfig:
    """How the set is built (saved on its first line)."""

    seed: int = 7
    items: int = 30
    max_source_chars: int = 4000


def consistent_examples(data_dir: Path) -> dict[str, list[Example]]:
    """The consistent pairs of each source dataset (module docstring), in file order."""
    summedits = [e for e in load_summedits(data_dir, None).examples if e.label == 1]
    seen: set[str] = set()
    unique = []
    for e in summedits:
        if e.source not in seen:
            seen.add(e.source)
            unique.append(e)
    qags = [
        e.model_copy(update={"source": detokenize(e.source), "target": detokenize(e.target)})
        for e in load_qags(data_dir, None).examples
        if e.human_score == 1.0
    ]
    final = [e for e in load_final(data_dir, None).examples if e.label == 1]
    return {"summedits": unique, "qags": qags, "final": final}


def _candidates(pools: dict[str, list[Example]], config: ExplainSetConfig) -> Iterator[tuple[str, Example]]:
    rng = random.Random(config.seed)
    queues = {}
    for name in SOURCES:
        items = [e for e in pools.get(name, []) if len(e.source) <= config.max_source_chars]
        rng.shuffle(items)
        queues[name] = items
    for turn in range(max((len(q) for q in queues.values()), default=0)):
        for name in SOURCES:
            if turn < len(queues[name]):
                yield name, queues[name][turn]


def _donor_pool(name: str, example: Example, pools: dict[str, list[Example]]) -> list[Example]:
    """The examples a donor sentence may come from: the same dataset (for SummEdits, the same domain)."""
    domain = example.meta.get("domain")
    return [e for e in pools[name] if domain is None or e.meta.get("domain") == domain]


def generator_order(k: int) -> list[str]:
    """The generators item ``k`` tries: its turn's first, then the other swaps in turn order (an invented sentence
    only on its own turns, so the swaps keep their share)."""
    start = k % len(ORDER)
    turns = ORDER[start:] + ORDER[:start]
    return list(dict.fromkeys([turns[0], *(g for g in turns if g != "inject.donor")]))


def generate_items(pools: dict[str, list[Example]], config: ExplainSetConfig) -> Iterator[dict[str, Any]]:
    """The set's items in order, without end but the data's (the first ``n`` do not depend on ``config.items``)."""
    built = 0
    for name, example in _candidates(pools, config):
        rng = random.Random(f"{config.seed}:{example.id}")
        order = generator_order(built)
        injection = inject_one(example, _donor_pool(name, example, pools), order, rng)
        if injection is None:
            continue
        yield {
            "id": f"explain-{built:04d}",
            "from": example.id,
            "dataset": name,
            "source": example.source,
            "original_target": example.target,
            **injection.as_dict(),
        }
        built += 1


def read_explain_set(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The build settings (first line) and the items of a set file."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines or "explain_set" not in lines[0]:
        raise ValueError(f"{path}: not an explanation set (its first line holds the build settings)")
    return lines[0], lines[1:]


def build_explain_set(path: Path, config: ExplainSetConfig, data_dir: Path) -> list[dict[str, Any]]:
    """Write (or complete) the set at ``path`` (module docstring) and return its first ``config.items`` items."""
    header = {"explain_set": {k: v for k, v in asdict(config).items() if k != "items"}, "order": list(ORDER)}
    existing: list[dict[str, Any]] = []
    if path.exists():
        found, existing = read_explain_set(path)
        if found.get("explain_set") != header["explain_set"] or found.get("order") != header["order"]:
            raise ValueError(
                f"{path} was built with other settings ({found.get('explain_set')}); "
                "give another --set file or the same settings"
            )
    if len(existing) >= config.items:
        return existing[: config.items]
    pools = consistent_examples(data_dir)
    with path.open("a", encoding="utf-8") as out:
        if not existing:
            out.write(json.dumps(header) + "\n")
        for n, item in enumerate(generate_items(pools, config)):
            if n >= config.items:
                break
            if n < len(existing):
                if existing[n]["id"] != item["id"] or existing[n]["from"] != item["from"]:
                    raise ValueError(f"{path}: item {n} differs from the one these settings build; rebuild it")
                continue
            out.write(json.dumps(item) + "\n")
            out.flush()
            existing.append(item)
    return existing


GOLD_KEYS = ("generator", "span", "injected", "original", "relation", "source_span", "source_sentence")
"""The gold a targets file carries in each Example's ``meta["explain"]`` (for ``halluscope bench``'s suite)."""


def write_targets(path: Path, items: Sequence[dict[str, Any]]) -> None:
    """The targets file: one generic-format Example per item (``id``, ``source``, ``target``, ``gold_spans``, and
    the gold in ``meta["explain"]``); no ``label`` column, so ``check --input`` takes it as it is."""
    with path.open("w", encoding="utf-8") as out:
        for item in items:
            row = {
                "id": item["id"],
                "source": item["source"],
                "target": item["target"],
                "gold_spans": [item["span"]],
                "meta": {"explain": {k: item[k] for k in GOLD_KEYS}},
            }
            out.write(json.dumps(row) + "\n")
