"""Third-party methods, stages, suites and datasets, found through entry points.

A distribution declares them in its metadata (``pyproject.toml``)::

    [project.entry-points."halluscope.stages"]
    strict = "my_package.strict_verifier"          # a module whose import registers its stages

    [project.entry-points."halluscope.methods"]
    mine = "my_package.method:MyMethod"            # a Method subclass (registered under its ``name``)

    [project.entry-points."halluscope.suites"]
    mine = "my_package.suites"                     # a module whose import registers suites (@register_suite)

    [project.entry-points."halluscope.datasets"]
    mine = "my_package.data:load_mine"             # a loader (root: Path, subset: str | None) -> Dataset

Each group is loaded once per process, the first time its registry is consulted. An entry point that fails to
load (a missing module, an import error, the wrong kind of object) is skipped with a warning naming it and the
error; it never stops halluscope from starting.
"""

from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUPS = ("halluscope.methods", "halluscope.stages", "halluscope.suites", "halluscope.datasets")


class PluginWarning(UserWarning):
    """A third-party entry point could not be loaded (it is skipped)."""


_loaded: dict[str, list[tuple[EntryPoint, Any]]] = {}


def load_entry_points(group: str) -> list[tuple[EntryPoint, Any]]:
    """Load every entry point of ``group`` once and return (entry point, loaded object) for those that loaded;
    each failure is a :class:`PluginWarning`."""
    if group not in GROUPS:
        raise ValueError(f"unknown entry point group {group!r}; groups: {', '.join(GROUPS)}")
    if group in _loaded:
        return _loaded[group]
    _loaded[group] = found = []
    for ep in entry_points(group=group):
        try:
            found.append((ep, ep.load()))
        except Exception as exc:  # a broken plugin of any kind must not stop halluscope
            warn_broken(ep, exc)
    return found


def warn_broken(ep: EntryPoint, exc: BaseException | str) -> None:
    dist = getattr(getattr(ep, "dist", None), "name", None)
    where = f" (from {dist})" if dist else ""
    warnings.warn(
        f"skipping the {ep.group} entry point {ep.name!r} = {ep.value!r}{where}: {exc}", PluginWarning, stacklevel=3
    )


def reset() -> None:
    """Forget what was loaded, so the next lookup reads the entry points again (for tests)."""
    _loaded.clear()
