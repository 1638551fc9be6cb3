"""Shared CLI helpers: input reading with clear errors, the model/endpoint flags (one block) -> Config."""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer

from halluscope.config import Config
from halluscope.text.blank import BLANK_DETAIL, is_blank


class InputFileError(Exception):
    pass


DEFAULT_MAX_INPUT_MB = 64.0
"""Largest source or target file the CLI reads, in MiB (``HALLUSCOPE_MAX_INPUT_MB`` raises it): a larger input,
``/dev/zero`` or an endless pipe is refused while it is read, with exit 2, before memory grows."""

_READ_CHUNK = 1 << 20


def max_input_bytes() -> int:
    """The input cap in bytes: ``HALLUSCOPE_MAX_INPUT_MB`` (a positive number of MiB), else 64 MiB."""
    raw = os.environ.get("HALLUSCOPE_MAX_INPUT_MB", "").strip()
    if not raw:
        return int(DEFAULT_MAX_INPUT_MB * 2**20)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputFileError(f"HALLUSCOPE_MAX_INPUT_MB must be a positive number of MiB, got {raw!r}")
    return max(1, int(value * 2**20))


def _read_capped(stream: BinaryIO, what: str, label: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``stream``, read in chunks; refused (``InputFileError``) as soon as there is
    more, and at once when the first chunk holds a NUL byte (``/dev/zero``, a binary file)."""
    data = bytearray()
    while True:
        chunk = stream.read(min(_READ_CHUNK, limit + 1 - len(data)))
        if not chunk:
            return bytes(data)
        if len(data) < 8192 and b"\x00" in chunk[: 8192 - len(data)]:
            raise InputFileError(f"{what} ({label}) looks binary (contains NUL bytes); expected UTF-8 text")
        data += chunk
        if len(data) > limit:
            raise InputFileError(
                f"{what} ({label}) is larger than the {limit / 2**20:.3g} MiB input limit; reading "
                "stopped (set HALLUSCOPE_MAX_INPUT_MB to raise it)"
            )


def read_text_input(path: str, what: str, max_bytes: int | None = None) -> str:
    """Read a UTF-8 text file (or stdin for ``-``) and refuse missing, binary, non-UTF-8, too large (over
    ``max_bytes``, default :func:`max_input_bytes`, checked while reading) or empty input (nothing but whitespace
    and invisible characters: :func:`halluscope.text.blank.is_blank`)."""
    limit = max_input_bytes() if max_bytes is None else max_bytes
    if path == "-":
        label = "standard input"
        data = _read_capped(sys.stdin.buffer, what, label, limit)
    else:
        p = Path(path)
        if not p.exists():
            raise InputFileError(f"{what} file not found: {path}")
        if p.is_dir():
            raise InputFileError(f"{what} is a directory, not a file: {path}")
        label = path
        try:
            with p.open("rb") as stream:
                data = _read_capped(stream, what, label, limit)
        except OSError as exc:
            raise InputFileError(f"{what} ({label}) cannot be read: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} ({label}) is not valid UTF-8: {exc.reason} at byte {exc.start}") from exc
    if is_blank(text):
        raise InputFileError(
            f"{what} ({label}) is empty" if not text.strip() else f"{what} ({label}) is empty ({BLANK_DETAIL})"
        )
    return text


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


def finite_number(value: float | None) -> float | None:
    """Typer callback: refuse NaN and infinities (click's ranges let NaN through: it compares false)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


def check_fraction(value: float | None, flag: str) -> None:
    """Refuse (exit 2) a score bound that is not a finite number in [0, 1] (scores are in [0, 1])."""
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise fail(f"{flag} must be a number from 0 to 1 (scores are in [0, 1]), got {value}")


def check_output_file(path: str | Path | None, flag: str) -> None:
    """Refuse (exit 2) an output path that cannot be written as a file: a directory, or one in a missing folder.
    Checked before any work, so a long run is not lost to a typo."""
    if path is None or str(path) == "":
        return
    p = Path(path)
    if p.is_dir():
        raise fail(f"{flag} {path} is a directory; give a file name (e.g. {p / 'report.html'})")
    if p.exists() and not p.is_file():
        raise fail(f"{flag} {path} exists and is not a regular file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise fail(f"{flag} {path}: the folder {parent} does not exist")


ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        envvar="HALLUSCOPE_MODEL",
        help=(
            "Model: 'embedded' (default, offline), 'embedded:<name|path.gguf>', a model name at --base-url, or a "
            "LiteLLM model ('litellm:<model>', 'anthropic/...'; docs/providers.md)."
        ),
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        envvar="HALLUSCOPE_BASE_URL",
        help="OpenAI-compatible endpoint (also HALLUSCOPE_BASE_URL / OPENAI_BASE_URL).",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="HALLUSCOPE_API_KEY",
        show_default=False,
        help="API key (also HALLUSCOPE_API_KEY / OPENAI_API_KEY).",
    ),
]
BootstrapOpt = Annotated[
    int, typer.Option("--bootstrap", min=0, max=100_000, help="Bootstrap resamples for 95% CIs (0 = none).")
]
# FINAL's matching judge (bench, reproduce): another model, endpoint or key than the evaluated model's
JudgeModelOpt = Annotated[
    str | None,
    typer.Option(
        "--judge-model",
        help=(
            "Model for FINAL's matching judge (default: the evaluated model; a method with no model has no judge "
            "unless one is named); 'none' skips the matching."
        ),
        envvar="HALLUSCOPE_JUDGE_MODEL",
    ),
]
JudgeBaseUrlOpt = Annotated[
    str | None,
    typer.Option("--judge-base-url", help="Endpoint for the judge, if different.", envvar="HALLUSCOPE_JUDGE_BASE_URL"),
]
JudgeApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--judge-api-key",
        help="API key for the judge, if different.",
        envvar="HALLUSCOPE_JUDGE_API_KEY",
        show_default=False,
    ),
]
NoCacheOpt = Annotated[
    bool | None,
    typer.Option(
        "--no-cache/--cache",
        show_default=False,
        help="Do not read or write the response cache (--cache: use it even when HALLUSCOPE_CACHE or the config file "
        "turns it off).",
    ),
]
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        "--concurrency", min=1, max=1024, envvar="HALLUSCOPE_MAX_CONCURRENCY", help="Max LLM requests in flight."
    ),
]
PriceInOpt = Annotated[
    float | None,
    typer.Option(
        "--price-in",
        min=0.0,
        envvar="HALLUSCOPE_PRICE_IN",
        show_default=False,
        help="US dollars per million prompt tokens (default: LiteLLM's price map, where it has the model).",
    ),
]
PriceOutOpt = Annotated[
    float | None,
    typer.Option(
        "--price-out",
        min=0.0,
        envvar="HALLUSCOPE_PRICE_OUT",
        show_default=False,
        help="US dollars per million completion tokens (see --price-in).",
    ),
]
OptionOpt = Annotated[
    list[str] | None, typer.Option("--option", "-o", help="Method option KEY=VALUE (repeatable), e.g. -o style=cot.")
]


