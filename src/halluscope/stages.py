"""Typed stage protocols and the stage registry.

A stage is one small async callable with a name. A claim method is a composition of stages:

    target --Decomposer--> claims --ContextSelector--> per-claim contexts (whole source, or K snippets)
           --Verifier--> verdicts (optionally via an EvidenceFinder) --Aggregator--> score + subscores
           --Localizer--> findings

Every protocol is declared here once; stage implementations live next to the method they come from and
register a *factory* under a name, so a method's stage can be swapped by option (``-o verifier=probe``) and
``halluscope stages`` lists them all. A factory takes the method instance that will use the stage (for its
LLM client, config, resolved prompts and options) and returns the stage.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

from halluscope.records import Claim, Evidence, Finding, Span, StepResult, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.methods.base import Method
    from halluscope.methods.trace import RunTrace


@dataclass(frozen=True)
class Context:
    """What a verifier reads for a claim: the whole source, or one retrieved snippet of it."""

    text: str
    kind: Literal["source", "snippet"] = "source"
    span: Span | None = None  # where ``text`` lies in the source
    rank: int = 0  # 0 = best retrieved snippet
    score: float | None = None  # retrieval score of a snippet
    sentences: tuple[int, ...] = ()  # source sentence indices of a snippet
    trace: RunTrace | None = field(default=None, compare=False, repr=False)
    """The check's trace, for a verifier that records into it (see :mod:`halluscope.methods.trace`); None
    outside a pipeline check."""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "rank": self.rank}
        if self.span is not None:
            out["span"] = self.span.model_dump()
        if self.score is not None:
            out["score"] = round(float(self.score), 6)
        if self.sentences:
            out["sentences"] = list(self.sentences)
        return out


@dataclass
class Selection:
    """The output of a context selector: which path ran and why, and each claim's contexts (best first)."""

    mode: Literal["full", "retrieval"]
    why: str
    contexts: dict[str, list[Context]]  # claim id -> contexts
    details: dict[str, Any] = field(default_factory=dict)

    def with_trace(self, trace: RunTrace) -> Selection:
        """The same selection with every context carrying ``trace`` (the pipeline's, for one check)."""
        contexts = {cid: [replace(c, trace=trace) for c in ctxs] for cid, ctxs in self.contexts.items()}
        return replace(self, contexts=contexts)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "why": self.why, **self.details}
        if self.mode == "retrieval":
            out["snippets"] = {cid: [c.describe() for c in ctxs] for cid, ctxs in self.contexts.items()}
        return out


@dataclass
class Aggregate:
    """An aggregator's output: the score in [0, 1] (None = unscored, with the reason) and sub-scores."""

    score: float | None
    subscores: dict[str, float | None] = field(default_factory=dict)
    unscored_reason: str | None = None


@runtime_checkable
class Decomposer(Protocol):
    """target -> claims, each with the target span(s) it came from."""

    name: str

    async def __call__(self, target: str) -> StepResult[list[Claim]]: ...


@runtime_checkable
class ContextSelector(Protocol):
    """(source, claims) -> the whole source for every claim, or retrieved snippets per claim."""

    name: str

    async def __call__(self, source: str, claims: Sequence[Claim]) -> Selection: ...


@runtime_checkable
class EvidenceFinder(Protocol):
    """(claim, context, source) -> source evidence with exact source spans."""

    name: str

    async def __call__(self, claim: Claim, context: Context, source: str) -> StepResult[list[Evidence]]: ...


@runtime_checkable
class Verifier(Protocol):
    """(claims, one context they share, source) -> one Verdict per claim, in order; a claim that could not be
    judged gets an ``unscored`` verdict with the reason (never a guessed label)."""

    name: str

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]: ...

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """Tokens one call needs besides the context text (prompt wording, claims, reply budget)."""
        ...


GateOutcome = Literal["supported", "unsupported", "contradicted", "uncertain"]


@dataclass
class GateDecision:
    """A gate's call on one claim: settled (``supported`` / ``unsupported`` / ``contradicted``) or
    ``uncertain`` (left for the verifier), with a support score in [0, 1], the reason in words, the source
    window it compared against and the offending characters in the target."""

    claim: Claim
    outcome: GateOutcome
    score: float
    reason: str
    evidence: list[Evidence] = field(default_factory=list)
    target_spans: list[Span] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.outcome != "uncertain"


@runtime_checkable
class Gate(Protocol):
    """(claims, source, target) -> one GateDecision per claim, in order, with no LLM call: the cheap first
    pass of a cascade (settled claims skip the verifier)."""

    name: str

    async def __call__(self, claims: Sequence[Claim], source: str, target: str | None = None) -> list[GateDecision]: ...


@runtime_checkable
class Aggregator(Protocol):
    """verdicts -> score + sub-scores."""

    name: str

    async def __call__(self, verdicts: Sequence[Verdict]) -> Aggregate: ...


