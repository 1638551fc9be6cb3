"""Which items a method calibrates on, and the bench's side of the calibration hook
(:mod:`halluscope.methods.calibration`).

Dev items: a dataset given explicitly (``select_on``, e.g. ``final:dev`` when evaluating a held-out split, or a
user's file), else a seeded share of the run's items held out and not scored (``select_holdout``,
:func:`holdout_split`), else the run's items of its dev split when the run has a dev split and another one (see
:func:`halluscope.bench.builtin_suites.pick_dev_split`), else the run's own items - then the choice is made
in-sample, which is optimistic, and the record says so.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from halluscope.bench.datasets import Dataset
from halluscope.records import Example


def holdout_split(
    dataset: Dataset, examples: Sequence[Example], share: float, seed: int = 0
) -> tuple[list[Example], list[Example], str]:
    """(selection items, evaluated items, name): a seeded ``share`` of the run's items held out for a method's dev-set
    choices (e.g. FINAL's) and never scored in the run, so the variant is not chosen on the items it is then scored on.
    Each part keeps at least one item (a run of one item cannot be split)."""
    if not 0 < share < 1:
        raise ValueError(f"the held-out share must be between 0 and 1, got {share}")
    items = list(examples)
    if len(items) < 2:
        raise ValueError(f"cannot hold out a selection split from {len(items)} item(s)")
    order = sorted(range(len(items)), key=lambda i: items[i].id)
    random.Random(seed).shuffle(order)
    k = min(len(items) - 1, max(1, round(share * len(items))))
    held = set(order[:k])
    selection = [e for i, e in enumerate(items) if i in held]
    evaluated = [e for i, e in enumerate(items) if i not in held]
    return selection, evaluated, f"{dataset.spec} held-out {k} of {len(items)} items (seed {seed}; not scored)"


def selection_items(
    dataset: Dataset, examples: Sequence[Example], select_on: Dataset | None = None
) -> tuple[list[Example], str]:
    """The items the choices are made on, and a name for the record (see the module docstring)."""
    from halluscope.bench.builtin_suites import pick_dev_split  # importing it registers the built-in suites

    if select_on is not None:
        return list(select_on.examples), select_on.spec
    dev = pick_dev_split([e.split for e in examples])
    if dev is not None:
        return [e for e in examples if e.split == dev], f"{dataset.spec} split {dev}"
    return list(examples), f"{dataset.spec} (the evaluated items: in-sample)"
