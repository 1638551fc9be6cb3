"""halluscope: find, locate, explain and fix hallucinations in generated text against its source.

    >>> import halluscope
    >>> report = halluscope.check(source, target, method="rouge")
    >>> report.score, report.findings
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from halluscope._version import package_version as _package_version

from halluscope.config import DEFAULT_METHOD, Config
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Usage, Verdict
from halluscope.sync import run_sync

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.methods.base import Method

__all__ = [
    "Claim", "Config", "Evidence", "Finding", "LLMCall", "Report", "Span", "Usage", "Verdict",
    "acheck", "acheck_many", "aevaluate", "check", "check_many", "evaluate", "DEFAULT_METHOD", "__version__",
]
__version__ = _package_version()


def _method(method: str | None, model: str | None, config: Config | None, llm: Any, options: dict[str, Any]
            ) -> Method:
    from halluscope.config import resolve_method
    from halluscope.methods import get_method

    method, options = resolve_method(method, options)

    config = config or Config()
    if model is not None:
        config = config.with_overrides(model=model)
    return get_method(method, llm=llm, config=config, **options)


async def acheck(source: str, target: str, method: str | None = None, model: str | None = None, *,
                 config: Config | None = None, llm: Any = None, **options: Any) -> Report:
    return await _method(method, model, config, llm, options).acheck(source, target)


def check(source: str, target: str, method: str | None = None, model: str | None = None, *,
          config: Config | None = None, llm: Any = None, **options: Any) -> Report:
    """Check ``target`` against ``source`` with the named method (see ``halluscope methods``)."""
    return run_sync(acheck(source, target, method, model, config=config, llm=llm, **options))


async def acheck_many(pairs: Iterable[tuple[str, str]], method: str | None = None, model: str | None = None, *,
                      config: Config | None = None, llm: Any = None, **options: Any) -> list[Report]:
    return await _method(method, model, config, llm, options).acheck_many(pairs)


def check_many(pairs: Iterable[tuple[str, str]], method: str | None = None, model: str | None = None, *,
               config: Config | None = None, llm: Any = None, **options: Any) -> list[Report]:
    return run_sync(acheck_many(pairs, method, model, config=config, llm=llm, **options))


def evaluate(data: Any, source: str = "source", target: str = "target", method: Any = None, model: str | None = None,
             **kwargs: Any) -> Any:
    """Check every row of a DataFrame (or of a list of dicts) -> a pandas DataFrame with score, label,
    unscored reason, findings and usage per row; also inside a running event loop. See :mod:`halluscope.tabular`
    (needs ``pip install 'halluscope[dataframe]'``)."""
    from halluscope.tabular import evaluate as _evaluate

    return _evaluate(data, source, target, method, model, **kwargs)


async def aevaluate(data: Any, source: str = "source", target: str = "target", method: Any = None,
                    model: str | None = None, **kwargs: Any) -> Any:
    """The async form of :func:`evaluate`."""
    from halluscope.tabular import aevaluate as _aevaluate

    return await _aevaluate(data, source, target, method, model, **kwargs)
