"""The stage registry, and every stage protocol (declared in :mod:`halluscope.stages.protocols`, importable here).

A stage is one small async callable with a name. A claim method is a composition of stages:

    target --Decomposer--> claims --ContextSelector--> per-claim contexts (whole source, or K snippets)
           --Verifier--> verdicts (optionally via an EvidenceFinder) --Aggregator--> score + subscores
           --Localizer--> findings (FActScore's through a Deduplicator; DoveScore's aggregator orders events
           with a Sorter)

Every protocol is declared once (:mod:`halluscope.stages.protocols`, typed on the neutral
:class:`~halluscope.stages.protocols.PipelineRun` and :class:`~halluscope.stages.trace.RunTrace`). The stages
every claim method shares live in this package, one module per kind (:mod:`~halluscope.stages.decomposers`,
:mod:`~halluscope.stages.context`, :mod:`~halluscope.stages.verifiers`, :mod:`~halluscope.stages.verdicts`); a
method's own stages live in its folder. Each registers its class under a name here, so a method's stage can be
swapped by option (``-o verifier=probe``) and ``halluscope stages`` lists them all with their options.

The registry imports no method. The one list of the built-in stages is halluscope's own ``halluscope.stages``
entry points (``pyproject.toml``: ``"KIND.NAME" = "module:Class"``, one line per stage), read once without
importing anything (:func:`halluscope.plugins.own_entry_points`). A lookup imports only the module of the stage it
names; :func:`stages` (the full listing) imports every listed module, and no other method module.

A stage never reads its host method. It is built by :func:`build_stage` from

* ``model``: the LLM client it calls (``None`` for a stage that calls no LLM);
* ``options``: an instance of the stage class's own ``Options`` model (a :class:`StageOptions`: unknown keys
  refused, ranges checked), validated from a dict by :func:`build_stage`;
* the explicit collaborators its constructor names as keyword arguments, among: ``prompts`` (a
  :data:`PromptResolver` applying the user's prompt overrides), ``named_llm`` (a client for another model at
  the same endpoint, e.g. PROBE's judges), ``fits`` (whether a source fits the verifier's context window).
  Collaborators a constructor does not name are not passed to it.

Third-party stages are found through the same ``halluscope.stages`` entry point group (see :mod:`halluscope.plugins`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from halluscope.options import OptionsError, StageOptions
from halluscope.stages.protocols import (
    PROTOCOLS,
    Aggregate,
    Aggregator,
    Context,
    ContextSelector,
    Decomposer,
    Deduplicator,
    EventOrder,
    EvidenceFinder,
    Gate,
    GateDecision,
    GateOutcome,
    Localizer,
    PipelineRun,
    PromptResolver,
    ProtocolName,
    Selection,
    Sorter,
    Verifier,
    same_prompt,
)
from halluscope.stages.trace import RunTrace, bind_trace

__all__ = [
    "Context",
    "Selection",
    "Aggregate",
    "Decomposer",
    "ContextSelector",
    "EvidenceFinder",
    "Verifier",
    "Aggregator",
    "Localizer",
    "Deduplicator",
    "Sorter",
    "Gate",
    "GateDecision",
    "StageOptions",
    "StageSpec",
    "UnknownStageError",
    "register_stage",
    "build_stage",
    "stage_options",
    "stage_spec",
    "stages",
    "describe_stages",
    "same_prompt",
    "PROTOCOLS",
    "GateOutcome",
    "PromptResolver",
    "ProtocolName",
    "PipelineRun",
    "EventOrder",
    "RunTrace",
    "bind_trace",
]


@dataclass(frozen=True)
class StageSpec:
    """A registered stage: its kind (protocol), name, class and one line of description. ``argument`` (e.g.
    ``MODEL``) means the stage is also selected as ``name:VALUE``, VALUE going to its option ``argument_option``."""

    name: str
    protocol: str
    factory: Callable[..., Any]
    description: str
    argument: str = ""
    argument_option: str = ""

    @property
    def module(self) -> str:
        return getattr(self.factory, "__module__", "?")

    @property
    def options_model(self) -> type[StageOptions]:
        model = getattr(self.factory, "Options", None)
        return model if isinstance(model, type) and issubclass(model, StageOptions) else StageOptions

    @property
    def label(self) -> str:
        """How the stage is named on the command line (``nli:MODEL`` for one that takes an argument)."""
        return f"{self.name}:{self.argument}" if self.argument else self.name


_STAGES: dict[tuple[str, str], StageSpec] = {}
_imported: set[str] = set()  # built-in entry points ("module:Class") imported, each once (also when it failed)
F = TypeVar("F", bound=Callable[..., Any])


class UnknownStageError(OptionsError):
    """No stage of that protocol is registered under that name (the message lists the ones that are); an
    :class:`OptionsError`, since stages are chosen by option."""


def register_stage(
    name: str, protocol: ProtocolName, description: str = "", argument: str = "", argument_option: str = ""
) -> Callable[[F], F]:
    """Class decorator registering a stage under ``(protocol, name)`` and setting its ``name``; ``protocol`` is
    the stage's kind, one of :data:`PROTOCOLS` (anything else is a ValueError). The class is
    built as ``cls(model, options, **collaborators)`` (or through its ``from_options`` classmethod when it has
    one), ``options`` an instance of its ``Options`` model (:class:`StageOptions` when it declares none). With
    ``argument`` (e.g. ``"MODEL"``) the stage is also selected as ``name:VALUE``: VALUE becomes the option
    named ``argument_option``."""

    if protocol not in PROTOCOLS:
        raise ValueError(f"stage {name!r}: {protocol!r} is no stage kind; kinds: {', '.join(PROTOCOLS)}")

    def deco(factory: F) -> F:
        key = (protocol, name)
        declared = _builtin_stages().get(key)
        if declared is not None and declared != f"{factory.__module__}:{factory.__qualname__}":
            raise ValueError(f"{protocol} stage {name!r} is a built-in stage of halluscope ({declared})")
        existing = _STAGES.get(key)
        if (
            existing is not None
            and existing.factory is not factory
            and (existing.factory.__qualname__ != factory.__qualname__ or existing.module != factory.__module__)
        ):
            raise ValueError(f"{protocol} stage {name!r} is already registered by {existing.module}")
        if argument and argument_option not in getattr(getattr(factory, "Options", None), "model_fields", {}):
            raise ValueError(
                f"{protocol} stage {name!r}: argument_option {argument_option!r} is not one of its options"
            )
        if isinstance(factory, type):
            factory.name = name  # type: ignore[attr-defined]
        doc = description or (factory.__doc__ or "").strip().split("\n")[0]
        _STAGES[key] = StageSpec(name, protocol, factory, doc, argument, argument_option)
        return factory

    return deco


@functools.cache
def _builtin_stages() -> dict[tuple[str, str], str]:
    """(kind, name) -> ``module:Class`` of every built-in stage: halluscope's own ``halluscope.stages`` entry
    points, named ``KIND.NAME``. An entry point of another form (a bare module, as older metadata declared them)
    is kept under the kind ``""`` and imported with the full listing."""
    from halluscope.plugins import own_entry_points

    found: dict[tuple[str, str], str] = {}
    for entry, target in own_entry_points("halluscope.stages").items():
        kind, dot, name = entry.partition(".")
        found[(kind, name) if dot and kind in PROTOCOLS else ("", entry)] = target
    return found


def _import_builtin(key: tuple[str, str]) -> None:
    """Import the module of the built-in stage ``key`` (once); a module whose optional dependency is missing
    registers nothing. A listed stage its module does not register is a ValueError (the list is wrong)."""
    target = _builtin_stages()[key]
    module, _, attribute = target.partition(":")
    if target in _imported:
        return
    _imported.add(target)
    try:
        importlib.import_module(module)
    except ImportError:
        return
    spec = _STAGES.get(key)
    if attribute and (spec is None or f"{spec.module}:{spec.factory.__qualname__}" != target):
        raise ValueError(f"the halluscope.stages entry point {key[0]}.{key[1]} = {target!r} registers no such stage")


def _load_plugins() -> None:
    from halluscope.plugins import load_entry_points

    load_entry_points("halluscope.stages")  # once per process: importing a plugin's module registers its stages


def stages(protocol: str | None = None) -> list[StageSpec]:
    """Every registered stage (of one protocol), sorted by protocol and name: imports the module of every built-in
    stage listed (of that protocol) and the plugins."""
    for key in _builtin_stages():
        if protocol is None or key[0] in (protocol, ""):
            _import_builtin(key)
    _load_plugins()
    return sorted(
        (s for s in _STAGES.values() if protocol is None or s.protocol == protocol), key=lambda s: (s.protocol, s.name)
    )


def _registered(protocol: str, name: str) -> StageSpec | None:
    """The stage registered as ``(protocol, name)``, importing its built-in module when it is listed, else the
    plugins; None when there is none."""
    key = (protocol, name)
    if key not in _STAGES and key in _builtin_stages():
        _import_builtin(key)
    if key not in _STAGES:
        for other in [k for k in _builtin_stages() if not k[0]]:  # bare modules (older metadata)
            _import_builtin(other)
        _load_plugins()
    return _STAGES.get(key)


def stage_spec(protocol: str, name: str) -> StageSpec:
    """The stage registered as ``name`` (or ``name:VALUE`` for one that takes an argument)."""
    return _resolve(protocol, name)[0]


def _resolve(protocol: str, name: str) -> tuple[StageSpec, str | None]:
    """The spec and the argument after the colon (None when there is none)."""
    spec = _registered(protocol, name)
    if spec is not None:
        return spec, None
    base, colon, argument = name.partition(":")
    spec = _registered(protocol, base)
    if spec is not None and spec.argument:
        if colon and not argument:
            raise UnknownStageError(f"{protocol} stage {base!r} needs its {spec.argument} after the colon")
        return spec, argument if colon else None
    valid = ", ".join(s.label for s in stages(protocol)) or "none"
    what = (
        f"{protocol} stage {base!r} takes no argument after a colon"
        if spec is not None
        else (f"no {protocol} stage named {name!r}")
    )
    raise UnknownStageError(f"{what}; registered: {valid}")


def stage_options(protocol: str, name: str, options: Mapping[str, Any] | StageOptions | None = None) -> StageOptions:
    """``options`` validated by the named stage's own options model (unknown keys refused, ranges checked):
    :class:`OptionsError` names the stage and lists its options. The argument of ``name:VALUE`` fills the
    stage's ``argument_option`` (an explicit value of that option beside it is refused)."""
    spec, argument = _resolve(protocol, name)
    model = spec.options_model
    if isinstance(options, StageOptions):
        if not isinstance(options, model):
            raise OptionsError(f"{protocol} stage {spec.name!r} takes {model.__name__}, not {type(options).__name__}")
        if argument is not None and getattr(options, spec.argument_option) != argument:
            raise OptionsError(
                f"{protocol} stage {name!r}: its options name another {spec.argument_option} "
                f"({getattr(options, spec.argument_option)!r})"
            )
        return options
    values = dict(options or {})
    if argument is not None:
        if spec.argument_option in values:
            raise OptionsError(
                f"{protocol} stage {name!r}: {spec.argument_option} is given twice (after the colon and as an option)"
            )
        values[spec.argument_option] = argument
    return cast(StageOptions, model.parse(f"{protocol} stage {spec.name!r}", values))


