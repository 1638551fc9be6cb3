"""Benchmark datasets as lists of :class:`~halluscope.records.Example`.

A dataset is named ``NAME[:subset]`` (``final:dev``, ``summedits:news``, ``qags``, ``squality``) or is a
path to a ``.jsonl`` file in the generic Example format (docs/datasets.md). The shared data folder is
found from, in order: the ``data_dir`` argument (``--data-dir``), ``HALLUSCOPE_DATA_DIR``, then
``../shared/data`` next to the current directory or next to the halluscope checkout.

Files must be UTF-8 JSONL. A file that is not (a byte that is not UTF-8, a line that is not a JSON object,
a record missing a field) is refused with a :class:`DatasetError` naming the file and line. Human scores
must be finite numbers: a NaN or infinite score (``NaN``, ``Infinity``, ``1e999``, ``"nan"``) is refused
the same way, not skipped, since a silently shorter dataset changes every correlation computed from it.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from halluscope.records import Example

DATA_DIR_ENV = "HALLUSCOPE_DATA_DIR"
SUMMEDITS_DOMAINS = ("news", "samsum", "scitldr", "sales_call")


class DatasetError(ValueError):
    """A dataset name, folder or file that cannot be used; the message says what to do."""


@dataclass
class Dataset:
    name: str  # "final", "summedits", ... or the file stem of a generic JSONL
    subset: str | None  # "dev", a SummEdits domain, ... None = everything
    examples: list[Example]
    files: list[Path] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return f"{self.name}:{self.subset}" if self.subset else self.name


def _default_data_dir_candidates() -> list[Path]:
    repo_root = Path(__file__).resolve().parents[3]  # src/halluscope/bench/datasets.py -> checkout root
    return [Path.cwd().parent / "shared" / "data", repo_root.parent / "shared" / "data"]


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The shared data folder, or a DatasetError listing every place that was tried."""
    if data_dir is not None:
        tried = [Path(data_dir)]
    elif os.environ.get(DATA_DIR_ENV):
        tried = [Path(os.environ[DATA_DIR_ENV])]
    else:
        tried = _default_data_dir_candidates()
    for candidate in tried:
        if candidate.is_dir():
            return candidate
    where = ", ".join(str(p) for p in dict.fromkeys(tried))
    raise DatasetError(f"data folder not found (tried {where}); pass --data-dir or set {DATA_DIR_ENV}")


def read_jsonl_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line; DatasetError naming the line otherwise."""
    if not path.is_file():
        raise DatasetError(f"dataset file not found: {path}")
    rows = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{path}:{lineno}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "re-encode the file as UTF-8"
                ) from exc
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            except RecursionError as exc:
                raise DatasetError(f"{path}:{lineno}: not valid JSON (nested too deeply)") from exc
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append((lineno, row))
    return rows


@contextmanager
def _record(path: Path, lineno: int) -> Iterator[None]:
    """Turn a malformed record (missing key, wrong type) into a DatasetError naming its line."""
    try:
        yield
    except DatasetError:
        raise
    except KeyError as exc:
        raise DatasetError(f"{path}:{lineno}: missing field {exc.args[0]!r}") from exc
    except (TypeError, ValueError, AttributeError) as exc:  # includes pydantic's ValidationError
        raise DatasetError(f"{path}:{lineno}: malformed record ({str(exc)[:300]})") from exc


def _human_score(value: object, path: Path, lineno: int) -> float | None:
    """A finite human score, or a DatasetError: NaN / infinity would poison every correlation."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DatasetError(f"{path}:{lineno}: human score must be a number, got {value!r}")
    try:
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{path}:{lineno}: human score must be a number, got {value!r}") from exc
    if not math.isfinite(score):
        raise DatasetError(f"{path}:{lineno}: human score is {value!r}; human scores must be finite numbers")
    return score


def _read_records(path: Path, to_examples: Callable[[dict[str, Any], int], list[Example]]) -> list[Example]:
    """The Examples ``to_examples(row, line number)`` makes of each record of a benchmark file, in order; a
    malformed record (missing key, wrong type) raises a DatasetError naming its line."""
    examples: list[Example] = []
    for lineno, row in read_jsonl_lines(path):
        with _record(path, lineno):
            examples.extend(to_examples(row, lineno))
    return examples