OLD_OUT_HELP = "Old spelling of --output (kept so existing scripts work)."


def either(flag: str, value: Any, old_flag: str, old_value: Any, from_command_line: bool = True) -> Any:
    """A flag's value given under its canonical spelling or its old (hidden) one; both on the command line,
    differing, is an error. ``from_command_line=False``: ``value`` came from an environment variable, which the
    old spelling, a flag, overrides."""
    if old_value is not None and not from_command_line:
        return old_value
    if value is not None and old_value is not None and value != old_value:
        raise fail(f"{flag} and {old_flag} (its old spelling) disagree: give {flag} only")
    return value if value is not None else old_value


@dataclass(frozen=True)
class ModelFlags:
    """The model/endpoint flags of a command (see :func:`model_options`), as given; ``config()`` builds its
    Config."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    no_cache: bool | None = None
    concurrency: int | None = None
    price_in: float | None = None
    price_out: float | None = None

    def config(self) -> Config:
        config = make_config(self.model, self.base_url, self.api_key, self.no_cache, self.concurrency)
        if self.price_in is None and self.price_out is None:
            return config
        try:
            return config.with_overrides(price_in=self.price_in, price_out=self.price_out)
        except ValueError as exc:
            raise fail(f"bad configuration: {exc}") from exc


NO_FLAGS = ModelFlags()
"""The default of a command's ``flags`` parameter (replaced by :func:`model_options`): none given."""

