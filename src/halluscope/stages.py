"""A stage is one small async callable with a name (decomposer, retriever, verifier, sorter, ...).

Methods are short compositions of stages. Stages are registered by name so the CLI and users can list
them and swap one for another with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable


@runtime_checkable
class Stage(Protocol):
    name: str

    async def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


_STAGES: dict[str, Any] = {}
S = TypeVar("S")


def register_stage(name: str) -> Callable[[S], S]:
    """Class decorator: sets ``name`` and registers the stage class under it."""

    def deco(cls: S) -> S:
        if name in _STAGES and _STAGES[name] is not cls:
            raise ValueError(f"stage {name!r} is already registered by {_STAGES[name]!r}")
        cls.name = name  # type: ignore[attr-defined]
        _STAGES[name] = cls
        return cls

    return deco


def stages() -> dict[str, Any]:
    return dict(sorted(_STAGES.items()))
