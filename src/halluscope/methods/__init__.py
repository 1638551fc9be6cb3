"""The method registry. Built-in methods are halluscope's own ``halluscope.methods`` entry points (``pyproject.toml``,
the one list of them), each imported when it is named; third-party methods register with :func:`register_method`,
or are found through the same entry point group (:mod:`halluscope.plugins`)."""

from __future__ import annotations

import importlib
from typing import Any

from halluscope.methods.base import InputError, Method
from halluscope.options import MethodOptions, OptionsError
from halluscope.plugins import own_entry_points

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

_REGISTERED: dict[str, type[Method]] = {}


def _builtin() -> dict[str, str]:
    """name -> "module:Class" of the built-in methods (read once; imported only when named)."""
    return own_entry_points("halluscope.methods")


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
        elif getattr(obj, "name", None) in _builtin():
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
    if name not in _builtin():
        raise KeyError(f"unknown method {name!r}; available: {', '.join(list_methods())}")
    module, cls_name = _builtin()[name].split(":")
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
    return sorted(set(_builtin()) | set(_REGISTERED))
