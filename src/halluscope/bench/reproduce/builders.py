"""Dataset builders of the reproduce protocols: the paper's evaluation set, made from the shared dev data.

A builder turns base items (a dataset spec's Examples, after ``--sample``/``--limit``) into the set a paper
evaluates on: montage lies (DoveScore paper), meaning-preserving perturbations (long-document stress-test paper)
or injected hallucinations (PROBE paper). Shared-data protocols (FINAL, DCR) need no builder.

Building is resumable: each base item's output is appended to ``<out>/data/<name>.parts.jsonl`` as soon as
it is made, keyed by the base item's id, and ``build.json`` pins what the folder holds (builder, options,
base dataset, model). A re-run reuses the finished parts (no LLM call) and builds only the missing ones; a
different configuration in the same folder is refused. The set a run evaluates is written to
``<out>/data/<name>.jsonl`` (the selected base items' parts, in base order).

``mode``: ``llm`` is the paper's way of building (the LLM writes the items); ``no-llm`` is halluscope's
model-free variant (sentence-level montage lies; donor facts woven at sentence boundaries; only the
``added_source_sentence`` perturbation). Every departure is returned in :attr:`BuiltSet.departures`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from halluscope.bench.datasets import Dataset, read_examples, write_examples
from halluscope.bench.runner import folder_identity_clash
from halluscope.llm import track_calls
from halluscope.records import Example, Usage

BuildMode = Literal["llm", "no-llm"]
BUILD_FILE = "build.json"


class BuildError(RuntimeError):
    """A dataset that cannot be built (e.g. the folder holds a set built differently)."""


@dataclass
class BuiltSet:
    """What a builder made: the datasets rows run on (by key), and how they were made."""

    datasets: dict[str, Dataset]
    builder: str
    mode: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    n_base: int = 0
    skipped: Counter = field(default_factory=Counter)  # (what, reason) -> count
    usage: Usage = field(default_factory=Usage)  # LLM usage of the parts built in THIS run
    usage_total: Usage = field(default_factory=Usage)  # ... of every part of the selected items
    departures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gold: dict[str, Any] | None = None  # PROBE: who built the gold claims and evidence ({"built_by", "models"})

    def summary(self) -> dict[str, Any]:
        return {
            "gold": self.gold,
            "builder": self.builder,
            "mode": self.mode,
            "options": self.options,
            "n_base": self.n_base,
            "datasets": {
                k: {"spec": d.spec, "n": len(d.examples), "files": [str(p) for p in d.files]}
                for k, d in self.datasets.items()
            },
            "skipped": [{"what": w, "reason": r, "count": n} for (w, r), n in self.skipped.most_common()],
            "usage_this_run": self.usage.model_dump(),
            "usage": self.usage_total.model_dump(),
            "departures": self.departures,
            "notes": self.notes,
        }

    def skipped_for(self, what: str) -> list[str]:
        return [f"{n} x {r}" for (w, r), n in self.skipped.most_common() if w == what]


@dataclass
class Part:
    """The output of one base item."""

    base_id: str
    examples: list[Example]
    skipped: list[tuple[str, str]]  # (what, reason)
    usage: Usage

    def to_json(self) -> str:
        return json.dumps(
            {
                "base_id": self.base_id,
                "examples": [e.model_dump(mode="json", exclude_none=True) for e in self.examples],
                "skipped": [list(s) for s in self.skipped],
                "usage": self.usage.model_dump(),
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, line: str) -> Part:
        row = json.loads(line)
        return cls(
            base_id=row["base_id"],
            examples=[Example.model_validate(e) for e in row["examples"]],
            skipped=[(str(a), str(b)) for a, b in row["skipped"]],
            usage=Usage.model_validate(row["usage"]),
        )


def check_build_identity(folder: Path, identity: dict[str, Any]) -> None:
    detail = folder_identity_clash(folder / BUILD_FILE, identity)
    if detail:
        raise BuildError(f"{folder} holds a set built differently ({detail}); use another --output or delete it")


async def build_parts(
    folder: Path,
    name: str,
    identity: dict[str, Any],
    base: Sequence[Example],
    make: Callable[[Example], Awaitable[Part]],
    progress: bool = True,
) -> tuple[list[Example], Counter, Usage, Usage]:
    """Build (or resume) one part per base item; returns (examples in base order, skip counts, usage of the
    parts built now, usage of all selected parts)."""
    from rich.progress import Progress

    check_build_identity(folder, identity)
    parts_path = folder / f"{name}.parts.jsonl"
    done: dict[str, Part] = {}
    if parts_path.is_file():
        good: list[str] = []
        lines = [line for line in parts_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for line in lines:
            try:
                part = Part.from_json(line)
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by an interrupted run: that item is built again
            done[part.base_id] = part
            good.append(line)
        if len(good) < len(lines):  # rewrite without the broken line, so the next append starts clean
            parts_path.write_text("".join(line + "\n" for line in good), encoding="utf-8")
    pending = [e for e in base if e.id not in done]
    now = Usage()
    if pending:
        with parts_path.open("a", encoding="utf-8") as fh, Progress(transient=True, disable=not progress) as bar:
            task = bar.add_task(f"building {name}", total=len(pending))
            for example in pending:
                with track_calls() as log:
                    part = await make(example)
                part.usage = part.usage + log.usage  # calls a builder keeps out of the log report their own usage
                fh.write(part.to_json() + "\n")
                fh.flush()
                done[part.base_id] = part
                now = now + part.usage
                bar.advance(task)
    examples: list[Example] = []
    skipped: Counter = Counter()
    total = Usage()
    for e in base:
        part = done[e.id]
        examples += part.examples
        skipped.update(part.skipped)
        total = total + part.usage
    write_examples(folder / f"{name}.jsonl", examples)
    return examples, skipped, now, total


def as_dataset(folder: Path, name: str) -> Dataset:
    path = folder / f"{name}.jsonl"
    return Dataset(name, None, read_examples(path) if path.stat().st_size else [], [path])


async def build_single_set(
    folder: Path,
    name: str,
    builder: str,
    mode: BuildMode,
    opts: dict[str, Any],
    identity: dict[str, Any],
    base: Sequence[Example],
    make: Callable[[Example], Awaitable[Part]],
    progress: bool,
) -> BuiltSet:
    """Build (or resume) the parts ``make`` writes into ``name.jsonl`` (:func:`build_parts`, the options in
    the identity) and the BuiltSet whose one dataset, ``main``, is that file."""
    _, skipped, now, total = await build_parts(folder, name, {**identity, "options": opts}, base, make, progress)
    return BuiltSet({"main": as_dataset(folder, name)}, builder, mode, opts, len(base), skipped, now, total)


def check_options(builder: str, options: dict[str, Any], valid: Sequence[str]) -> None:
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise BuildError(f"unknown {builder} builder option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")


def as_list(value: Any) -> list[Any] | None:
    """A builder option given as a list, a single value or a comma-separated string (``-b complexities=1,2``)."""
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [value]


def cut_to_sentences(example: Example, n: int | None) -> Example:
    """The example with its target cut to its first ``n`` sentences (a cost control, recorded in meta)."""
    from halluscope.text import split_sentences

    if n is None:
        return example
    sentences = split_sentences(example.target)
    if len(sentences) <= n:
        return example
    return example.model_copy(
        update={
            "target": example.target[: sentences[n - 1].span.end],
            "meta": {**example.meta, "target_cut_to_sentences": n},
        }
    )


# --- the three builders -------------------------------------------------------------------------------------


async def build_montage(
    folder: Path,
    base: Sequence[Example],
    *,
    mode: BuildMode,
    llm,
    seed: int,
    options: dict[str, Any],
    identity: dict[str, Any],
    progress: bool = True,
) -> BuiltSet:
    """MontageLie groups (DoveScore paper §3.1): the truth and one lie per difficulty for every base target."""
    from halluscope.generators.montage import DIFFICULTIES, MontageGenerator

    check_options("montage", options, ("level", "max_events", "difficulties"))
    level = options.get("level") or ("event" if mode == "llm" else "sentence")
    opts = {
        "level": level,
        "max_events": options.get("max_events"),
        "difficulties": as_list(options.get("difficulties")) or list(DIFFICULTIES),
    }
    generator = MontageGenerator(
        llm if level == "event" else None,
        level=level,
        difficulties=opts["difficulties"],
        seed=seed,
        max_events=opts["max_events"],
    )

    async def make(example: Example) -> Part:
        result = await generator.generate(
            example.source,
            example.target,
            example.id,
            split=example.split,
            meta={"source_id": example.group or example.id},
        )
        skipped = [(s["difficulty"], s["reason"].split(":")[0][:100]) for s in result.skipped]
        return Part(example.id, result.examples, skipped, Usage())  # its calls are in build_parts' log

    built = await build_single_set(folder, "montage", "montage", mode, opts, identity, base, make, progress)
    if level == "sentence":
        built.departures.append(
            "montage lies reorder the target's sentences (no LLM); the paper decomposes events "
            "with an LLM and writes each lie incrementally (--builder llm)"
        )
    if opts["max_events"]:
        built.departures.append(f"each target cut to its first {opts['max_events']} events/sentences (cost control)")
    built.departures.append("no paraphrased variants (the paper pools original and paraphrased texts)")
    return built


async def build_injected(
    folder: Path,
    base: Sequence[Example],
    pool: Sequence[Example],
    *,
    mode: BuildMode,
    llm,
    seed: int,
    options: dict[str, Any],
    identity: dict[str, Any],
    progress: bool = True,
    gold_llms: Sequence[Any] = (),
    gold_self: bool = False,
) -> BuiltSet:
    """PROBE-style injected hallucinations (PROBE §3.2): per base target, the truth plus one item per
    complexity, with the injected character spans as gold. ``gold_llms``: the models that build the gold
    truthful claims and evidence (the first decomposes; each finds evidence and votes); ``gold_self``: the gold
    is built by ``llm``, the model that is then scored (asked for explicitly: ``gold_evidence=self``)."""
    from halluscope.generators.inject import COMPLEXITIES, InjectionGenerator

    check_options(
        "inject",
        options,
        (
            "facts_from",
            "weave",
            "complexities",
            "max_sentences",
            "gold_evidence",
            "gold_samples",
            "gold_consensus",
            "gold_voters",
        ),
    )
    facts_from = options.get("facts_from") or ("llm" if mode == "llm" else "donor")
    weave = options.get("weave") or ("llm" if mode == "llm" else "boundary")
    complexities = [int(c) for c in (as_list(options.get("complexities")) or COMPLEXITIES)]
    gold_evidence = bool(gold_llms) or gold_self
    opts = {
        "facts_from": facts_from,
        "weave": weave,
        "complexities": complexities,
        "max_sentences": options.get("max_sentences"),
    }
    gold_builder = None
    if gold_evidence:  # only then in the identity, so folders built before the option stay valid
        from halluscope.generators.inject import GoldEvidenceBuilder

        builders = list(gold_llms) or ([llm] if llm is not None else [])
        if not builders:
            raise BuildError("gold evidence needs an LLM (the decomposer, evidence finder and judges)")
        samples = options.get("gold_samples")
        consensus = float(options.get("gold_consensus", 0.75))
        gold_builder = GoldEvidenceBuilder(
            builders[0],
            judges=builders if len(builders) > 1 else (),
            samples=int(samples) if samples is not None else None,
            consensus=consensus,
        )
        opts.update(gold_evidence=True, gold_samples=samples, gold_consensus=consensus)
        if gold_llms:  # a named gold model: recorded, so a folder built by another gold model is not reused
            opts["gold_models"] = [g.name for g in gold_llms]
    needs_llm = facts_from == "llm" or weave == "llm"
    generator = InjectionGenerator(
        llm if needs_llm else None, weave=weave, seed=seed, include_truth=True, gold_evidence=gold_builder
    )
    donors = list(pool) if facts_from == "donor" else None

    async def make(example: Example) -> Part:
        example = cut_to_sentences(example, opts["max_sentences"])
        made, failures = await generator.generate(example, complexities, None, donors)
        skipped = [
            (f"complexity-{c}", (f.drop_kind or f.dropped or "dropped")[:100])
            for c, f in zip(_failed_levels(complexities, made), failures)
        ]
        return Part(example.id, made, skipped, Usage())  # its calls are in build_parts' log

    built = await build_single_set(folder, "injected", "inject", mode, opts, identity, base, make, progress)
    if facts_from == "donor":
        built.departures.append(
            "injected facts are sentences from other targets of the same dataset (no LLM); "
            "the paper invents plausible facts with an LLM (--builder llm)"
        )
    if weave == "boundary":
        built.departures.append(
            "facts are inserted as sentences at sentence boundaries (no LLM); the paper has "
            "the LLM weave them in at three complexity styles"
        )
    if gold_builder is not None:
        d = gold_builder.description
        who = (
            f"SELF-BUILT GOLD: the scored model {d['decomposer']} built the gold (its own decomposer, evidence "
            "finder and votes), so decomposition recall and evidence finding measure it against its own output"
            if gold_self
            else f"gold truthful claims and evidence built by {', '.join(d['finders'])} (named with --gold-model)"
        )
        built.departures.append(
            f"{who} ({d['votes_per_passage']} votes per passage, {d['pass_votes_needed']} PASS "
            "needed); the paper's gold voters were the 4 frontier models it then scored (3 of 4 votes)"
        )
        built.gold = {
            "built_by": "self" if gold_self else "named",
            "models": list(d["finders"]),
            "decomposer": d["decomposer"],
            "votes_per_passage": d["votes_per_passage"],
        }
    return built


def _failed_levels(complexities: Sequence[int], made: Sequence[Example]) -> list[int]:
    produced = {int(e.meta.get("complexity", 0)) for e in made}
    return [c for c in complexities if c not in produced]


async def build_perturbed(
    folder: Path,
    base: Sequence[Example],
    *,
    mode: BuildMode,
    llm,
    config,
    seed: int,
    options: dict[str, Any],
    identity: dict[str, Any],
    progress: bool = True,
) -> BuiltSet:
    """Meaning-preserving perturbations (long-document stress-test paper §3.1): per base target, the original plus one
    row per kept perturbation. Also yields an ``originals`` dataset (the window-size rows run on it)."""
    from halluscope.generators.perturb import PERTURBATIONS, PerturbGenerator

    check_options("perturb", options, ("perturbations", "unit", "insert_with", "max_sentences"))
    default = list(PERTURBATIONS) if mode == "llm" else ["added_source_sentence"]
    names = [str(p) for p in (as_list(options.get("perturbations")) or default)]
    opts = {
        "perturbations": names,
        "unit": options.get("unit") or "target",
        "insert_with": options.get("insert_with") or "auto",
        "max_sentences": options.get("max_sentences"),
    }
    generator = PerturbGenerator(
        llm,
        config,
        perturbations=names,
        unit=opts["unit"],  # type: ignore[arg-type]
        insert_with=opts["insert_with"],
        seed=seed,
    )
    stages = generator.stages()

    async def make(example: Example) -> Part:
        example = cut_to_sentences(example, opts["max_sentences"])
        group = await generator.perturb_one(example, stages)
        skipped = [(s.perturbation, s.reason.split(": ")[0][:100]) for s in group.skips]
        return Part(example.id, group.rows, skipped, group.usage)  # perturb_one keeps its calls out of the log

    examples, skipped, now, total = await build_parts(
        folder, "perturbed", {**identity, "options": opts}, base, make, progress
    )
    originals = [e for e in examples if e.difficulty == "original"]
    write_examples(folder / "originals.jsonl", originals)
    built = BuiltSet(
        {"main": as_dataset(folder, "perturbed"), "originals": as_dataset(folder, "originals")},
        "perturb",
        mode,
        opts,
        len(base),
        skipped,
        now,
        total,
    )
    missing = [p for p in PERTURBATIONS if p not in names]
    if missing:
        built.departures.append(
            f"perturbations not built: {', '.join(missing)} (LLM rewrites; the paper has "
            "GPT-4o write them: --builder llm)"
        )
    if opts["max_sentences"]:
        built.departures.append(f"each summary cut to its first {opts['max_sentences']} sentences (cost control)")
    return built