def build_stage(
    protocol: str,
    name: str,
    model: Any = None,
    options: Mapping[str, Any] | StageOptions | None = None,
    **collaborators: Any,
) -> Any:
    """Build the named stage from its model (the LLM client, or None), its options (a dict validated by the
    stage's own ``Options``, or an instance of it) and the collaborators its constructor names (``prompts``,
    ``named_llm``, ``fits``, ...; the others are not passed). Checks the protocol's shape.

    ``nli:cross-encoder/nli-deberta-v3-base`` builds the ``nli`` stage with the option ``checkpoint`` set to
    ``cross-encoder/nli-deberta-v3-base`` (the stage's ``argument_option``)."""
    spec, _ = _resolve(protocol, name)
    opts = stage_options(protocol, name, options)
    factory = getattr(spec.factory, "from_options", spec.factory)
    stage = factory(model, opts, **_accepted(factory, collaborators))
    expected = PROTOCOLS.get(protocol)
    if expected is not None and not isinstance(stage, expected):
        raise TypeError(f"{protocol} stage {name!r} does not implement {expected.__name__}")
    return stage


def _accepted(factory: Callable[..., Any], collaborators: dict[str, Any]) -> dict[str, Any]:
    """The collaborators ``factory`` names as parameters (all of them when it takes ``**kwargs``)."""
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(collaborators)
    return {k: v for k, v in collaborators.items() if k in params}


def describe_stages() -> list[dict[str, Any]]:
    """Every stage with its options (name, type, default, doc each), for ``halluscope stages`` and ``serve``."""
    return [
        {
            "protocol": s.protocol,
            "name": s.label,
            "module": s.module,
            "description": s.description,
            "options": s.options_model.option_rows(),
        }
        for s in stages()
    ]
