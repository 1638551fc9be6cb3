"""Where halluscope's config files are and what each may set.

Two kinds of file, read as layers (the later one wins key by key, ``options`` merged per method):

1. **Your own file**: ``$XDG_CONFIG_HOME/halluscope/config.toml`` (``~/.config/halluscope/config.toml``), or the
   file ``HALLUSCOPE_CONFIG`` names (then it is the only file read). It may set every setting, and
   ``trusted_dirs``: the folders whose project files you allow to set everything too.
2. **The project file** in the working directory: ``halluscope.toml`` (keys at the top level, or in a
   ``[tool.halluscope]`` table as in ``pyproject.toml``), else the ``[tool.halluscope]`` table of
   ``pyproject.toml``. Whoever wrote it (a cloned repository) is not trusted with your key or your files: unless
   its folder is allowed (``trusted_dirs`` in your file, or ``HALLUSCOPE_TRUSTED_DIRS``), its ``cache_path``,
   ``cache_url``, ``prompts_dir``, ``trusted_dirs`` and model file paths (``model = "embedded:PATH"``,
   ``embedded_model = PATH``) are ignored with a warning, and its ``base_url`` is used only together with an
   ``api_key`` from the same file, when nothing else names an endpoint or a key; a ``base_url`` alone (or an
   ``api_key`` alone) is ignored with a warning, so your key never goes to an endpoint only a project file names.

A file nested deeper than :data:`MAX_DEPTH` tables or lists is refused (:class:`ConfigFileError`), as is one that
is not TOML; unknown keys are refused by :class:`halluscope.config.Config`.
"""

from __future__ import annotations

import os
import tomllib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE_ENV = "HALLUSCOPE_CONFIG"
CONFIG_FILE_NAME = "halluscope.toml"
USER_CONFIG_FILE = Path("halluscope") / "config.toml"
TRUSTED_DIRS_ENV = "HALLUSCOPE_TRUSTED_DIRS"
TRUSTED_DIRS_KEY = "trusted_dirs"
MAX_DEPTH = 16
"""Most levels of tables and lists in a config file (the deepest real setting, a list in a method's options
table, is four)."""

USER_ONLY_KEYS = ("cache_path", "cache_url", "prompts_dir", TRUSTED_DIRS_KEY)
"""Settings an untrusted project file may not set: where replies are cached, where prompts are read from, and
which folders are allowed."""
ENDPOINT_KEYS = ("base_url", "api_key")
"""Settings an untrusted project file may set only together, as one pair, and only when nothing above it sets
either."""


class ConfigFileError(ValueError):
    """The config file exists but cannot be read as TOML (or its table is not a table, or it nests too deeply)."""


class UntrustedConfigWarning(UserWarning):
    """A setting of a project file in a folder you did not allow was ignored (the message says which and why)."""


@dataclass(frozen=True)
class ConfigLayer:
    """One config file: its path, its settings table and whether it may set everything."""

    path: Path
    data: dict[str, Any]
    trusted: bool

    @property
    def label(self) -> str:
        """How messages name the file (with its table, for ``pyproject.toml``)."""
        return f"[tool.halluscope] in {self.path}" if self.path.name == "pyproject.toml" else str(self.path)


