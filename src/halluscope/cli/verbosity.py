"""``-v/--verbose``, ``-q/--quiet`` and ``--log-level`` on every command: how much halluscope logs on standard
error. Added to each command by :func:`verbosity_options` (the command's own parameters stay as they are)."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Annotated, Any

import typer

LEVELS = ("debug", "info", "warning", "error", "critical")

VerboseOpt = Annotated[
    int,
    typer.Option(
        "--verbose", "-v", count=True, help="Log more on standard error: -v info, -vv debug.", show_default=False
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Log only errors on standard error.")]
LogLevelOpt = Annotated[
    str | None,
    typer.Option(
        "--log-level",
        envvar="HALLUSCOPE_LOG_LEVEL",
        help="debug, info, warning (default), error or critical.",
        show_default=False,
    ),
]


def chosen_level(verbose: int, quiet: bool, log_level: str | None) -> str | None:
    """The level the flags ask for (None: none given); contradictory flags are a usage error."""
    if verbose and quiet:
        raise typer.BadParameter("-v/--verbose and -q/--quiet contradict each other: give one")
    if log_level is not None and log_level.strip().lower() not in LEVELS:
        raise typer.BadParameter(f"--log-level must be one of {', '.join(LEVELS)}, got {log_level!r}")
    if verbose:
        return "debug" if verbose > 1 else "info"
    if quiet:
        return "error"
    return log_level.strip().lower() if log_level else None


def apply_level(level: str) -> None:
    """Log halluscope's messages at ``level`` and above on standard error, one line each."""
    logger = logging.getLogger("halluscope")
    logger.setLevel(level.upper())
    if not any(getattr(h, "_halluscope_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler()  # standard error
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._halluscope_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.propagate = False


def verbosity_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with ``-v/--verbose``, ``-q/--quiet`` and (unless it has its own) ``--log-level`` added at the
    end of its options. A command with a ``log_level`` parameter of its own (``serve``) gets -v/-q as that level."""
    signature = inspect.signature(command, eval_str=True)
    params = list(signature.parameters.values())
    own_level = "log_level" in signature.parameters
    added: dict[str, tuple[Any, Any]] = {"verbose": (VerboseOpt, 0), "quiet": (QuietOpt, False)}
    if not own_level:
        added["log_level"] = (LogLevelOpt, None)
    kind = inspect.Parameter.KEYWORD_ONLY
    params += [inspect.Parameter(n, kind, default=d, annotation=a) for n, (a, d) in added.items()]

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        verbose, quiet = kwargs.pop("verbose", 0), kwargs.pop("quiet", False)
        log_level = kwargs.get("log_level") if own_level else kwargs.pop("log_level", None)
        if own_level:
            level = chosen_level(verbose, quiet, None)
            if level is not None:
                kwargs["log_level"] = level
        else:
            level = chosen_level(verbose, quiet, log_level)
            if level is not None:
                apply_level(level)
        return command(*args, **kwargs)

    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    if signature.return_annotation is not inspect.Signature.empty:
        run.__annotations__["return"] = signature.return_annotation
    return run
