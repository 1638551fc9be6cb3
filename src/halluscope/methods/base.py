"""``Method``: the common shape of every detector: ``check(source, target) -> Report``, plus async and batch."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from halluscope import tracing
from halluscope.config import Config
from halluscope.llm import LLM, LLMError, get_llm, track_calls
from halluscope.llm.client import call_budget
from halluscope.methods.details import FreeDetails, MethodDetails
from halluscope.options import MethodOptions, OptionsError
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Example, Report
from halluscope.sync import run_sync
from halluscope.text.blank import BLANK_DETAIL, is_blank

if TYPE_CHECKING:
    from halluscope.methods.calibration import Calibration, CalibrationBench


class InputError(ValueError):
    """Bad user input (empty or non-text source/target)."""


def validate_pair(source: object, target: object) -> None:
    for name, value in (("source", source), ("target", target)):
        if not isinstance(value, str):
            raise InputError(f"{name} must be a string, got {type(value).__name__}")
        if is_blank(value):
            raise InputError(f"{name} is empty" if not value.strip() else f"{name} is empty ({BLANK_DETAIL})")


def _max_calls_option(method: str, value: object) -> int | None:
    """The ``max_calls`` option (every method takes it): a whole number >= 0, or None when not given."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionsError(
            f"bad option(s) for {method}: max_calls: a whole number of LLM calls >= 0 (0 = no limit), got {value!r}"
        )
    return value