def user_config_path() -> Path:
    """Your own config file: ``$XDG_CONFIG_HOME/halluscope/config.toml`` or ``~/.config/halluscope/config.toml``."""
    root = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(root) / USER_CONFIG_FILE


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests tables or lists deeper than ``limit`` (stops descending past it)."""
    if not isinstance(value, dict | list):
        return False
    if limit <= 0:
        return True
    items = value.values() if isinstance(value, dict) else value
    return any(_depth_over(item, limit - 1) for item in items)


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; :class:`ConfigFileError` with the path when it is unreadable or nests too deeply."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"cannot read the config file {path}: {exc}") from exc
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigFileError(
            f"cannot read the config file {path}: it nests more than {MAX_DEPTH} levels of tables or lists"
        ) from None
    if _depth_over(data, MAX_DEPTH):
        raise ConfigFileError(f"{path}: it nests more than {MAX_DEPTH} levels of tables or lists")
    return data


def _project_file(cwd: Path) -> tuple[Path, dict[str, Any]] | None:
    """``halluscope.toml`` in ``cwd``, else ``pyproject.toml``'s ``[tool.halluscope]`` table, else None."""
    for path in (cwd / CONFIG_FILE_NAME, cwd / "pyproject.toml"):
        if not path.is_file():
            continue
        data: Any = read_toml(path)
        if path.name == "pyproject.toml":
            data = _tool_table(data)
            if data is None:
                continue  # a pyproject.toml without a [tool.halluscope] table is not a config file
        elif "tool" in data:  # halluscope.toml written as pyproject.toml's table: the same snippet works in both
            table = _tool_table(data)
            if table is None or len(data) > 1:
                raise ConfigFileError(
                    f"{path}: the settings go at the top level or in one [tool.halluscope] table, nothing else"
                )
            data = table
        if not isinstance(data, dict):
            raise ConfigFileError(f"{path}: [tool.halluscope] must be a table")
        return path, data
    return None


def _tool_table(data: dict[str, Any]) -> Any:
    """The ``[tool.halluscope]`` table of a file's data, or None when it has none."""
    tool = data.get("tool", {})
    return tool.get("halluscope") if isinstance(tool, dict) else None


