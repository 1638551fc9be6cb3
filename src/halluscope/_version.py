"""The package version, read once from the installed distribution's metadata (pyproject.toml is the one
place it is written)."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "halluscope"


@lru_cache(maxsize=1)
def package_version() -> str:
    """``halluscope``'s version as installed; ``0+unknown`` when running from a source tree never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
