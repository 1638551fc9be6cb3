"""Optional dependencies: a clear error naming the extra to install when one is missing."""

from __future__ import annotations

import importlib.util

# import name -> (distribution, extra that installs it)
BENCH_ONLY = {"sklearn": "scikit-learn", "matplotlib": "matplotlib", "rouge_score": "rouge-score"}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message says which extra installs it."""


def require(module: str, extra: str = "bench", purpose: str = "") -> None:
    """Raise :class:`MissingExtraError` unless ``module`` can be imported (call before importing it lazily)."""
    if importlib.util.find_spec(module) is None:
        dist = BENCH_ONLY.get(module, module)
        what = f" for {purpose}" if purpose else ""
        raise MissingExtraError(f"{dist} is needed{what} but is not installed: pip install 'halluscope[{extra}]'",
                                name=module)
