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

halluscope declares its own built-in methods and stages in the same groups (``pyproject.toml``, one line each):
that table is the one list of them. :func:`own_entry_points` reads it, once, without importing anything, for the
registries to import a built-in only when it is asked for; :func:`load_entry_points` loads the other
distributions' entry points only.
"""

from __future__ import annotations

import functools
import tomllib
import warnings
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import Any

GROUPS = ("halluscope.methods", "halluscope.stages", "halluscope.suites", "halluscope.datasets")
OWN = "halluscope"  # the distribution whose entry points are the built-ins
SOURCE_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # beside src/ in a source checkout


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
        if getattr(ep.dist, "name", None) == OWN:
            continue  # the built-ins: their registries import each one when it is asked for (own_entry_points)
        try:
            found.append((ep, ep.load()))
        except Exception as exc:  # a broken plugin of any kind must not stop halluscope
            warn_broken(ep, exc)
    return found


@functools.cache
def own_entry_points(group: str) -> dict[str, str]:
    """halluscope's own entry points of ``group`` (name -> ``module:attribute``), read once and importing nothing:
    from the ``pyproject.toml`` of the source checkout this package runs from (the editable install's metadata
    is built from it, and may be older), else from the installed distribution's metadata."""
    if group not in GROUPS:
        raise ValueError(f"unknown entry point group {group!r}; groups: {', '.join(GROUPS)}")
    declared = source_entry_points(SOURCE_PYPROJECT)
    if declared is not None:
        return dict(declared.get(group, {}))
    try:
        own = distribution(OWN).entry_points
    except PackageNotFoundError:
        return {}
    return {ep.name: ep.value for ep in own if ep.group == group}


def source_entry_points(pyproject: Path) -> dict[str, dict[str, str]] | None:
    """The entry point tables of halluscope's ``pyproject.toml`` at ``pyproject`` (group -> name -> value); None
    when there is no such file or it is another project's."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if project.get("name") != OWN:
        return None
    tables = project.get("entry-points", {})
    return {group: {str(k): str(v) for k, v in table.items()} for group, table in tables.items()}


def warn_broken(ep: EntryPoint, exc: BaseException | str) -> None:
    dist = getattr(getattr(ep, "dist", None), "name", None)
    where = f" (from {dist})" if dist else ""
    warnings.warn(
        f"skipping the {ep.group} entry point {ep.name!r} = {ep.value!r}{where}: {exc}", PluginWarning, stacklevel=3
    )


def reset() -> None:
    """Forget what was loaded, so the next lookup reads the entry points again (for tests)."""
    _loaded.clear()
    own_entry_points.cache_clear()