MODEL_FLAGS: dict[str, Any] = {
    "model": ModelOpt,
    "base_url": BaseUrlOpt,
    "api_key": ApiKeyOpt,
    "no_cache": NoCacheOpt,
    "concurrency": ConcurrencyOpt,
    "price_in": PriceInOpt,
    "price_out": PriceOutOpt,
}
"""The one declaration of the model/endpoint flags every command that talks to a model takes, in help order."""


def model_options(cache: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a command that talks to a model: its ``flags: ModelFlags = NO_FLAGS`` parameter becomes the
    :data:`MODEL_FLAGS` (``--model``, ``--base-url``, ``--api-key``, ``--no-cache/--cache``, ``--concurrency``),
    shown in ``--help`` where that parameter stands; the command gets them back as one :class:`ModelFlags`.
    ``cache=False`` leaves out ``--no-cache/--cache`` (``serve``: each of its flags has an environment variable;
    its cache follows HALLUSCOPE_CACHE and the config file)."""
    names = [n for n in MODEL_FLAGS if cache or n != "no_cache"]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        at = [p.name for p in params].index("flags")
        kind = (
            inspect.Parameter.KEYWORD_ONLY
            if params[at].kind is inspect.Parameter.KEYWORD_ONLY
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        added = [inspect.Parameter(n, kind, default=None, annotation=MODEL_FLAGS[n]) for n in names]
        params[at : at + 1] = added

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            flags = ModelFlags(**{n: kwargs.pop(n, None) for n in names})
            return command(*args, flags=flags, **kwargs)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        if signature.return_annotation is not inspect.Signature.empty:
            run.__annotations__["return"] = signature.return_annotation
        return run

    return decorate


def make_config(
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    no_cache: bool | None = None,
    concurrency: int | None = None,
) -> Config:
    """The Config of a command: its flags over HALLUSCOPE_* variables over the config file over defaults.
    ``no_cache``: True = --no-cache, False = --cache, None = neither given."""
    try:
        return Config().with_overrides(
            model=model,
            base_url=base_url,
            api_key=api_key,
            max_concurrency=concurrency,
            cache=None if no_cache is None else not no_cache,
        )
    except ValueError as exc:
        raise fail(f"bad configuration: {exc}") from exc


def check_option_pairs(pairs: list[str] | None) -> None:
    """Refuse (exit 2) an ``-o/--option`` value that is not KEY=VALUE; one that looks like a file (``-o out.jsonl``,
    the habit of other tools) is pointed to ``--output``."""
    for pair in pairs or []:
        if "=" in pair:
            continue
        hint = ""
        if "/" in pair or "\\" in pair or Path(pair).suffix:
            hint = f"; -o is --option here: to write to a file, use --output {pair} (-O {pair})"
        raise fail(f"-o/--option expects KEY=VALUE, got {pair!r}{hint}")


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict; values parse as JSON when they can (numbers, true/false), else strings."""
    import json

    check_option_pairs(pairs)
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, value = pair.split("=", 1)
        try:
            out[key.strip().replace("-", "_")] = json.loads(value)
        except ValueError:
            out[key.strip().replace("-", "_")] = value
    return out
