"""Which models and checkers a request may make the service load: only those its operator allowed.

A request's options can name models: PROBE's ``judges`` (model names at the endpoint), an encoder checker
(``verifier=nli:<hub id or path>``, ``gate=encoder:<path>``, ``verifier.checkpoint=...``), an embedding model
(``embedding_model``), a fitted combiner file (``ensemble``'s ``combiner``). Each is compared with the operator's list
(``halluscope serve --allow-model NAME``, ``HALLUSCOPE_SERVER_ALLOW_MODEL``) plus the server's own model and the default
embedding model; any other is refused (403) before anything is built or loaded. ``--allow-model '*'`` allows every
name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["ModelNotAllowed", "model_references", "refuse_unlisted"]

_MODEL_KEYS = frozenset({"model", "judges", "judge", "judge_model", "embedding_model", "checkpoint", "combiner"})
"""Option names (the part after the last dot) whose string values name a model (``combiner``: the file of a fitted
combiner that ``ensemble`` reads from the server's disk)."""
_MAX_WALK = 10_000


class ModelNotAllowed(PermissionError):
    """A request names a model or checker the operator did not allow."""


def _argument_stages() -> frozenset[str]:
    """Names of the registered stages selected as ``name:VALUE`` (``nli``, ``seq2seq``, ``tagger``, ``encoder`` and
    any plugin's): their VALUE names a model to load."""
    from halluscope.stages import stages

    return frozenset(spec.name for spec in stages() if spec.argument)


def model_references(options: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(option, model)`` for every model or checker that ``options`` names (nested option dicts included, such
    as ``improve``'s ``evaluator_options``); a checker is given as ``stage:VALUE``."""
    argument_stages = _argument_stages()
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in options.items()]
    seen = 0
    while stack:
        key, value = stack.pop()
        seen += 1
        if seen > _MAX_WALK:
            raise ModelNotAllowed("the options are too deeply nested to check which models they name")
        last = key.rsplit(".", 1)[-1].lower()
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((key, v) for v in value)
        elif isinstance(value, str):
            stage, colon, argument = value.partition(":")
            if colon and stage in argument_stages and argument:
                yield key, value
            elif last in _MODEL_KEYS or last.endswith("_model"):
                for name in value.split(",") if last == "judges" else [value]:  # judges: also "a,b" (CLI form)
                    if name.strip():
                        yield key, name.strip()


def refuse_unlisted(options: dict[str, Any], allowed: Iterable[str]) -> None:
    """Raise :class:`ModelNotAllowed` for the first model ``options`` names that is not in ``allowed`` (a checker
    ``stage:VALUE`` is allowed by its full name or by VALUE alone)."""
    allowed = frozenset(a for a in allowed if a)
    if "*" in allowed:
        return
    for key, name in model_references(options):
        _, _, argument = name.partition(":")
        if name in allowed or (argument and argument in allowed):
            continue
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise ModelNotAllowed(
            f"option {key}: the model {shown!r} is not one this server's operator allowed "
            "(halluscope serve --allow-model NAME)"
        )
