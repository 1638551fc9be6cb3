"""halluscope's pytest plugin (registered through the ``pytest11`` entry point when halluscope is installed).

Adds the ``assert_grounded`` fixture - :func:`halluscope.testing.assert_grounded` with the run's defaults - and
options to set those defaults for a whole run (command line, or ``[pytest]`` ini keys):

    --halluscope-method NAME      (ini halluscope_method)     default: halluscope.DEFAULT_METHOD
    --halluscope-model MODEL      (ini halluscope_model)      default: the embedded offline model
    --halluscope-threshold FLOAT  (ini halluscope_threshold)  default: the method's own

    def test_answer_is_grounded(assert_grounded):
        assert_grounded(context, answer)

Replies are kept in halluscope's response cache (``HALLUSCOPE_CACHE_PATH``), so a re-run of unchanged tests
makes no model call. Arguments given in a call win over the run's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from halluscope.records import Report
from halluscope.testing import assert_grounded as _assert_grounded

_OPTIONS = (
    ("method", "Method for assert_grounded (default: halluscope's default method).", str),
    ("model", "Model for assert_grounded (default: the embedded offline model).", str),
    ("threshold", "Lowest passing score for assert_grounded (default: the method's own).", float),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("halluscope", "halluscope grounding checks")
    for name, help_text, _ in _OPTIONS:
        group.addoption(f"--halluscope-{name}", dest=f"halluscope_{name}", default=None, help=help_text)
        parser.addini(f"halluscope_{name}", help_text, default=None)


def _defaults(config: pytest.Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, _, kind in _OPTIONS:
        value = config.getoption(f"halluscope_{name}") or config.getini(f"halluscope_{name}")
        if value not in (None, ""):
            try:
                out[name] = kind(value)
            except ValueError as exc:
                raise pytest.UsageError(f"halluscope_{name}: {value!r} is not a {kind.__name__}") from exc
    return out


@pytest.fixture(name="assert_grounded")
def assert_grounded_fixture(pytestconfig: pytest.Config) -> Callable[..., Report]:
    """``assert_grounded(source, answer, method=..., threshold=..., model=..., **kwargs) -> Report`` with the
    run's --halluscope-* defaults."""
    defaults = _defaults(pytestconfig)

    def check(
        source: str,
        answer: str,
        method: Any = None,
        threshold: float | None = None,
        model: str | None = None,
        **kwargs: Any,
    ) -> Report:
        __tracebackhide__ = True
        from halluscope.methods.base import Method

        if model is None and not isinstance(method, Method):  # a ready Method brings its own model
            model = defaults.get("model")
        return _assert_grounded(
            source,
            answer,
            method if method is not None else defaults.get("method"),
            threshold if threshold is not None else defaults.get("threshold"),
            model,
            **kwargs,
        )

    return check