class Method(ABC):
    """Subclasses set ``name``/``description``, declare their options as ``Options`` (a
    :class:`MethodOptions` model) and implement :meth:`run`. Options are constructor keyword arguments,
    validated once into ``self.opts``; :meth:`options` reports them for benchmark records."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    uses_llm: ClassVar[bool] = True
    """Whether the method may call an LLM. An instance may say less: a claim method sets it from the stages it
    built (:meth:`ClaimPipeline.llm_stages`), an ensemble from its members, so ``method.uses_llm`` (not the class's)
    decides whether a model must be built for it."""
    default_threshold: ClassVar[float] = 0.5
    """The threshold of the method's label score (the paper's); see :meth:`default_threshold_for`."""
    probability_threshold: ClassVar[float | None] = None
    """The default threshold when the options ask for a score from the verdicts' probabilities
    (``score=auto|probability``), where the method has such a score: its scale is not the label score's
    (``docs/paper_defaults.md``); see :meth:`default_threshold_for`."""
    prompts: ClassVar[tuple[PromptTemplate, ...]] = ()  # the templates this method renders
    Options: ClassVar[type[MethodOptions]] = MethodOptions
    Details: ClassVar[type[MethodDetails]] = FreeDetails  # the keys its Report.details holds (methods/details.py)

    def __init__(self, llm: LLM | None = None, config: Config | None = None, **options: Any):
        self.config = config or Config()
        self._llm = llm
        self._owns_llm = llm is None  # built here from the config (see ``llm``): closed by ``close``
        self._named_llms: dict[str, LLM] = {}  # clients built by ``named_llm``: closed by ``close``
        self._max_calls_given = _max_calls_option(self.name, options.pop("max_calls", None))
        threshold = None if self.has_threshold_option() else options.pop("threshold", None)
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0
        ):
            raise OptionsError(
                f"{self.name}: threshold must be a number from 0 to 1 (scores are in [0, 1]), got {threshold!r}"
            )
        self._threshold: float | None = None if threshold is None else float(threshold)
        self.opts = self.Options.parse(self.name, options)
        self._resolved: dict[str, PromptTemplate] = {}
        for template in self.prompts:
            self.prompt(template)  # resolve overrides once, now: a missing/broken file fails here, not mid-run

    @classmethod
    def has_threshold_option(cls) -> bool:
        """Whether the method's own options hold ``threshold`` (the gate: the score a claim needs to be supported);
        that option is then the report's threshold too, so the label and the findings never disagree."""
        return "threshold" in cls.Options.model_fields

    @classmethod
    def probability_scored(cls, opts: MethodOptions) -> bool:
        """Whether these options ask for the score from the verdicts' probabilities (``score=auto|probability``;
        a method without the option never does)."""
        return getattr(opts, "score", "label") != "label"

    @classmethod
    def default_threshold_for(cls, opts: MethodOptions) -> float:
        """The one place a method's default threshold is decided: ``probability_threshold`` when ``opts`` ask for a
        probability score and the method has one, else ``default_threshold``. It follows the options only, never
        what a backend returned: a backend without token probabilities (the label score then stands in under
        ``score=auto``, as ``details["score"]`` says) labels the same method at the same threshold as one with."""
        if cls.probability_threshold is not None and cls.probability_scored(opts):
            return cls.probability_threshold
        return cls.default_threshold

    @property
    def threshold(self) -> float:
        """The threshold a report is labelled with: ``threshold=`` given when building the method (or the method's
        own ``threshold`` option), else :meth:`default_threshold_for` its options (``halluscope methods`` lists
        each method's)."""
        if self._threshold is not None:
            return self._threshold
        if self.has_threshold_option():
            return float(self.opts.threshold)  # type: ignore[attr-defined]
        return self.default_threshold_for(self.opts)

    def decide(self, report: Report, threshold: float | None = None) -> Report:
        """The report's threshold and label, decided: at ``threshold`` when one is given (an entry point's
        ``--threshold`` / ``threshold=`` for a ready method), else at :attr:`threshold`. Every entry point labels
        a report through this (the rule itself is :meth:`Report.with_threshold`)."""
        return report.with_threshold(self.threshold if threshold is None else threshold)

    def prompt(self, template: PromptTemplate) -> PromptTemplate:
        """``template`` with the user's override applied (``Config.prompts_dir``), resolved once per instance."""
        resolved = self._resolved.get(template.name)
        if resolved is None:
            resolved = self._resolved[template.name] = apply_overrides(template, self.config.prompts_dir)
        return resolved

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            self._llm = get_llm(self.config)
        return self._llm

    def named_llm(self, model: str) -> LLM:
        """A client for another model at the main model's endpoint (PROBE's judges), built once per name, sharing
        the main client's response cache (keys carry the model's name, so nothing mixes) instead of opening a
        cache connection of its own."""
        client = self._named_llms.get(model)
        if client is None:
            shared = self.llm.cache
            if shared is None:
                client = get_llm(self.config.with_overrides(model=model))
            else:
                client = get_llm(self.config.with_overrides(model=model, cache=False))
                client.cache = shared
            self._named_llms[model] = client
        return client

    @property
    def model_name(self) -> str | None:
        """The model's name; the configured one when the backend could not be built (so reporting an
        unscored Report never raises the same error a second time)."""
        if not self.uses_llm:
            return None
        try:
            return self.llm.name
        except LLMError:
            return self.config.model

    def details_model(self) -> type[MethodDetails]:
        """The model this instance's ``Report.details`` validate against: ``Details`` (a method whose details
        depend on its options, like ``improve`` on its evaluator, overrides this). A subclass defined outside
        halluscope that declares no ``Details`` of its own may write keys its built-in parent does not declare:
        its details are not checked (``FreeDetails``), so a plugin written before details were typed keeps working."""
        for cls in type(self).__mro__:
            if "Details" in vars(cls):
                if (
                    cls is not type(self)
                    and not type(self).__module__.startswith("halluscope.")
                    and cls.__module__.startswith("halluscope.")
                ):
                    return FreeDetails
                break
        return self.Details

    def close(self) -> None:
        """Release the clients this instance built itself (its own LLM client, extra judges' clients) and their
        cache connections; clients passed in belong to the caller. For an instance no one uses any more (a
        server evicting it); harmless to call twice."""
        shared = self._llm.cache if self._llm is not None else None
        for client in self._named_llms.values():
            if client is not self._llm:
                client.close(cache=client.cache is not shared)
        self._named_llms = {}
        if self._owns_llm and self._llm is not None:
            self._llm.close()
            self._llm = None

    @property
    def max_calls(self) -> int:
        """The LLM-call budget of one check: the ``max_calls`` option, else ``Config.max_calls`` (0 = no limit)."""
        return self.config.max_calls if self._max_calls_given is None else self._max_calls_given

    def _with_max_calls(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` plus ``max_calls`` when it was given as an option (records without it stay as they were)."""
        return options if self._max_calls_given is None else {**options, "max_calls": self._max_calls_given}

    def options(self) -> dict[str, Any]:
        """Method-specific settings, recorded with benchmark results."""
        return self._with_max_calls(self.opts.model_dump(mode="json"))

    def used_prompts(self) -> list[PromptTemplate]:
        """The templates this instance sends (overrides applied); subclasses add those of optional stages."""
        return [self.prompt(t) for t in self.prompts]

    @property
    def prompt_version(self) -> str:
        """``name@version#hash`` of every prompt actually sent: a changed override changes it."""
        return ",".join(p.ref() for p in self.used_prompts()) or "none"

    @abstractmethod
    async def run(self, source: str, target: str) -> Report:
        """Score one pair. ``usage``, ``elapsed_s``, ``model`` and ``label`` are filled in by :meth:`acheck`."""

    async def run_example(self, example: Example) -> Report:
        """Score a labelled example. Defaults to :meth:`run`; override to use gold information the harness
        may legitimately pass (e.g. oracle labels for a 2-step localizer)."""
        return await self.run(example.source, example.target)

    def needs_calibration(self) -> bool:
        """Whether this instance leaves choices to development items, to be made by :meth:`calibrate` before a
        benchmark scores it (:mod:`halluscope.methods.calibration`). Default: nothing to choose."""
        return False

    async def calibrate(
        self, dev_items: Sequence[Example], bench: CalibrationBench
    ) -> tuple[Method, Calibration | None]:
        """Make the choices this instance leaves to ``dev_items`` and return a method with concrete options plus
        the record of what was chosen. Called by the bench only when :meth:`needs_calibration` is True; the
        default has nothing to choose."""
        return self, None

    async def acheck(self, source: str | Sequence[str], target: str) -> Report:
        """Check ``target`` against ``source``: one text, or a list of retrieved chunks (joined, with every piece
        of evidence naming its chunk: :mod:`halluscope.contexts`)."""
        from halluscope.contexts import ContextsError, as_source_text, attribute_chunks

        try:
            text, chunks = as_source_text(source)
        except ContextsError as exc:
            raise InputError(str(exc)) from None
        validate_pair(text, target)
        report = await self._accounted(self.run(cast(str, text), target))
        return attribute_chunks(report, chunks, cast(str, text))

    async def acheck_example(self, example: Example) -> Report:
        validate_pair(example.source, example.target)
        return await self._accounted(self.run_example(example))

    async def _accounted(self, work: Awaitable[Report]) -> Report:
        started = time.perf_counter()
        with tracing.check_span(self.name, self.config.model, self.config.otel) as span:
            with track_calls() as log, call_budget(self.max_calls) as budget:
                try:
                    report = await work
                except LLMError as exc:
                    report = Report(method=self.name, unscored_reason=f"LLM error: {exc}")
                if budget.unreachable is not None:  # the first refused connection ends the check, in one line
                    report = Report(method=self.name, unscored_reason=budget.unreachable)
                elif budget.exceeded:  # never scored from the calls made before the budget ran out
                    report = Report(
                        method=self.name,
                        details=report.details,
                        unscored_reason=(
                            f"the check needed more than its budget of {budget.limit} LLM calls and was stopped "
                            f"(max_calls; raise it with the option max_calls or HALLUSCOPE_MAX_CALLS)"
                        ),
                    )
            update: dict[str, Any] = {
                "usage": log.usage,
                "elapsed_s": time.perf_counter() - started,
                "model": self.model_name,
                "calls": list(log.calls),  # every exchange, in order, also when the method failed midway
            }
            self.details_model().check(report.details)  # an undeclared key or a wrong type fails here
            report = report.model_copy(update=update)
            report = self.decide(report)
            from halluscope.text.redact import redact_report

            report = redact_report(report)  # no credential in what a report carries (halluscope.text.redact)
            tracing.record_report(span, report)
        return report

    def check(self, source: str | Sequence[str], target: str) -> Report:
        return run_sync(self.acheck(source, target))  # also inside a running loop (a notebook)

    async def acheck_many(
        self, pairs: Iterable[tuple[str | Sequence[str], str]], *, concurrency: int | None = None
    ) -> list[Report]:
        """Check many pairs concurrently; one failing pair becomes an unscored Report, not a crash."""
        items: Sequence[tuple[str | Sequence[str], str]] = list(pairs)
        sem = asyncio.Semaphore(concurrency or self.config.max_concurrency)

        async def one(source: str | Sequence[str], target: str) -> Report:
            async with sem:
                try:
                    return await self.acheck(source, target)
                except InputError as exc:
                    return Report(method=self.name, model=self.model_name, unscored_reason=f"bad input: {exc}")

        return list(await asyncio.gather(*(one(s, t) for s, t in items)))

    def check_many(
        self, pairs: Iterable[tuple[str | Sequence[str], str]], *, concurrency: int | None = None
    ) -> list[Report]:
        return run_sync(self.acheck_many(pairs, concurrency=concurrency))
