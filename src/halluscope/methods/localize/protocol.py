"""FINAL's dev-split selection protocol (FINAL paper, App. C): what the paper fixes on the development split
before it evaluates, done the same way by the bench and recorded with the run.

1. **Prompt variant.** The paper writes two prompts per style (zero-shot, few-shot, CoT) and keeps, for each
   model, the one with the higher FINAL F1 on the dev split. ``localize -o variant=auto`` (the default) asks
   for that: both variants run on the selection items, the better one is used for the run. The 2-step setups
   use "the CoT variant selected for each model in the E2E experiments", so the selection always runs the
   end-to-end localizer (no filter, no hint) with the run's style; the hint variant is built from the chosen
   wording.

   Criterion: FINAL F1 (the LLM judge's matching, micro over items; ``final_matching`` suite). When there is
   no judge, or neither variant gets a F1 from it, the stand-in is the F1 of flagging inconsistent items (an
   item is flagged when at least one description is given; gold: the label, i.e. a non-empty gold description
   list), recorded as the criterion. Ties go to fewer unscored items, then to variant 1.

2. **2-step threshold.** With ``filter=<method>`` and no ``filter_threshold``, that method scores the
   selection items and the threshold is the one that maximizes the F1 of the binary decision on them
   ("the threshold for TrueTeacher was the one that maximized the F1 score on the binary summary
   classification task using the development set"). Positive class: inconsistent (label 0), predicted when
   ``score < threshold`` - the decision the filter makes. Ties go to the cut that flags the fewest items
   (fewest step-2 calls). When the selection items hold one class only, or the method scored fewer than two
   of them, the method's own default threshold is kept and the reason recorded.

The bench reaches this protocol only through the calibration hook (:mod:`halluscope.methods.calibration`):
``Localize.needs_calibration`` is :func:`needs_selection`, ``Localize.calibrate`` is :func:`resolve_final_protocol`.
The bench picks the selection items the same way for any calibrating method (:mod:`halluscope.bench.calibration`):
a dataset given explicitly (``select_on``, e.g. ``final:dev`` when evaluating a held-out
split, or a user's file), else a seeded share of the run's items held out and not scored (``select_holdout``,
:func:`~halluscope.bench.calibration.holdout_split`), else the run's items of its dev split when the run has a dev
split and another one (see
:func:`halluscope.bench.builtin_suites.pick_dev_split`), else the run's own items - then the choice is made
in-sample, which is optimistic, and the record says so (``overlap``: evaluated items that were also used for
selection).

Every selection run is an ordinary resumable bench run in ``<out>/final_protocol/<selection>/...`` (its own
``items.jsonl``, ``run.json``, ``final_matches.jsonl``), so a re-run costs no LLM call.

API:

* :func:`needs_selection` ``(method) -> bool``;
* :func:`resolve_final_protocol` ``(method, selection, bench: CalibrationBench)
  -> (method with concrete options, FinalProtocol)`` - the whole protocol;
* :func:`select_variant`, :func:`select_filter_threshold` - one step each;
* :func:`choose_variant` ``(candidates) -> (variant, criterion)`` and :func:`best_f1_threshold`
  ``(labels, scores) -> (threshold, f1) | None`` - the pure decisions, testable without any model.

The selection items are the bench's choice (``selection_items`` and ``holdout_split`` in
:mod:`halluscope.bench.calibration`); this module, part of the method, imports nothing from the bench.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from halluscope._optional import require
from halluscope.methods.base import Method
from halluscope.methods.calibration import CalibrationBench
from halluscope.records import Example, Report

PROTOCOL_DIR = "final_protocol"
VariantCriterion = Literal["final_f1", "item_f1", "none"]


class VariantScore(BaseModel):
    """One prompt variant on the selection items."""

    variant: int
    final_f1: float | None = None
    final_precision: float | None = None
    final_recall: float | None = None
    final_f1_all: float | None = None
    """FINAL F1 counting every selection item (unscored by the method or the judge = no match): what ranks."""
    item_f1: float | None = None  # F1 of flagging inconsistent items (no judge needed)
    item_f1_all: float | None = None  # the same counting every item (an unscored one as the wrong decision)
    n: int = 0
    n_unscored: int = 0
    n_judge_unscored: int | None = None
    prompt_version: str = ""
    run_dir: str = ""
    usage: dict[str, int] = Field(default_factory=dict)
    """What this selection run cost (all of it, resumed items included): LLM calls, tokens, cache hits, judge calls."""


class VariantSelection(BaseModel):
    chosen: int
    criterion: VariantCriterion
    """final_f1 (FINAL matching F1, the paper's), item_f1 (stand-in without a judge), none (no signal: variant 1)."""
    style: str
    candidates: list[VariantScore] = Field(default_factory=list)
    note: str = ""


class ThresholdSelection(BaseModel):
    method: str
    threshold: float
    criterion: Literal["dev_f1", "method_default"]
    f1: float | None = None  # F1 of flagging inconsistent items at ``threshold`` on the selection items
    default_threshold: float
    n: int = 0
    n_unscored: int = 0
    reason: str = ""
    run_dir: str = ""
    usage: dict[str, int] = Field(default_factory=dict)


class FinalProtocol(BaseModel):
    """What was chosen on the selection items, recorded in ``results.json`` and ``run.json``."""

    selected_on: str
    n_selection: int
    overlap: int = 0
    """Evaluated items that were also selection items (0 = a clean dev/test separation)."""
    variant: VariantSelection | None = None
    filter_threshold: ThresholdSelection | None = None

    def choices(self) -> dict[str, Any]:
        """The decisions alone (what ``run.json`` pins)."""
        return {
            "selected_on": self.selected_on,
            "n_selection": self.n_selection,
            "variant": self.variant.chosen if self.variant else None,
            "variant_criterion": self.variant.criterion if self.variant else None,
            "filter_threshold": self.filter_threshold.threshold if self.filter_threshold else None,
            "filter_threshold_criterion": self.filter_threshold.criterion if self.filter_threshold else None,
        }

    def markdown(self) -> list[str]:
        """Lines for ``results.md``."""
        return render_protocol(self.model_dump(mode="json"))


# ------------------------------------------------------------------------------------------- pure decisions


def needs_selection(method: Method) -> bool:
    """Whether ``method`` (the localizer) leaves something to the dev split: ``variant=auto``, or a method filter
    and no ``filter_threshold``. A method with neither option leaves nothing."""
    opts = method.opts
    return getattr(opts, "variant", None) == "auto" or _needs_threshold(method)


def _needs_threshold(method: Method) -> bool:
    opts = method.opts
    method_filter = getattr(opts, "filter", None) not in (None, "self", "oracle")
    return method_filter and getattr(opts, "filter_threshold", 0) is None


def _value(score: VariantScore, criterion: str) -> float | None:
    """The value a variant is ranked by: the one counting every item when there is one, so a variant that leaves
    the hard items unscored is never called better on fewer items. A variant that scored no item gives no signal."""
    if score.n and score.n_unscored >= score.n:
        return None
    if criterion == "final_f1":
        return score.final_f1_all if score.final_f1_all is not None else score.final_f1
    return score.item_f1_all if score.item_f1_all is not None else score.item_f1


def _rank(score: VariantScore, criterion: str) -> tuple[float, int, int]:
    value = _value(score, criterion)
    return (value if value is not None else -1.0, -score.n_unscored, -score.variant)


def choose_variant(candidates: Sequence[VariantScore]) -> tuple[int, VariantCriterion]:
    """The variant with the higher FINAL F1 counting every item; when no candidate has one, the higher
    item-flagging F1 (the fallback measure, named as the criterion); when none has that either, variant 1 (criterion
    ``none``). Ties: fewer unscored items, then the lower variant."""
    if not candidates:
        raise ValueError("no variant to choose from")
    for criterion in ("final_f1", "item_f1"):
        if any(_value(c, criterion) is not None for c in candidates):
            best = max(candidates, key=lambda c: _rank(c, criterion))
            return best.variant, criterion  # type: ignore[return-value]
    return min(c.variant for c in candidates), "none"


def best_f1_threshold(labels: Sequence[int], scores: Sequence[float]) -> tuple[float, float] | None:
    """``(t, F1)``: the threshold that maximizes the F1 of the inconsistent class (label 0), predicting
    inconsistent when ``score < t``, over every distinct cut of ``scores``; ties go to the cut that flags the
    fewest items. ``t`` lies halfway between two neighbouring scores (just above the top score when every item
    is flagged). None when the labels hold one class only."""
    require("sklearn", "bench", "FINAL's threshold selection")
    from sklearn.metrics import precision_recall_curve

    y = np.asarray(labels) == 0
    s = np.asarray(scores, dtype=float)
    if len(y) == 0 or y.all() or not y.any():
        return None
    # positive = inconsistent; a lower score is more inconsistent: rank by -score (flagged when -score >= cut)
    precision, recall, cuts = precision_recall_curve(y, -s)
    p, r = precision[:-1], recall[:-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
    best = float(f1.max())
    # cuts increase on -score, i.e. flag fewer items as the index grows: the last best cut flags the fewest
    i = int(np.flatnonzero(f1 >= best - 1e-12)[-1])
    flagged_up_to = -float(cuts[i])  # items with score <= this are flagged
    above = np.unique(s[s > flagged_up_to])
    t = (flagged_up_to + float(above[0])) / 2 if above.size else float(np.nextafter(flagged_up_to, np.inf))
    return t, best


def item_flag_f1(
    examples: Sequence[Example], reports: Sequence[Report], *, counts_every_item: bool = False
) -> float | None:
    """F1 of flagging inconsistent items (label 0; unlabelled: a non-empty gold description list) by "at least
    one description", over scored items with a gold label (``counts_every_item``: over every labelled item, an
    unscored one taken as the wrong decision). None when there is no such item or no inconsistent one."""
    require("sklearn", "bench", "FINAL's F1")
    from sklearn.metrics import f1_score

    gold, pred = [], []
    for e, r in zip(examples, reports):
        label = _gold_label(e)
        if label is None or (r.score is None and not counts_every_item):
            continue
        gold.append(label == 0)
        pred.append(bool(r.findings) if r.score is not None else label != 0)
    if not gold or not any(gold):
        return None
    return float(f1_score(gold, pred, zero_division=0.0))


def _gold_label(example: Example) -> int | None:
    if example.label is not None:
        return example.label
    if example.descriptions is not None:
        return 0 if example.descriptions else 1
    return None


# ------------------------------------------------------------------------------------------- running


def _backend(method: Method) -> Any:
    """The method's LLM client to share with the selection runs (None: let them build their own and report the
    failure per item, as the main run does)."""
    from halluscope.llm import LLMError

    if not method.uses_llm:
        return None
    try:
        return method.llm
    except (LLMError, ValueError):
        return None


def _usage(results: dict[str, Any]) -> dict[str, int]:
    u = results["usage"]
    judge = (results["metrics"].get("final_matching") or {}).get("judge_usage") or {}
    return {
        "calls": u["calls"],
        "tokens": u["prompt_tokens"] + u["completion_tokens"],
        "cache_hits": u["cache_hits"],
        "judge_calls": judge.get("calls", 0),
    }


def _folder(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+]+", "-", name).strip("-")[:80] or "selection"


async def select_variant(
    method: Method, items: list[Example], out_dir: Path, bench: CalibrationBench
) -> VariantSelection:
    """Run the end-to-end localizer with each prompt variant on ``items`` and choose (see the module docstring)."""
    from halluscope.methods import get_method
    from halluscope.methods.localize.prompts import VARIANTS

    style = method.opts.style  # type: ignore[attr-defined]
    candidates: list[VariantScore] = []
    for variant in VARIANTS:
        options = {
            **method.options(),
            "variant": variant,
            "filter": None,
            "hint": False,
            "filter_threshold": None,
            "filter_options": {},
        }
        candidate = get_method(method.name, llm=_backend(method), config=method.config, **options)
        run_dir = out_dir / f"variant-{variant}"
        results, reports = await bench.score(
            candidate, items, bench.selection_name, run_dir, judge=bench.judge, suites=("final_matching",)
        )
        fm = results["metrics"].get("final_matching", {})
        value = (lambda key: (fm.get(key) or {}).get("value")) if fm else (lambda key: None)  # noqa: B023 - used in this iteration only
        candidates.append(
            VariantScore(
                variant=variant,
                final_f1=value("f1"),
                final_precision=value("precision"),
                final_recall=value("recall"),
                final_f1_all=value("f1_all"),
                item_f1=item_flag_f1(items, reports),
                item_f1_all=item_flag_f1(items, reports, counts_every_item=True),
                n=len(items),
                n_unscored=results["n_unscored"],
                n_judge_unscored=fm.get("n_judge_unscored") if fm else None,
                prompt_version=candidate.prompt_version,
                run_dir=str(run_dir),
                usage=_usage(results),
            )
        )
    chosen, criterion = choose_variant(candidates)
    note = {
        "final_f1": "FINAL F1 from the judge's matching (the paper's criterion)",
        "item_f1": "fallback measure: no FINAL F1 (no judge, or no usable judge reply), so the F1 of flagging "
        "inconsistent items (no judge needed) chose the variant",
        "none": "no F1 on the selection items (no judge and no gold labels, or no item scored: unscored "
        + ", ".join(f"{c.n_unscored}/{c.n} with variant {c.variant}" for c in candidates)
        + "): variant 1 kept",
    }[criterion]
    scored = {c.n - c.n_unscored for c in candidates}
    if len(scored) > 1:
        note += (
            "; the variants scored different numbers of items ("
            + ", ".join(f"variant {c.variant}: {c.n - c.n_unscored}/{c.n}" for c in candidates)
            + "), so they were compared on the F1 counting every item (an unscored item as no match)"
        )
    return VariantSelection(chosen=chosen, criterion=criterion, style=style, candidates=candidates, note=note)


async def select_filter_threshold(
    method: Method, items: list[Example], out_dir: Path, bench: CalibrationBench
) -> ThresholdSelection:
    """Score ``items`` with the localizer's filter method and choose its threshold by F1 (module docstring)."""
    from halluscope.methods import get_method

    opts = method.opts
    filt = get_method(
        opts.filter,
        llm=_backend(method),
        config=method.config,  # type: ignore[attr-defined]
        **opts.filter_options,
    )  # type: ignore[attr-defined]
    run_dir = out_dir / f"filter-{_folder(filt.name)}"
    results, reports = await bench.score(filt, items, bench.selection_name, run_dir, judge=None, suites=())
    pairs = [(_gold_label(e), r.score) for e, r in zip(items, reports)]
    usable = [(label, score) for label, score in pairs if label is not None and score is not None]
    base = dict(
        method=filt.name,
        default_threshold=filt.threshold,
        n=len(usable),
        n_unscored=sum(score is None for _, score in pairs),
        run_dir=str(run_dir),
        usage=_usage(results),
    )
    best = best_f1_threshold([lab for lab, _ in usable], [sc for _, sc in usable]) if len(usable) >= 2 else None
    if best is None:
        return ThresholdSelection(
            **base,
            threshold=filt.threshold,
            criterion="method_default",
            reason="the selection items give no threshold (fewer than two scored, labelled "
            "items, or one class only): the method's default threshold",
        )
    threshold, f1 = best
    return ThresholdSelection(
        **base,
        threshold=threshold,
        criterion="dev_f1",
        f1=f1,
        reason="maximizes the F1 of flagging inconsistent items (score < threshold)",
    )


async def resolve_final_protocol(
    method: Method, selection: Sequence[Example], bench: CalibrationBench
) -> tuple[Method, FinalProtocol]:
    """Make every dev-split choice ``method`` leaves open and return a method with concrete options
    (``variant`` 1 or 2, ``filter_threshold`` a number) plus the record; ``Localize.calibrate`` (the bench's
    calibration hook). Each selection run is scored by ``bench.score`` (a bench run below ``bench.out_dir``). A
    method with nothing to choose is returned unchanged with an empty record."""
    from halluscope.methods import get_method

    items = list(selection)
    selection_name = bench.selection_name
    record = FinalProtocol(
        selected_on=selection_name,
        n_selection=len(items),
        overlap=len({e.id for e in items} & set(bench.evaluated_ids)),
    )
    if not needs_selection(method):
        return method, record
    if not items:
        raise ValueError(f"no selection items for the FINAL protocol ({selection_name})")
    base = Path(bench.out_dir) / PROTOCOL_DIR / _folder(selection_name)
    options = method.options()
    if method.opts.variant == "auto":  # type: ignore[attr-defined]
        record.variant = await select_variant(method, items, base, bench)
        options["variant"] = record.variant.chosen
    if _needs_threshold(method):
        record.filter_threshold = await select_filter_threshold(method, items, base, bench)
        options["filter_threshold"] = record.filter_threshold.threshold
    resolved = get_method(method.name, llm=_backend(method), config=method.config, **options)
    return resolved, record


def render_protocol(record: dict[str, Any]) -> list[str]:
    """Markdown lines for ``results.md``."""
    lines = [
        f"**FINAL protocol** (choices made on {record['selected_on']}, {record['n_selection']} items; "
        f"{record.get('overlap', 0)} of them also evaluated):",
        "",
    ]
    variant = record.get("variant")
    if variant:
        scores = "; ".join(
            f"variant {c['variant']}: FINAL F1 {_num(c.get('final_f1_all'))} all items / "
            f"{_num(c['final_f1'])} scored, item F1 {_num(c.get('item_f1_all'))} / {_num(c['item_f1'])}, "
            f"coverage {c['n'] - c['n_unscored']}/{c['n']}, {c['usage'].get('calls', 0)} LLM calls"
            for c in variant["candidates"]
        )
        lines.append(
            f"- prompt variant ({variant['style']}): **{variant['chosen']}** by {criterion_name(variant['criterion'])} "
            f"({scores}). {variant.get('note', '')}"
        )
    thr = record.get("filter_threshold")
    if thr:
        lines.append(
            f"- 2-step filter `{thr['method']}` threshold: **{thr['threshold']:.4g}** ({thr['criterion']}; "
            f"F1 {_num(thr['f1'])} on {thr['n']} items; method default {thr['default_threshold']}; "
            f"{thr['usage'].get('calls', 0)} LLM calls)"
        )
    return lines + [""]


def criterion_name(criterion: str) -> str:
    """What chose the variant, in words (the fallback measure is named as such)."""
    return {
        "final_f1": "FINAL F1 (the paper's criterion)",
        "item_f1": "the fallback measure: F1 of flagging inconsistent items (no FINAL F1)",
        "none": "nothing (no F1 on the selection items: variant 1 kept)",
    }.get(criterion, criterion)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