def read_examples(path: str | Path) -> list[Example]:
    """Read a generic-format JSONL file (one Example per line); errors name the file and line."""
    path = Path(path)
    examples = []
    for record, (lineno, row) in enumerate(read_jsonl_lines(path), 1):
        try:
            example = Example.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "line"
            raise DatasetError(f"{path}:{lineno}: record {record}: {loc}: {first['msg']}") from exc
        _human_score(example.human_score, path, lineno)
        examples.append(example)
    _check_unique_ids(examples, str(path))
    return examples


def write_examples(path: str | Path, examples: Iterable[Example]) -> None:
    """Write Examples as generic-format JSONL (the inverse of :func:`read_examples`)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for ex in examples:
            fh.write(ex.model_dump_json(exclude_none=True) + "\n")


def _check_unique_ids(examples: Sequence[Example], where: str) -> None:
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise DatasetError(f"{where}: duplicate example id {ex.id!r}")
        seen.add(ex.id)


# --- the shared benchmark files -------------------------------------------------------------------


def load_final(root: Path, subset: str | None) -> Dataset:
    """The FINAL dev split. ``descriptions`` are the human gold descriptions; ``label`` is 1 exactly when there
    are none (FINAL's own gold), DeFacto's original label is kept in ``meta["defacto_label"]``."""
    split = subset or "dev"
    path = root / "final" / f"{split}.jsonl"

    def example(row: dict[str, Any], _lineno: int) -> list[Example]:
        descriptions = [d for d in row["human_descriptions"] if d.strip()]
        return [
            Example(
                id=f"final-{row['doc_id']}",
                source=row["text"],
                target=row["summary"],
                label=0 if descriptions else 1,
                descriptions=descriptions,
                split=row.get("split", split),
                meta={"defacto_label": row.get("DeFacto_label"), "doc_id": row["doc_id"]},
            )
        ]

    return Dataset("final", split, _read_records(path, example), [path])


def load_summedits(root: Path, subset: str | None) -> Dataset:
    """SummEdits (Laban et al. 2023): all domains by default, or ``news``, ``samsum+scitldr``, ...
    ``split`` keeps evaluation/test; ``group`` is the seed summary the edits were made from."""
    domains = subset.replace(",", "+").split("+") if subset else list(SUMMEDITS_DOMAINS)
    unknown = [d for d in domains if d not in SUMMEDITS_DOMAINS]
    if unknown:
        raise DatasetError(f"unknown SummEdits domain(s) {unknown}; available: {', '.join(SUMMEDITS_DOMAINS)}")

    def examples_of(domain: str) -> Callable[[dict[str, Any], int], list[Example]]:
        def example(row: dict[str, Any], _lineno: int) -> list[Example]:
            return [
                Example(
                    id=row["id"],
                    source=row["doc"],
                    target=row["summary"],
                    label=int(row["label"]),
                    group=row["id"].rsplit("_", 1)[0],
                    split=row.get("split"),
                    meta={"domain": row.get("domain", domain), "edit_types": row.get("edit_types", [])},
                )
            ]

        return example

    examples: list[Example] = []
    files = []
    for domain in domains:
        path = root / "summedits" / f"{domain}.jsonl"
        files.append(path)
        examples += _read_records(path, examples_of(domain))
    return Dataset("summedits", subset, examples, files)


def load_qags(root: Path, subset: str | None) -> Dataset:
    """QAGS-CNNDM (as shipped with DCR): graded human consistency in [0, 1], no binary label."""
    split = subset or "dev"
    path = root / "qags" / f"cnndm_{split}.jsonl"

    def example(row: dict[str, Any], lineno: int) -> list[Example]:
        score = _human_score(row["consistency"], path, lineno)
        return [
            Example(
                id=f"qags-{row['id']}",
                source=row["source"],
                target=row["summary"],
                human_score=score,
                split=split,
                meta={"subset": "cnndm"},
            )
        ]

    return Dataset("qags", split, _read_records(path, example), [path])


def load_squality(root: Path, subset: str | None) -> Dataset:
    """SQuALITY: one unlabelled Example per (story, human plot summary); ``group`` is the story."""
    split = subset or "dev"
    path = root / "squality" / f"{split}.jsonl"

    def examples(row: dict[str, Any], _lineno: int) -> list[Example]:
        return [
            Example(
                id=f"squality-{row['id']}-{k}",
                source=row["document"],
                target=summary,
                group=str(row["id"]),
                split=split,
                meta={"summary_index": k},
            )
            for k, summary in enumerate(row["plot_summaries"])
        ]

    return Dataset("squality", split, _read_records(path, examples), [path])


LOADERS: dict[str, Callable[[Path, str | None], Dataset]] = {
    "final": load_final,
    "summedits": load_summedits,
    "qags": load_qags,
    "squality": load_squality,
}


def dataset_loaders() -> dict[str, Callable[[Path, str | None], Dataset]]:
    """The built-in loaders and those of the ``halluscope.datasets`` entry points (name -> loader(root, subset));
    an entry point that is not callable, or that would shadow a built-in, is skipped with a warning."""
    from halluscope.plugins import load_entry_points, warn_broken

    loaders = dict(LOADERS)
    for ep, obj in load_entry_points("halluscope.datasets"):
        if not callable(obj):
            warn_broken(ep, f"{obj!r} is not a dataset loader (root, subset) -> Dataset")
        elif ep.name in LOADERS:
            warn_broken(ep, f"dataset {ep.name!r} is a built-in")
        else:
            loaders[ep.name] = obj
    return loaders


def load_dataset(spec: str, data_dir: str | Path | None = None) -> Dataset:
    """``NAME[:subset]`` of a known benchmark, or a path to a generic-format ``.jsonl`` file."""
    if spec.endswith(".jsonl") or Path(spec).is_file():
        path = Path(spec)
        if not path.is_file():
            raise DatasetError(f"dataset file not found: {path}")
        return Dataset(path.stem, None, read_examples(path), [path])
    name, _, subset = spec.partition(":")
    loaders = dataset_loaders()
    if name not in loaders:
        raise DatasetError(f"unknown dataset {name!r}; use one of {', '.join(loaders)} or a path to a .jsonl file")
    try:
        root = resolve_data_dir(data_dir)
    except DatasetError:
        if name in LOADERS:
            raise
        # a plugin's loader may bring its own data: it gets the folder the shared data would be in (absent here)
        root = Path(data_dir) if data_dir is not None else _default_data_dir_candidates()[0]
    dataset = loaders[name](root, subset or None)
    _check_unique_ids(dataset.examples, dataset.spec)
    return dataset


# --- subsampling -----------------------------------------------------------------------------------


def _stratum(ex: Example) -> tuple[str, str]:
    return (ex.split or "", str(ex.meta.get("domain", "")))


def sample_examples(examples: Sequence[Example], per_stratum: int, seed: int = 0) -> list[Example]:
    """A seeded subsample of ``per_stratum`` items from every (split, domain) stratum, keeping the label
    mix of the stratum (each label present gets at least one item when there is room). Items that form
    groups with a difficulty (montage-lie sets) are sampled as whole groups, ``per_stratum`` groups each,
    so a truth is never separated from its lies. The original order is kept."""
    if per_stratum < 1:
        raise ValueError("sample size must be >= 1")
    rng = random.Random(seed)
    strata: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, ex in enumerate(examples):
        strata[_stratum(ex)].append(i)
    keep: set[int] = set()
    for key in sorted(strata):
        idx = strata[key]
        if all(examples[i].group and examples[i].difficulty for i in idx):
            groups: dict[str, list[int]] = defaultdict(list)
            for i in idx:
                groups[examples[i].group].append(i)  # type: ignore[index]
            for g in rng.sample(sorted(groups), min(per_stratum, len(groups))):
                keep.update(groups[g])
        else:
            keep.update(_label_stratified(idx, [examples[i].label for i in idx], per_stratum, rng))
    return [ex for i, ex in enumerate(examples) if i in keep]


def _label_stratified(idx: list[int], labels: list[int | None], n: int, rng: random.Random) -> list[int]:
    if n >= len(idx):
        return list(idx)
    by_label: dict[int | None, list[int]] = defaultdict(list)
    for i, lab in zip(idx, labels):
        by_label[lab].append(i)
    keys = sorted(by_label, key=lambda k: (k is None, k))
    exact = {k: n * len(by_label[k]) / len(idx) for k in keys}
    quotas = {k: int(exact[k]) for k in keys}
    if n >= len(keys):  # every label present gets at least one item
        quotas = {k: max(q, 1) for k, q in quotas.items()}
    while sum(quotas.values()) > n:
        quotas[max(keys, key=lambda k: quotas[k] - exact[k])] -= 1
    for k in sorted(keys, key=lambda k: quotas[k] - exact[k]):  # largest remainder first
        if sum(quotas.values()) >= n:
            break
        quotas[k] += 1
    chosen: list[int] = []
    for k in keys:
        chosen.extend(rng.sample(by_label[k], min(quotas[k], len(by_label[k]))))
    return chosen