@runtime_checkable
class Localizer(Protocol):
    """(target, verdicts) -> located findings (description, target spans, evidence)."""

    name: str

    async def __call__(self, target: str, verdicts: Sequence[Verdict]) -> list[Finding]: ...


PROTOCOLS: dict[str, type] = {
    "decomposer": Decomposer, "context_selector": ContextSelector, "evidence_finder": EvidenceFinder,
    "verifier": Verifier, "aggregator": Aggregator, "localizer": Localizer, "gate": Gate,
}
ProtocolName = Literal["decomposer", "context_selector", "evidence_finder", "verifier", "aggregator",
                       "localizer", "gate", "generator"]


@dataclass(frozen=True)
class StageSpec:
    name: str
    protocol: str
    factory: Callable[..., Any]
    description: str
    argument: str = ""  # what follows "name:" for a stage that takes one (e.g. MODEL), else ""

    @property
    def module(self) -> str:
        return getattr(self.factory, "__module__", "?")


_STAGES: dict[tuple[str, str], StageSpec] = {}
# Modules whose import registers the built-in stages (imported on first lookup, so `import halluscope` stays light).
_BUILTIN_MODULES = (
    "halluscope.methods.pipeline", "halluscope.methods.dove", "halluscope.methods.dcr",
    "halluscope.methods.factscore", "halluscope.methods.probe", "halluscope.methods.localize",
    "halluscope.methods.gate", "halluscope.methods.encoders",
    "halluscope.retrieval", "halluscope.generators.perturb", "halluscope.generators.montage",
    "halluscope.generators.inject",
)
_loaded = False
F = TypeVar("F", bound=Callable[..., Any])


class UnknownStageError(ValueError):
    """No stage of that protocol is registered under that name (the message lists the ones that are)."""


def register_stage(name: str, protocol: ProtocolName = "generator", description: str = "",
                   argument: str = "") -> Callable[[F], F]:
    """Decorator for a stage factory (a class or a function taking the method instance). Sets ``name`` on a
    class and registers it under ``(protocol, name)``. With ``argument`` (e.g. ``"MODEL"``) the stage is
    selected as ``name:VALUE`` and the factory receives VALUE after the method."""

    def deco(factory: F) -> F:
        key = (protocol, name)
        existing = _STAGES.get(key)
        if existing is not None and existing.factory is not factory and (
                existing.factory.__qualname__ != factory.__qualname__ or existing.module != factory.__module__):
            raise ValueError(f"{protocol} stage {name!r} is already registered by {existing.module}")
        if isinstance(factory, type):
            factory.name = name  # type: ignore[attr-defined]
        doc = description or (factory.__doc__ or "").strip().split("\n")[0]
        _STAGES[key] = StageSpec(name, protocol, factory, doc, argument)
        return factory

    return deco


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:  # a module whose optional dependency is missing registers nothing
            continue


def stages(protocol: str | None = None) -> list[StageSpec]:
    """Every registered stage (of one protocol), sorted by protocol and name."""
    _load_builtins()
    return sorted((s for s in _STAGES.values() if protocol is None or s.protocol == protocol),
                  key=lambda s: (s.protocol, s.name))


def stage_spec(protocol: str, name: str) -> StageSpec:
    _load_builtins()
    spec = _STAGES.get((protocol, name))
    if spec is None:
        valid = ", ".join(s.name for s in stages(protocol)) or "none"
        raise UnknownStageError(f"no {protocol} stage named {name!r}; registered: {valid}")
    return spec


def build_stage(protocol: str, name: str, method: "Method", **kwargs: Any) -> Any:
    """Instantiate the named stage for ``method`` and check that it has the protocol's shape. A stage registered
    with ``argument=`` takes one after a colon: ``nli:cross-encoder/nli-deberta-v3-base`` builds the ``nli``
    stage with ``argument="cross-encoder/nli-deberta-v3-base"``."""
    _load_builtins()
    base, colon, argument = name.partition(":")
    parametrised = _STAGES.get((protocol, base)) if colon and (protocol, name) not in _STAGES else None
    if parametrised is not None and parametrised.argument:
        if not argument:
            raise UnknownStageError(f"{protocol} stage {base!r} needs its {parametrised.argument} after a colon")
        stage = parametrised.factory(method, argument, **kwargs)
    else:
        stage = stage_spec(protocol, name).factory(method, **kwargs)
    expected = PROTOCOLS.get(protocol)
    if expected is not None and not isinstance(stage, expected):
        raise TypeError(f"{protocol} stage {name!r} does not implement {expected.__name__}")
    return stage


def describe_stages() -> list[dict[str, str]]:
    return [{"protocol": s.protocol, "name": f"{s.name}:{s.argument}" if s.argument else s.name, "module": s.module,
             "description": s.description} for s in stages()]