def _user_file() -> tuple[Path, dict[str, Any]] | None:
    """The file ``HALLUSCOPE_CONFIG`` names (it must exist), else your config file when there is one."""
    named = os.environ.get(CONFIG_FILE_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigFileError(f"{CONFIG_FILE_ENV}={named}: no such file")
        return path, read_toml(path)
    path = user_config_path()
    return (path, read_toml(path)) if path.is_file() else None


def _dir_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigFileError(f"{where}: {TRUSTED_DIRS_KEY} must be a list of folders")
    return value


def _same_dir(entry: str, folder: Path) -> bool:
    if entry == "*":
        return True
    try:
        return Path(entry).expanduser().resolve() == folder
    except (OSError, RuntimeError):
        return False


def is_trusted_dir(folder: Path, user_data: dict[str, Any] | None, user_label: str = "your config file") -> bool:
    """Whether ``folder`` is allowed: named (an absolute path, ``~`` expanded, links resolved, or ``*`` for every
    folder) in ``HALLUSCOPE_TRUSTED_DIRS`` (folders separated by ``os.pathsep``) or in ``trusted_dirs`` of your file;
    a relative name is refused (:class:`ConfigFileError`)."""
    named = [(e.strip(), TRUSTED_DIRS_ENV) for e in os.environ.get(TRUSTED_DIRS_ENV, "").split(os.pathsep)]
    if user_data and TRUSTED_DIRS_KEY in user_data:
        named += [(e.strip(), user_label) for e in _dir_list(user_data[TRUSTED_DIRS_KEY], user_label)]
    entries = [entry for entry, _ in named if entry]
    for entry, where in named:
        if entry and entry != "*" and not Path(entry).expanduser().is_absolute():
            raise ConfigFileError(f'{where}: {entry!r} in {TRUSTED_DIRS_KEY} is not an absolute folder (nor "*")')
    resolved = folder.resolve()
    return any(_same_dir(entry, resolved) for entry in entries)


def config_layers(cwd: Path | None = None) -> list[ConfigLayer]:
    """The config files in effect, lowest precedence first: your file, then the project file (with
    ``HALLUSCOPE_CONFIG`` set, the file it names alone). ``trusted_dirs`` is taken out of your file's data."""
    layers: list[ConfigLayer] = []
    user = _user_file()
    if user is not None:
        data = {k: v for k, v in user[1].items() if k != TRUSTED_DIRS_KEY}
        layers.append(ConfigLayer(user[0], data, trusted=True))
    if os.environ.get(CONFIG_FILE_ENV):
        return layers
    project = _project_file(cwd or Path.cwd())
    if project is not None:
        path, data = project
        trusted = is_trusted_dir(path.parent, user[1] if user else None, str(user[0]) if user else "")
        if trusted:  # an allowed project file may set everything but which folders are allowed
            data = {k: v for k, v in data.items() if k != TRUSTED_DIRS_KEY}
        layers.append(ConfigLayer(path, data, trusted=trusted))
    return layers


def _is_model_file(value: Any, prefix: str = "") -> bool:
    """Whether a ``model``/``embedded_model`` value names a model file by path (not a built-in model's name)."""
    if not isinstance(value, str) or not value.startswith(prefix):
        return False
    name = value[len(prefix) :]
    return "/" in name or "\\" in name or name.lower().endswith(".gguf")


def _allow_hint(layer: ConfigLayer) -> str:
    return (
        f"to allow it, add {str(layer.path.parent)!r} to {TRUSTED_DIRS_KEY} in {user_config_path()} "
        f"or to {TRUSTED_DIRS_ENV}"
    )


def untrusted_view(layer: ConfigLayer, higher: Iterable[str]) -> dict[str, Any]:
    """What an untrusted project file may set: its data less the keys it may not set (each ignored with an
    :class:`UntrustedConfigWarning`). ``higher``: the settings given above the files (code, flags, environment)."""
    data = dict(layer.data)
    ignored = [k for k in USER_ONLY_KEYS if k in data]
    if _is_model_file(data.get("model"), "embedded:"):
        ignored.append("model")
    if _is_model_file(data.get("embedded_model")):
        ignored.append("embedded_model")
    for key in ignored:
        del data[key]
    if ignored:
        warnings.warn(
            f"ignored {', '.join(ignored)} in the project file {layer.label}: a project file may not name "
            f"caches, prompt folders, model files or allowed folders ({_allow_hint(layer)})",
            UntrustedConfigWarning,
            stacklevel=2,
        )
    pair = [k for k in ENDPOINT_KEYS if k in data]
    if not pair:
        return data
    given_above = sorted(set(higher) & set(ENDPOINT_KEYS))
    complete = len(pair) == 2 and isinstance(data["api_key"], str) and bool(data["api_key"].strip())
    if complete and not given_above:
        return data
    for key in pair:
        del data[key]
    warnings.warn(
        f"ignored {' and '.join(pair)} in the project file {layer.label}: a project file's base_url is used only "
        "with an api_key from the same file, and only when no other endpoint or key is given, so your key never "
        f"goes to an endpoint a project file names ({_allow_hint(layer)})",
        UntrustedConfigWarning,
        stacklevel=2,
    )
    return data


def _merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``, key by key; the ``options`` tables merged per method."""
    merged = {**low, **high}
    lo, hi = low.get("options"), high.get("options")
    if isinstance(lo, dict) and isinstance(hi, dict):
        options = dict(lo)
        for method, table in hi.items():
            before = options.get(method)
            both = isinstance(before, dict) and isinstance(table, dict)
            options[method] = {**before, **table} if both else table  # type: ignore[dict-item]
        merged["options"] = options
    return merged


def file_settings(higher: Iterable[str] = (), cwd: Path | None = None) -> dict[str, Any]:
    """The settings of every config file in effect, merged, each untrusted file cut to what it may set."""
    higher = set(higher)
    merged: dict[str, Any] = {}
    for layer in config_layers(cwd):
        merged = _merge(merged, layer.data if layer.trusted else untrusted_view(layer, higher))
    return merged


def untrusted_endpoint(cwd: Path | None = None) -> tuple[Path, Any, Any] | None:
    """The untrusted project file's ``(path, base_url, api_key)`` when it sets both, else None."""
    try:
        layers = config_layers(cwd)
    except ConfigFileError:
        return None
    for layer in layers:
        if not layer.trusted and all(k in layer.data for k in ENDPOINT_KEYS):
            return layer.path, layer.data["base_url"], layer.data["api_key"]
    return None


def where_set(key: str, cwd: Path | None = None) -> ConfigLayer | None:
    """The highest config file that sets ``key`` (for messages naming where a setting came from)."""
    try:
        layers = config_layers(cwd)
    except ConfigFileError:
        return None
    return next((layer for layer in reversed(layers) if key in layer.data), None)
