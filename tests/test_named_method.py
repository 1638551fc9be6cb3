"""``build_method``: the one lookup from a method name (or none) to a method, shared by the Python API, the table
functions, the pytest plugin and the framework adapters."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from halluscope.config import DEFAULT_METHOD, DEFAULT_METHOD_OPTIONS, Config
from halluscope.methods import get_method
from halluscope.methods.named import build_method

SRC = Path(__file__).resolve().parents[1] / "src" / "halluscope"


def test_a_name_builds_that_method_with_the_options():
    method = build_method("rouge", options={"threshold": 0.3})
    assert method.name == "rouge" and method.threshold == 0.3


def test_no_name_is_the_configs_method_else_the_default_with_its_options():
    assert build_method(None, config=Config(method="rouge")).name == "rouge"
    method = build_method(None, llm=object(), config=Config())
    assert method.name == DEFAULT_METHOD
    for key, value in DEFAULT_METHOD_OPTIONS.items():
        assert getattr(method.opts, key) == value


def test_a_method_instance_is_used_as_it_is_and_takes_no_settings():
    rouge = get_method("rouge")
    assert build_method(rouge) is rouge
    with pytest.raises(TypeError, match="naming a method"):
        build_method(rouge, options={"threshold": 0.3})


def test_the_entry_points_share_the_one_lookup():
    """No module but methods/named.py turns a missing name into the default method itself, except where the
    resolved name is shown or cached rather than only built (``halluscope methods``, the service's method cache);
    ``halluscope check`` calls build_method."""
    callers = sorted(
        {
            str(path.relative_to(SRC))
            for path in SRC.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "resolve_method"
        }
    )
    assert callers == ["cli/main.py", "methods/named.py", "server/service.py"]
