"""halluscope: find, locate, explain and fix hallucinations in generated text against its source.

    >>> import halluscope
    >>> report = halluscope.check(source, target, method="rouge")
    >>> report.score, report.findings
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from halluscope._version import package_version as _package_version

from halluscope.config import Config
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Usage, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.methods.base import Method

__all__ = [
    "Claim", "Config", "Evidence", "Finding", "LLMCall", "Report", "Span", "Usage", "Verdict",
    "acheck", "acheck_many", "check", "check_many", "DEFAULT_METHOD", "__version__",
]
__version__ = _package_version()
DEFAULT_METHOD = "geval"


def _method(method: str, model: str | None, config: Config | None, llm: Any, options: dict[str, Any]) -> Method:
    from halluscope.methods import get_method

    config = config or Config()
    if model is not None:
        config = config.with_overrides(model=model)
    return get_method(method, llm=llm, config=config, **options)


async def acheck(source: str, target: str, method: str = DEFAULT_METHOD, model: str | None = None, *,
                 config: Config | None = None, llm: Any = None, **options: Any) -> Report:
    return await _method(method, model, config, llm, options).acheck(source, target)


def check(source: str, target: str, method: str = DEFAULT_METHOD, model: str | None = None, *,
          config: Config | None = None, llm: Any = None, **options: Any) -> Report:
    """Check ``target`` against ``source`` with the named method (see ``halluscope methods``)."""
    return asyncio.run(acheck(source, target, method, model, config=config, llm=llm, **options))


async def acheck_many(pairs: Iterable[tuple[str, str]], method: str = DEFAULT_METHOD, model: str | None = None, *,
                      config: Config | None = None, llm: Any = None, **options: Any) -> list[Report]:
    return await _method(method, model, config, llm, options).acheck_many(pairs)


def check_many(pairs: Iterable[tuple[str, str]], method: str = DEFAULT_METHOD, model: str | None = None, *,
               config: Config | None = None, llm: Any = None, **options: Any) -> list[Report]:
    return asyncio.run(acheck_many(pairs, method, model, config=config, llm=llm, **options))
