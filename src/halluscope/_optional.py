"""Optional dependencies: a clear error naming the extra to install when one is missing."""

from __future__ import annotations

import importlib

# import name -> (distribution, extra that installs it)
BENCH_ONLY = {"sklearn": "scikit-learn", "matplotlib": "matplotlib", "rouge_score": "rouge-score"}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message says which extra installs it."""


def require(module: str, extra: str = "bench", purpose: str = "") -> None:
    """Raise :class:`MissingExtraError` unless ``module`` imports (call it just before a lazy import)."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        dist = BENCH_ONLY.get(module, module)
        what = f" for {purpose}" if purpose else ""
        raise MissingExtraError(
            f"{dist} is needed{what} but is not installed: pip install 'halluscope[{extra}]'", name=module
        ) from exc
