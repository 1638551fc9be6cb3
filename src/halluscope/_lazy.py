"""Lazy re-exports for a package ``__init__``: the names it imports under ``if TYPE_CHECKING:`` are loaded from
their module when first read, so importing one submodule (a stage's, say) does not import the whole package.

The ``TYPE_CHECKING`` imports are the one list: type checkers read them as usual, and :func:`lazy_exports` reads
the same statements (with :mod:`ast`, once) to know which module each name comes from::

    if TYPE_CHECKING:
        from halluscope.methods.dcr.method import DCR, DcrOptions

    __getattr__ = lazy_exports(__name__, __file__)
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lazy_exports(package: str, init_file: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` loading each name its ``__init__`` (``init_file``) imports under
    ``if TYPE_CHECKING:`` from its module on first access (then kept as a module attribute)."""

    @functools.cache
    def sources() -> dict[str, tuple[str, str]]:
        return type_checking_imports(Path(init_file).read_text(encoding="utf-8"), package)

    def __getattr__(name: str) -> Any:
        found = sources().get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = found
        value = getattr(importlib.import_module(module), attribute)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__


def type_checking_imports(source: str, package: str) -> dict[str, tuple[str, str]]:
    """name -> (module, attribute) of every ``from MODULE import attribute [as name]`` under a module-level
    ``if TYPE_CHECKING:`` in ``source`` (relative modules resolved against ``package``)."""
    found: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom):
                module = statement.module or ""
                if statement.level:
                    anchor = package.split(".")[: len(package.split(".")) - (statement.level - 1)]
                    module = ".".join(anchor + ([module] if module else []))
                for alias in statement.names:
                    found[alias.asname or alias.name] = (module, alias.name)
    return found
