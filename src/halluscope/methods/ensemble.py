"""``ensemble``: one score from several methods, combined by a model fitted on labelled pairs.

The combiner is fitted by ``halluscope fit-combiner`` (:mod:`halluscope.bench.combiner`, scikit-learn) and saved as
one readable JSON file (:class:`CombinerFile`); this module reads it with numpy alone, so a saved combiner runs
where scikit-learn is not installed. ``--method ensemble -o combiner=FILE``:

* the members that need no LLM run first (all of them: they are cheap);
* then each LLM member, in the file's order, runs only while the combiner's decision is still open: the
  combined value (a logit for binary labels, the predicted human score otherwise) of the members that ran plus the
  least and the most that the members not yet run could still add, their features held to the ranges seen in
  training (values outside are clipped to them at prediction too, so the bound holds). When both ends fall on the
  same side of the threshold the decision cannot flip and the remaining members are skipped (``cascade=false``
  runs every member);
* a member that ran but could not score, or was skipped, enters with its training means (the mean-imputation
  the fit used), plus its "unscored" indicator where the fit kept one (only for a member that was unscored on
  some training items);
* the report's findings are those of the members whose score the combiner weighs positively
  (:meth:`CombinerFile.member_weight` > 0); every member's own report is kept in ``details["members"]``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from halluscope.methods import method_class, register_method
from halluscope.methods.base import Method
from halluscope.methods.details import MethodDetails
from halluscope.options import MethodOptions, OptionsError
from halluscope.records import Finding, LLMCall, Report, Usage

FORMAT: Literal["halluscope-combiner/1"] = "halluscope-combiner/1"

MAX_COEFFICIENT = 1e6
"""The largest weight or intercept a combiner file may hold, in absolute value. A fitted linear model on
standardised features has coefficients of order 1 to 100; a weight of 1e300 can only overflow the combined value
(``inf - inf`` is NaN), so such a file is refused when it is read."""

MAX_Z = 1e6
"""The largest standardised value a feature may take within its training range, in absolute value: with
:data:`MAX_COEFFICIENT`, every contribution and the combined value stay finite."""

MAX_FILE_DEPTH = 64
"""How deeply the JSON of a combiner file may nest (a fitted file nests a few levels): deeper nesting is refused
with the path where it goes too deep, before the recursion of the JSON reader or the validation is reached."""


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class CombinerMember(_FileModel):
    """One method the combiner reads: how to run it again exactly as it ran on the training items."""

    name: str
    """The member's name in feature names (``NAME.score``): its method name unless two members share one."""
    method: str
    options: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    """The model it was scored with on the training items (None: no LLM)."""
    uses_llm: bool = False
    prompt_version: str = "none"
    run: str | None = None
    """The bench folder its training scores came from, when they came from one."""


FeatureSource = Literal["score", "subscore", "unscored"]


class CombinerFeature(_FileModel):
    """One input of the linear model: ``z = (clip(x, min, max) - mean) / scale``, contributing ``weight * z``."""

    name: str
    member: str
    source: FeatureSource
    """``score``: the member's score; ``subscore``: ``Report.subscores[key]``; ``unscored``: 1 when the member
    could not score the pair, else 0."""
    key: str | None = None
    """The subscore's key (source ``subscore``)."""
    mean: float
    """Training mean of the observed values: also the value an unscored or skipped member enters with."""
    scale: float = Field(gt=0)
    """Training standard deviation (after mean-imputation)."""
    min: float
    max: float
    """The range seen in training: values are clipped to it, and it bounds what an unrun member can add."""
    weight: float = Field(ge=-MAX_COEFFICIENT, le=MAX_COEFFICIENT)
    """The fitted coefficient on the standardised feature."""
    n_imputed: int = 0
    """Training items on which the value was missing and the mean was used."""

    @model_validator(mode="after")
    def _bounded(self) -> CombinerFeature:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max}): the training range is reversed")
        low, high = self.z_range()
        if not (-MAX_Z <= low <= high <= MAX_Z):
            raise ValueError(
                f"min, max, mean and scale give standardised values in [{low:.3g}, {high:.3g}], beyond +-{MAX_Z:g}"
            )
        return self

    def z_range(self) -> tuple[float, float]:
        a, b = (self.min - self.mean) / self.scale, (self.max - self.mean) / self.scale
        return (min(a, b), max(a, b))


