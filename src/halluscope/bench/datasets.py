"""Benchmark datasets as lists of :class:`~halluscope.records.Example`.

A dataset is named ``NAME[:subset]`` (``final:dev``, ``summedits:news``, ``qags``, ``squality``) or is a
path to a ``.jsonl`` file in the generic Example format (docs/datasets.md). The shared data folder is
found from, in order: the ``data_dir`` argument (``--data-dir``), ``HALLUSCOPE_DATA_DIR``, then
``../shared/data`` next to the current directory or next to the halluscope checkout.
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise DatasetError(f"dataset file not found: {path}")
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def read_examples(path: str | Path) -> list[Example]:
    """Read a generic-format JSONL file (one Example per line); errors name the file and line."""
    path = Path(path)
    examples = []
    for lineno, row in enumerate(_read_jsonl(path), 1):
        try:
            examples.append(Example.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "line"
            raise DatasetError(f"{path}: record {lineno}: {loc}: {first['msg']}") from exc
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
    """FINAL (seed 002). ``descriptions`` are the human gold descriptions; ``label`` is 1 exactly when there
    are none (FINAL's own gold), DeFacto's original label is kept in ``meta["defacto_label"]``."""
    split = subset or "dev"
    path = root / "final" / f"{split}.jsonl"
    examples = []
    for row in _read_jsonl(path):
        descriptions = [d for d in row["human_descriptions"] if d.strip()]
        examples.append(Example(
            id=f"final-{row['doc_id']}",
            source=row["text"],
            target=row["summary"],
            label=0 if descriptions else 1,
            descriptions=descriptions,
            split=row.get("split", split),
            meta={"defacto_label": row.get("DeFacto_label"), "doc_id": row["doc_id"]},
        ))
    return Dataset("final", split, examples, [path])


def load_summedits(root: Path, subset: str | None) -> Dataset:
    """SummEdits (Laban et al. 2023): all domains by default, or ``news``, ``samsum+scitldr``, ...
    ``split`` keeps evaluation/test; ``group`` is the seed summary the edits were made from."""
    domains = subset.replace(",", "+").split("+") if subset else list(SUMMEDITS_DOMAINS)
    unknown = [d for d in domains if d not in SUMMEDITS_DOMAINS]
    if unknown:
        raise DatasetError(f"unknown SummEdits domain(s) {unknown}; available: {', '.join(SUMMEDITS_DOMAINS)}")
    examples, files = [], []
    for domain in domains:
        path = root / "summedits" / f"{domain}.jsonl"
        files.append(path)
        for row in _read_jsonl(path):
            examples.append(Example(
                id=row["id"],
                source=row["doc"],
                target=row["summary"],
                label=int(row["label"]),
                group=row["id"].rsplit("_", 1)[0],
                split=row.get("split"),
                meta={"domain": row.get("domain", domain), "edit_types": row.get("edit_types", [])},
            ))
    return Dataset("summedits", subset, examples, files)


def load_qags(root: Path, subset: str | None) -> Dataset:
    """QAGS-CNNDM (as shipped with DCR): graded human consistency in [0, 1], no binary label."""
    split = subset or "dev"
    path = root / "qags" / f"cnndm_{split}.jsonl"
    examples = [
        Example(id=f"qags-{row['id']}", source=row["source"], target=row["summary"],
                human_score=float(row["consistency"]), split=split, meta={"subset": "cnndm"})
        for row in _read_jsonl(path)
    ]
    return Dataset("qags", split, examples, [path])


def load_squality(root: Path, subset: str | None) -> Dataset:
    """SQuALITY: one unlabelled Example per (story, human plot summary); ``group`` is the story."""
    split = subset or "dev"
    path = root / "squality" / f"{split}.jsonl"
    examples = []
    for row in _read_jsonl(path):
        for k, summary in enumerate(row["plot_summaries"]):
            examples.append(Example(id=f"squality-{row['id']}-{k}", source=row["document"], target=summary,
                                    group=str(row["id"]), split=split, meta={"summary_index": k}))
    return Dataset("squality", split, examples, [path])


LOADERS: dict[str, Callable[[Path, str | None], Dataset]] = {
    "final": load_final,
    "summedits": load_summedits,
    "qags": load_qags,
    "squality": load_squality,
}


def load_dataset(spec: str, data_dir: str | Path | None = None) -> Dataset:
    """``NAME[:subset]`` of a known benchmark, or a path to a generic-format ``.jsonl`` file."""
    if spec.endswith(".jsonl") or Path(spec).is_file():
        path = Path(spec)
        if not path.is_file():
            raise DatasetError(f"dataset file not found: {path}")
        return Dataset(path.stem, None, read_examples(path), [path])
    name, _, subset = spec.partition(":")
    if name not in LOADERS:
        raise DatasetError(f"unknown dataset {name!r}; use one of {', '.join(LOADERS)} or a path to a .jsonl file")
    dataset = LOADERS[name](resolve_data_dir(data_dir), subset or None)
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
