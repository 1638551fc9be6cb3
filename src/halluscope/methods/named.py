"""``build_method``: the one way a name (or nothing) becomes a method to run, for every entry point that takes a
method by name (``halluscope.check``, ``evaluate``, the pytest plugin, the LangChain and LlamaIndex adapters)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import halluscope.methods as registry
from halluscope.config import Config, resolve_method
from halluscope.methods.base import Method


def build_method(
    method: str | Method | None,
    *,
    model: str | None = None,
    config: Config | None = None,
    llm: Any = None,
    options: Mapping[str, Any] | None = None,
) -> Method:
    """The named method built with these settings: ``config`` (default: ``Config()``, the environment and config
    file) with ``model`` over it, the LLM client ``llm`` (else built from the config when the method calls one)
    and the method's ``options``. No name: the config's method, else the default method with its default options
    (:func:`halluscope.config.resolve_method`). A :class:`Method` instance is returned as it is, and then takes no
    other argument (a TypeError)."""
    if isinstance(method, Method):
        if model is not None or config is not None or llm is not None or options:
            raise TypeError("pass model, config, llm and options when naming a method, not with a Method instance")
        return method
    config = config or Config()
    if model is not None:
        config = config.with_overrides(model=model)
    name, resolved = resolve_method(method or config.method, dict(options or {}))
    return registry.get_method(name, llm=llm, config=config, **resolved)  # looked up when called (a test's seam)