class CombinerFile(_FileModel):
    """The saved combiner (``halluscope fit-combiner -O FILE``): readable JSON, read back with numpy only."""

    format: Literal["halluscope-combiner/1"] = FORMAT
    kind: Literal["binary", "score"]
    """binary: labels 1/0 (score = P(consistent), logistic); score: human scores (score = the predicted human score
    rescaled to [0, 1] by the training range of the human scores)."""
    estimator: dict[str, Any]
    """The scikit-learn estimator's identity: class, parameters, scikit-learn version."""
    members: list[CombinerMember]
    features: list[CombinerFeature]
    dropped_features: dict[str, str] = Field(default_factory=dict)
    """Candidate features left out before fitting, with why (constant on the training items, or a copy of another)."""
    intercept: float = Field(ge=-MAX_COEFFICIENT, le=MAX_COEFFICIENT)
    threshold: float = Field(ge=0.0, le=1.0)
    """The decision threshold on the combined score, and ``threshold_rule`` how it was chosen."""
    threshold_rule: str = ""
    target_range: tuple[float, float] | None = None
    """kind=score: the human scores' training range, mapped to [0, 1]."""
    missing_values: str = ""
    """How missing values were handled (documented in the file itself)."""
    accepted: bool = True
    """False only when written with ``--force`` although it did not beat its best member out of fold."""
    refusal: str | None = None
    cv: dict[str, Any] = Field(default_factory=dict)
    """Cross-validated figures: the combiner's and each member's on the same folds, with bootstrap CIs."""
    transfer: dict[str, Any] | None = None
    """Leave-one-group-out figures (e.g. per SummEdits domain), when asked for."""
    data: dict[str, Any] = Field(default_factory=dict)
    """What it was fitted on: dataset, splits, n, label counts, a hash of the item ids."""
    created: str | None = None
    halluscope_version: str | None = None

    @field_validator("features")
    @classmethod
    def _unique_features(cls, features: list[CombinerFeature]) -> list[CombinerFeature]:
        names = [f.name for f in features]
        if len(set(names)) != len(names):
            raise ValueError("feature names must be unique")
        return features

    @model_validator(mode="after")
    def _target_range_ascending(self) -> CombinerFile:
        if self.target_range is not None:
            lo, hi = self.target_range
            if not (lo < hi and math.isfinite(hi - lo)):
                raise ValueError(
                    f"target_range: the low end ({lo}) must be below the high end ({hi}), a finite distance apart"
                )
        return self

    def model_post_init(self, _context: Any) -> None:
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError("member names must be unique")
        unknown = sorted({f.member for f in self.features} - set(names))
        if unknown:
            raise ValueError(f"features of unknown member(s): {', '.join(unknown)}")
        if self.kind == "score" and self.target_range is None:
            raise ValueError("a kind=score combiner needs target_range")

    # --- prediction (numpy only) ----------------------------------------------------------------------------

    def member_features(self, member: str, report: Report | None) -> dict[str, float]:
        """The standardised features of ``member`` given its report (None: not run). A member not run, or run but
        unscored, enters with its training means (z = 0); its ``unscored`` indicator is 1 when it ran and failed."""
        out: dict[str, float] = {}
        for f in self.features:
            if f.member != member:
                continue
            if f.source == "unscored":
                x: float | None = (1.0 if report.score is None else 0.0) if report is not None else None
            elif report is None or report.score is None:
                x = None
            elif f.source == "score":
                x = report.score
            else:
                x = report.subscores.get(f.key or "")
            if x is None or not math.isfinite(x):
                out[f.name] = 0.0
            else:
                out[f.name] = (float(np.clip(x, f.min, f.max)) - f.mean) / f.scale
        return out

    def contribution(self, member: str, report: Report | None) -> float:
        """What ``member`` adds to the combined value."""
        weights = {f.name: f.weight for f in self.features}
        return sum(weights[k] * z for k, z in self.member_features(member, report).items())

    def bounds(self, member: str) -> tuple[float, float]:
        """The least and the most ``member`` could add, its features within their training ranges."""
        low = high = 0.0
        for f in self.features:
            if f.member == member:
                a, b = f.z_range()
                low += min(f.weight * a, f.weight * b)
                high += max(f.weight * a, f.weight * b)
        return low, high

    def to_score(self, value: float) -> float:
        """The combined value (logit or predicted human score) as a score in [0, 1]."""
        if not math.isfinite(value):
            raise CombinerFileError(f"the combined value is {value}, not a number a score can be read from")
        if self.kind == "binary":
            return float(1.0 / (1.0 + math.exp(-value))) if value > -700 else 0.0
        lo, hi = self.target_range or (0.0, 1.0)
        if not hi > lo:
            raise CombinerFileError(f"target_range: the low end ({lo}) must be below the high end ({hi})")
        return float(np.clip((value - lo) / (hi - lo), 0.0, 1.0))

    def value_threshold(self, threshold: float) -> float:
        """The combined value at which the score equals ``threshold``."""
        if self.kind == "binary":
            if threshold <= 0.0:
                return -math.inf
            if threshold >= 1.0:
                return math.inf
            return math.log(threshold / (1.0 - threshold))
        lo, hi = self.target_range or (0.0, 1.0)
        return lo + threshold * (hi - lo)

    def predict(self, reports: Mapping[str, Report | None]) -> float:
        """The combined score of members' reports (a member absent or None: not run)."""
        value = self.intercept + sum(self.contribution(m.name, reports.get(m.name)) for m in self.members)
        return self.to_score(value)

    def member_weight(self, member: str) -> float:
        """The weight on the member's score (0 when its score is not a feature): positive when a higher score from
        this member makes the combined score higher."""
        return next((f.weight for f in self.features if f.member == member and f.source == "score"), 0.0)

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class CombinerFileError(ValueError):
    """A combiner file that cannot be used; the message says which and why."""


