"""The method registry. Built-in methods are imported lazily by name; third-party methods register with
:func:`register_method`, or are found through the ``halluscope.methods`` entry point group
(:mod:`halluscope.plugins`)."""

from __future__ import annotations

import importlib
from typing import Any

from halluscope.methods.base import InputError, Method
from halluscope.options import MethodOptions, OptionsError
from halluscope.stages import add_stage_modules

__all__ = [
    "InputError",
    "Method",
    "MethodOptions",
    "OptionsError",
    "get_method",
    "list_methods",
    "method_class",
    "register_method",
]

# name -> "module:Class". Lazy so `import halluscope` stays light.
_BUILTIN: dict[str, str] = {
    "dove": "halluscope.methods.dove:Dove",
    "geval": "halluscope.methods.geval:GEval",
    "rouge": "halluscope.methods.rouge:Rouge",
    "dcr": "halluscope.methods.dcr:DCR",
    "improve": "halluscope.methods.improve:Improve",
    "localize": "halluscope.methods.localize:Localize",
    "factscore": "halluscope.methods.factscore:FactScore",
    "probe": "halluscope.methods.probe:Probe",
    "embed": "halluscope.methods.embed:Embed",
    "gate": "halluscope.methods.gate:GateMethod",
    "ensemble": "halluscope.methods.ensemble:Ensemble",
}
_REGISTERED: dict[str, type[Method]] = {}

# The modules whose import registers the built-in stages: the shared ones (halluscope.stages, by kind) and the
# methods' own. halluscope's ``halluscope.stages`` entry points (pyproject.toml) name the same modules; naming them
# here too lets a source checkout whose installed metadata is older find them (tests/test_layers.py checks both
# lists agree). The stage registry itself imports no method.
BUILTIN_STAGE_MODULES = (
    "halluscope.stages.decomposers",
    "halluscope.stages.context",
    "halluscope.stages.verdicts",
    "halluscope.methods.dove",
    "halluscope.methods.dcr",
    "halluscope.methods.factscore",
    "halluscope.methods.probe",
    "halluscope.methods.gate",
    "halluscope.methods.encoders",
    "halluscope.methods.verdict_first",
)
add_stage_modules(*BUILTIN_STAGE_MODULES)


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator / function to make a Method available by ``cls.name`` everywhere (CLI, bench)."""
    existing = _REGISTERED.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(f"method {cls.name!r} is already registered by {existing.__module__}.{existing.__name__}")
    _REGISTERED[cls.name] = cls
    return cls


def _load_plugins() -> None:
    """Register the Method classes of the ``halluscope.methods`` entry points (once per process); one that is
    not a Method subclass, or that would shadow a built-in, is skipped with a warning."""
    from halluscope.plugins import load_entry_points, warn_broken

    for ep, obj in load_entry_points("halluscope.methods"):
        if not (isinstance(obj, type) and issubclass(obj, Method)):
            warn_broken(ep, f"{obj!r} is not a halluscope Method subclass")
        elif getattr(obj, "name", None) in _BUILTIN:
            warn_broken(ep, f"method {obj.name!r} is a built-in")
        elif _REGISTERED.get(obj.name) is not obj:
            try:
                register_method(obj)
            except ValueError as exc:
                warn_broken(ep, exc)


def method_class(name: str) -> type[Method]:
    _load_plugins()
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise KeyError(f"unknown method {name!r}; available: {', '.join(list_methods())}")
    module, cls_name = _BUILTIN[name].split(":")
    cls: type[Method] = getattr(importlib.import_module(module), cls_name)
    return cls


def get_method(name: str, **kwargs: Any) -> Method:
    """An instance of the named method; ``kwargs`` go to its constructor (``llm=``, ``config=``, options).
    Bad options raise :class:`OptionsError` listing the valid ones."""
    cls = method_class(name)
    from halluscope.config import Config

    config = kwargs.get("config")
    if config is None:
        config = Config()
        if cls.uses_llm or "config" in kwargs:
            kwargs["config"] = config
    defaults: dict[str, Any] = {}
    if config.threshold is not None:
        defaults["threshold"] = config.threshold
    defaults.update(config.options.get(name, {}))  # the config file's options for this method, under explicit ones
    reserved = {"llm", "config"}
    from_file = {k for k in config.options.get(name, {}) if k not in kwargs}
    kwargs = {**{k: v for k, v in defaults.items() if k not in reserved}, **kwargs}
    if from_file:
        try:
            return cls(**kwargs)
        except OptionsError as exc:
            from halluscope.config_files import where_set

            found = where_set("options")
            where = f" in {found.path}" if found else ""
            raise OptionsError(
                f"{exc} (the config file's [options.{name}]{where} sets: {', '.join(sorted(from_file))})"
            ) from None
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a method that still takes explicit keyword arguments
        if "unexpected keyword argument" in str(exc):
            valid = ", ".join(cls.Options.model_fields) or "none"
            raise OptionsError(f"{exc}. Valid options: {valid}") from None
        raise


def list_methods() -> list[str]:
    _load_plugins()
    return sorted(set(_BUILTIN) | set(_REGISTERED))
