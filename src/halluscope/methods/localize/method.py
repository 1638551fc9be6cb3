"""``Localize``: the method (its options, the 2-step flow and the bench's calibration hook)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from halluscope.methods import method_class, register_method
from halluscope.methods.base import Method
from halluscope.methods.details import MethodDetails
from halluscope.methods.localize.details import LocalizeDetails
from halluscope.methods.localize.prompts import BINARY_PROMPT, LOCALIZE_PROMPTS, Style
from halluscope.methods.localize.stages import (
    BinaryFilter,
    DescriptionLocalizer,
    consistent_probability,
    description_score,
    findings_from_descriptions,
)
from halluscope.options import MethodOptions, ScoreKind
from halluscope.prompts import PromptTemplate
from halluscope.records import Example, Report

if TYPE_CHECKING:
    from halluscope.methods.calibration import Calibration, CalibrationBench


class LocalizeOptions(MethodOptions):
    style: Style = "cot"
    """zero_shot, few_shot (three worked examples) or cot (reasoning, then a marked final answer)."""

    filter: str | None = None
    """2-step variant: self (the same model answers yes/no first), oracle (gold labels, bench only), or a method
    name."""

    hint: bool = False
    """2-step only: tell the localizer the target is known to contain an inconsistency."""

    filter_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """filter=<method>: the score below which the target counts as inconsistent; None: in the bench, the one with the
    best F1 on the dev split (FINAL's protocol), in a single check that method's own threshold."""

    filter_options: dict[str, Any] = Field(default_factory=dict)
    """filter=<method>: options for that method."""

    score: ScoreKind = "auto"
    """With ``filter=self``: probability (the filter's P(consistent), read from the token probabilities of its final
    yes/no), label (``1/(1+n)`` for n descriptions, as without the filter) or auto (probability when the filter gave
    one). Without a self filter no label is read, and the score is ``1/(1+n)``."""

    variant: Literal[1, 2, "auto"] = "auto"
    """Prompt wording: 1 (short) or 2 (explicit criteria), FINAL's two per style; auto: the bench picks the one with the
    higher FINAL F1 on the dev split, per model (a single check uses 1)."""

    @field_validator("variant", mode="before")
    @classmethod
    def _variant_number(cls, value: object) -> object:
        if isinstance(value, str) and value.strip() in ("1", "2"):
            return int(value.strip())
        return value

    @field_validator("filter", mode="before")
    @classmethod
    def _no_filter(cls, value: object) -> object:
        return None if isinstance(value, str) and value.strip().lower() in ("", "none") else value

    @field_validator("filter")
    @classmethod
    def _known_filter(cls, value: str | None) -> str | None:
        if value is None or value in ("self", "oracle"):
            return value
        if value == "localize":
            raise ValueError("localize cannot be its own filter")
        try:
            method_class(value)
        except KeyError as exc:
            raise ValueError(f"filter must be self, oracle or a method name: {exc.args[0]}") from None
        return value

    @model_validator(mode="after")
    def _hint_needs_filter(self) -> LocalizeOptions:
        if self.hint and self.filter is None:
            raise ValueError("hint=True is for the 2-step variant: it needs a filter (self, oracle or a method name)")
        return self


@register_method
class Localize(Method):
    name = "localize"
    description = (
        "End-to-end LLM localization (FINAL): list each inconsistency as a self-contained "
        "description, mapped to target spans; styles zero_shot/few_shot/cot, optional 2-step filter."
    )
    Options = LocalizeOptions
    Details: ClassVar[type[MethodDetails]] = LocalizeDetails
    opts: LocalizeOptions
    prompts = tuple(LOCALIZE_PROMPTS.values()) + (BINARY_PROMPT,)
    default_threshold = 0.75
    probability_threshold = 0.5

    @classmethod
    def probability_scored(cls, opts: MethodOptions) -> bool:
        """A probability score is asked for only with the 2-step filter's own yes/no (``filter=self``)."""
        return super().probability_scored(opts) and getattr(opts, "filter", None) == "self"

    @property
    def variant(self) -> int:
        """The prompt variant this instance sends: ``variant`` when it is 1 or 2; with ``auto`` (resolved by the
        bench on a dev split, see halluscope.methods.localize.protocol) a single check uses variant 1."""
        return 1 if self.opts.variant == "auto" else int(self.opts.variant)

    def needs_calibration(self) -> bool:
        """``variant=auto``, or a method filter without ``filter_threshold``: FINAL fixes those on a dev split."""
        from halluscope.methods.localize.protocol import needs_selection

        return needs_selection(self)

    async def calibrate(
        self, dev_items: Sequence[Example], bench: CalibrationBench
    ) -> tuple[Method, Calibration | None]:
        """FINAL's dev-split protocol (:mod:`halluscope.methods.localize.protocol`): the prompt variant by FINAL F1, the
        2-step filter threshold by F1; returns the localizer with those options fixed and the record."""
        from halluscope.methods.localize.protocol import resolve_final_protocol

        return await resolve_final_protocol(self, dev_items, bench)

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(LOCALIZE_PROMPTS[(self.opts.style, self.opts.hint, self.variant)])]
        return used + ([self.prompt(BINARY_PROMPT)] if self.opts.filter == "self" else [])

    async def run(self, source: str, target: str) -> Report:
        if self.opts.filter == "oracle":
            return Report(
                method=self.name,
                unscored_reason=(
                    "filter=oracle uses gold labels, so it only runs on labelled examples (the bench harness)"
                ),
            )
        if self.opts.filter is None:
            return self.choose_score(await self._localize(source, target, {}), None)
        consistent, info, error = await self._filter_step(source, target)
        if error is not None:
            return Report(
                method=self.name,
                unscored_reason=f"2-step filter failed: {error}",
                details=LocalizeDetails.build(filter=info),
            )
        report = await self._after_filter(source, target, bool(consistent), info)
        return self.choose_score(report, info.get("p_consistent"))

    def options(self) -> dict[str, Any]:
        own = super().options()
        if own.get("score") == "auto":  # recorded only when changed: earlier bench folders keep their identity
            own.pop("score")
        return own

    def choose_score(self, report: Report, p_consistent: float | None) -> Report:
        """The report with the score option applied: the filter's P(consistent) in place of ``1/(1+n)`` when the
        self filter gave one (and ``score`` is not ``label``), recorded in ``details["score"]``."""
        if report.score is None:
            return report
        mode = self.opts.score
        info: dict[str, Any] = {"kind": "label", "requested": mode, "label_score": report.score}
        if mode == "label":
            info["why"] = "score=label: 1/(1+n) for n descriptions"
        elif self.opts.filter != "self":
            info["why"] = "no label is read without filter=self (descriptions only): 1/(1+n) for n descriptions"
        elif p_consistent is None:
            info["why"] = "the filter's reply carries no token log-probabilities at its final answer"
        else:
            info.update(kind="probability", probability_score=p_consistent)
        details = {**report.details, "score": info}
        if info["kind"] != "probability":
            if mode == "probability":
                why = f"score=probability, but {info['why']}"
                return report.model_copy(update={"score": None, "unscored_reason": why, "details": details})
            return report.model_copy(update={"details": details})
        return report.model_copy(
            update={
                "score": p_consistent,
                "subscores": {**report.subscores, "label_score": report.score},
                "details": details,
            }
        )

    async def run_example(self, example: Example) -> Report:
        if self.opts.filter != "oracle":
            return await self.run(example.source, example.target)
        label = example.label
        if label is None and example.descriptions is not None:
            label = 0 if example.descriptions else 1
        if label is None:
            return Report(method=self.name, unscored_reason=f"example {example.id} has no gold label for filter=oracle")
        info = {"kind": "oracle", "consistent": label == 1}
        return await self._after_filter(example.source, example.target, label == 1, info)

    async def _after_filter(self, source: str, target: str, consistent: bool, info: dict[str, Any]) -> Report:
        if consistent:
            return Report(
                method=self.name,
                score=1.0,
                subscores={"descriptions": 0.0},
                details=LocalizeDetails.build(filter=info, localized=False, descriptions=[]),
            )
        return await self._localize(source, target, LocalizeDetails.build(filter=info))

    async def _filter_step(self, source: str, target: str) -> tuple[bool | None, dict[str, Any], str | None]:
        if self.opts.filter == "self":
            step = await BinaryFilter(self.llm, self.prompt)(source, target)
            info: dict[str, Any] = {"kind": "self", "consistent": step.value}
            if step.value is not None and (p := consistent_probability(step)) is not None:
                info["p_consistent"] = p
            return step.value, info, step.error
        from halluscope.methods import get_method

        if self.opts.filter is None:
            raise ValueError("localize: no filter method is set")
        method = get_method(self.opts.filter, llm=self.llm, config=self.config, **self.opts.filter_options)
        # run() (not acheck): the filter's calls land in this check's call log, so in this report's calls
        try:
            report = await method.run(source, target)
        finally:
            method.close()  # built for this check: e.g. probe judges' clients go with it
        threshold = self.opts.filter_threshold if self.opts.filter_threshold is not None else method.threshold
        info = {
            "kind": "method",
            "method": self.opts.filter,
            "score": report.score,
            "threshold": threshold,
            "consistent": None if report.score is None else report.score >= threshold,
        }
        if report.score is None:
            return None, info, f"{self.opts.filter} could not score: {report.unscored_reason}"
        return report.score >= threshold, info, None

    async def _localize(self, source: str, target: str, details: dict[str, Any]) -> Report:
        step = await DescriptionLocalizer(self.llm, self.opts.style, self.opts.hint, self.variant, self.prompt)(
            source, target
        )
        if step.value is None:
            return Report(
                method=self.name, unscored_reason=f"localization reply unusable: {step.error}", details=details
            )
        descriptions: list[str] = step.value
        findings = findings_from_descriptions(descriptions, target)
        details = {
            **details,
            **LocalizeDetails.build(localized=True, descriptions=descriptions, prompt_variant=self.variant),
        }
        if self.opts.variant == "auto":
            details.update(
                LocalizeDetails.build(
                    prompt_variant_note="variant=auto is chosen on a dev split by the bench; a single check uses 1"
                )
            )
        return Report(
            method=self.name,
            score=description_score(len(descriptions)),
            subscores={
                "descriptions": float(len(descriptions)),
                "located": float(sum(bool(f.target_spans) for f in findings)),
            },
            findings=findings,
            details=details,
        )