def _too_deep(data: Any, limit: int) -> str | None:
    """Where the first value nested deeper than ``limit`` levels in ``data`` lies (the first three parts of its
    dotted path: the field that nests too deeply), else None.
    Iterative: a hostile file cannot exhaust the stack here."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > limit:
            parts = where.split(".")
            return ".".join(parts[:3]) + (".…" if len(parts) > 3 else "")
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}.{i}" if where else str(i), depth + 1) for i, v in enumerate(value))
    return None


def load_combiner(path: str | Path) -> CombinerFile:
    path = Path(path)
    if not path.is_file():
        raise CombinerFileError(f"combiner file not found: {path} (fit one with `halluscope fit-combiner`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CombinerFileError(f"{path}: not a JSON combiner file ({exc})") from exc
    except RecursionError:
        raise CombinerFileError(f"{path}: the JSON nests too deeply (over {MAX_FILE_DEPTH} levels)") from None
    too_deep = _too_deep(data, MAX_FILE_DEPTH)
    if too_deep is not None:
        raise CombinerFileError(f"{path}: {too_deep or 'file'}: the JSON nests more than {MAX_FILE_DEPTH} levels deep")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CombinerFileError(f'{path}: not a halluscope combiner file (expected "format": "{FORMAT}")')
    try:
        return CombinerFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        raise CombinerFileError(f"{path}: {where}: {first['msg']}") from exc


class EnsembleOptions(MethodOptions):
    combiner: str
    """The combiner file written by ``halluscope fit-combiner``."""
    cascade: bool = True
    """Run an LLM member only while the combiner's decision at the threshold can still change (false: run all)."""
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """The decision threshold on the combined score (default: the one saved in the combiner)."""


