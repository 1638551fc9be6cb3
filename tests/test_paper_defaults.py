"""docs/paper_defaults.md names only settings that exist: every ``key=value`` is an option of some
method (and the value one it accepts), every ``--flag`` a CLI option, every ``HALLUSCOPE_*`` variable read by
the code."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from halluscope.methods import list_methods, method_class

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "paper_defaults.md").read_text(encoding="utf-8")
SOURCE_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "halluscope").rglob("*.py"))
CLI_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "halluscope" / "cli").glob("*.py"))

# reproduce builder options (--build KEY=VALUE) live in the builders, not in a method's options
BUILD_OPTIONS = {"gold_evidence", "gold_samples", "gold_consensus", "level", "max_events", "difficulties",
                 "facts_from", "weave", "complexities", "max_sentences", "perturbations", "unit", "insert_with"}


def _spans() -> list[str]:
    return re.findall(r"`([^`]+)`", DOC)


def _settings() -> list[tuple[str, str]]:
    found = []
    for span in _spans():
        for key, value in re.findall(r"(?:^|\s)([a-z_]+)=([^\s,;)]+)", span):
            if key != "key":  # the doc's "-o key=value" explains the syntax
                found.append((key, value))
    return found


def _fields() -> dict[str, list[typing.Any]]:
    fields: dict[str, list[typing.Any]] = {}
    for name in list_methods():
        for key, info in method_class(name).Options.model_fields.items():
            fields.setdefault(key, []).append(info.annotation)
    return fields


def _accepts(annotation: typing.Any, value: str) -> bool:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return value in {str(a) for a in args}
    if args:  # Optional[...] / unions: any member accepting it; "null" is None (parse_options reads it so)
        if value == "null" and type(None) in args:
            return True
        return any(_accepts(a, value) for a in args if a is not type(None))
    if annotation is bool:
        return value in ("true", "false")
    if annotation is int:
        return value.isdigit() or value == "N"
    if annotation is float:
        return re.fullmatch(r"[0-9.]+", value) is not None
    return True  # free-form (names, lists)


def test_the_doc_names_settings():
    assert len(_settings()) > 30  # the parser finds them (a broken regex would make the next test vacuous)


@pytest.mark.parametrize("key,value", sorted(set(_settings())))
def test_every_key_value_named_is_an_option_with_an_accepted_value(key, value):
    fields = _fields()
    if key in BUILD_OPTIONS and key not in fields:
        assert f'"{key}"' in SOURCE_TEXT
        return
    assert key in fields, f"paper_defaults.md names {key}={value}, which no method has"
    if value.startswith("<"):
        return  # a placeholder such as <method>
    assert any(_accepts(a, value) for a in fields[key]), f"{key}={value} is not a value {key} accepts"


def test_every_flag_and_variable_named_exists():
    flags = sorted({f for span in _spans() for f in re.findall(r"(--[a-z][a-z-]+)", span)})
    assert flags, "no --flag found in the doc"
    missing = [f for f in flags if f'"{f}"' not in CLI_TEXT  # typer names a flag after its parameter otherwise
               and not re.search(rf"\b{f[2:].replace('-', '_')}: Annotated", CLI_TEXT)]
    assert not missing, f"paper_defaults.md names CLI flags that do not exist: {missing}"
    variables = sorted(set(re.findall(r"HALLUSCOPE_[A-Z_]+", DOC)))
    from halluscope.config import Config

    read = [v for v in variables if f'"{v}"' in SOURCE_TEXT  # read by name, or a Config field (HALLUSCOPE_<FIELD>)
            or v.removeprefix("HALLUSCOPE_").lower() in Config.model_fields]
    assert variables and read == variables, f"unknown variables: {sorted(set(variables) - set(read))}"


def test_no_row_is_left_marked_as_being_changed():
    assert "◆" not in DOC and "being changed" not in DOC