class EnsembleDetails(MethodDetails):
    """``Report.details`` of ``ensemble``."""

    combiner: dict[str, Any] | None = None
    """The file (path, digest), its kind, whether it was accepted at fit time, and the data it was fitted on."""
    members: dict[str, dict[str, Any]] | None = None
    """Per member: ``status`` (ran / unscored / skipped / not needed), ``why``, ``uses_llm``, its ``weight`` on the
    score, its ``contribution`` to the combined value, and ``report``: the member's own report (when it ran)."""
    cascade: list[dict[str, Any]] | None = None
    """Each decision point: the members run so far, the combined value's possible range and the threshold."""
    ran: list[str] | None = None
    """The members that ran, in order."""
    skipped: list[str] | None = None
    """The members not run because the decision could no longer change."""
    model_note: str | None = None
    """When an LLM member now runs with another model than the one it was fitted with."""
    nullable: ClassVar[frozenset[str]] = frozenset({"model_note"})


@register_method
class Ensemble(Method):
    name = "ensemble"
    description = (
        "Members' scores combined by a model fitted on labelled pairs (-o combiner=FILE from "
        "`halluscope fit-combiner`); LLM members run only while the decision is open."
    )
    Options = EnsembleOptions
    Details: ClassVar[type[MethodDetails]] = EnsembleDetails
    opts: EnsembleOptions

    def __init__(self, llm: Any = None, config: Any = None, **options: Any):
        super().__init__(llm, config, **options)
        try:
            self.combiner = load_combiner(self.opts.combiner)
        except CombinerFileError as exc:
            raise OptionsError(f"ensemble: {exc}") from None
        self._members: dict[str, Method] = {}
        for m in self.combiner.members:
            if m.method == self.name:
                raise OptionsError("ensemble: a combiner cannot have an ensemble as a member")
            try:
                cls = method_class(m.method)
            except KeyError as exc:
                raise OptionsError(f"ensemble: member {m.name}: {exc.args[0]}") from None
            try:
                # built now (options checked once, prompts resolved); an LLM member gets its client when it first runs
                self._members[m.name] = cls(llm=llm if cls.uses_llm else None, config=self.config, **m.options)
            except (OptionsError, TypeError, ValueError) as exc:
                raise OptionsError(f"ensemble: member {m.name} ({m.method}): {exc}") from None
        # per instance: whether its members, as composed, call an LLM
        self.uses_llm = any(m.uses_llm for m in self._members.values())  # type: ignore[misc]

    @property
    def threshold(self) -> float:
        """The decision threshold on the combined score: ``threshold=`` / the ``threshold`` option, else the one
        saved in the combiner."""
        return self.opts.threshold if self.opts.threshold is not None else self.combiner.threshold

    @property
    def llm_members(self) -> list[str]:
        return [m.name for m in self.combiner.members if self._members[m.name].uses_llm]

    @property
    def model_name(self) -> str | None:
        """The LLM members' model (None when every member is LLM-free); never loads a model just to name it."""
        if not self.uses_llm:
            return None
        return self._llm.name if self._llm is not None else self.config.model

    def _member(self, name: str) -> Method:
        member = self._members[name]
        if member.uses_llm and member._llm is None:  # share one client (and its cache) across members
            member._llm, member._owns_llm = self.llm, False
        return member

    def close(self) -> None:
        for member in self._members.values():
            member.close()
        super().close()

    def used_prompts(self) -> list[Any]:
        return [p for member in self._members.values() for p in member.used_prompts()]

    async def run(self, source: str, target: str) -> Report:
        c = self.combiner
        reports: dict[str, Report] = {}
        status: dict[str, tuple[str, str]] = {}
        cheap = [m.name for m in c.members if m.name not in self.llm_members]

        async def one(name: str) -> None:
            report = await self._member(name).acheck(source, target)
            reports[name] = report
            status[name] = ("ran", "") if report.score is not None else ("unscored", report.unscored_reason or "")

        await asyncio.gather(*(one(name) for name in cheap))
        limit = c.value_threshold(self.threshold)
        steps: list[dict[str, Any]] = []
        pending = list(self.llm_members)
        while pending:
            known = c.intercept + sum(c.contribution(m, reports.get(m)) for m in reports)
            low = known + sum(c.bounds(m)[0] for m in pending)
            high = known + sum(c.bounds(m)[1] for m in pending)
            settled = low >= limit or high < limit
            steps.append(
                {
                    "ran": list(reports),
                    "pending": list(pending),
                    "low": low,
                    "high": high,
                    "threshold": limit,
                    "settled": bool(settled),
                }
            )
            if settled and self.opts.cascade:
                side = "consistent" if low >= limit else "inconsistent"
                for name in pending:
                    status[name] = (
                        "skipped",
                        f"the decision is {side} whatever it scores: the combined value lies "
                        f"in [{low:.3f}, {high:.3f}], all on one side of {limit:.3f}",
                    )
                break
            name = pending.pop(0)
            await one(name)
        ran = [m for m in reports]
        scored = {m: r for m, r in reports.items() if r.score is not None}
        if not scored:
            reasons = "; ".join(f"{m}: {r.unscored_reason}" for m, r in reports.items())
            return Report(
                method=self.name,
                unscored_reason=f"no member could score the pair ({reasons})",
                details=self._details(reports, status, steps, ran),
            )
        try:
            score = c.predict(reports)
        except CombinerFileError as exc:  # unreachable for a file that loaded; never a silent score
            return Report(
                method=self.name,
                unscored_reason=f"the combiner could not score the pair: {exc}",
                details=self._details(reports, status, steps, ran),
            )
        findings: list[Finding] = []
        for m in c.members:
            if m.name in scored and c.member_weight(m.name) > 0:
                findings += reports[m.name].findings
        subscores: dict[str, float | None] = {
            m.name: reports[m.name].score if m.name in reports else None for m in c.members
        }
        return Report(
            method=self.name,
            score=score,
            threshold=self.threshold,
            subscores=subscores,
            findings=findings,
            details=self._details(reports, status, steps, ran),
        )

    def _details(
        self,
        reports: dict[str, Report],
        status: dict[str, tuple[str, str]],
        steps: list[dict[str, Any]],
        ran: list[str],
    ) -> dict[str, Any]:
        c = self.combiner
        members: dict[str, dict[str, Any]] = {}
        for m in c.members:
            state, why = status.get(m.name, ("not needed", "the combiner has no cascade step for it"))
            entry: dict[str, Any] = {
                "status": state,
                "why": why,
                "method": m.method,
                "uses_llm": m.name in self.llm_members,
                "weight": c.member_weight(m.name),
                "contribution": c.contribution(m.name, reports.get(m.name)),
            }
            if m.name in reports:
                entry["report"] = reports[m.name].model_dump(mode="json")
            members[m.name] = entry
        notes = []
        for name in self.llm_members:
            fitted = next(m.model for m in c.members if m.name == name)
            now = self._members[name].model_name if name in reports else None
            if now is not None and fitted is not None and now != fitted:
                notes.append(f"{name} was fitted with {fitted} and ran with {now}")
        return EnsembleDetails.build(
            combiner={
                "path": self.opts.combiner,
                "digest": c.digest(),
                "kind": c.kind,
                "accepted": c.accepted,
                "refusal": c.refusal,
                "data": c.data,
            },
            members=members,
            cascade=steps,
            ran=ran,
            skipped=[m for m, (s, _) in status.items() if s == "skipped"],
            model_note="; ".join(notes) or None,
        )

    async def acheck(self, source: str | Sequence[str], target: str) -> Report:
        return self._with_member_usage(await super().acheck(source, target))

    async def acheck_example(self, example: Any) -> Report:
        return self._with_member_usage(await super().acheck_example(example))

    @staticmethod
    def _with_member_usage(report: Report) -> Report:
        """Usage and calls of the members (each member's check records its own): summed, in order."""
        usage, calls = Usage(), []
        for entry in (report.details.get("members") or {}).values():
            sub = entry.get("report")
            if sub is not None:
                usage = usage + Usage.model_validate(sub["usage"])
                calls += [LLMCall.model_validate(c) for c in sub["calls"]]
        return report.model_copy(update={"usage": usage + report.usage, "calls": report.calls + calls})
