"""Reply schemas: one declaration per stage of what a model must answer.

A :class:`Reply` subclass is a strict pydantic model (booleans are booleans, integers are integers, labels
come from the allowed set). The same class gives

* the prompt's format instructions (:meth:`Reply.format_instructions`, from the fields and their docs),
* the JSON schema sent to backends that constrain decoding (:meth:`Reply.json_schema`), and
* the parser (:meth:`Reply.parse`): JSON found in the reply, syntax-repaired at most (see
  :func:`halluscope.text.parsing.extract_json`), then validated strictly. Prose, fragments, wrong keys,
  wrong types and truncated JSON are errors, so a verdict is read only from a reply that states it; two
  different answers, a repeated key, or the schema's own example echoed back are errors too, so it is read
  only from one unambiguous statement of it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from halluscope.text.parsing import ParseError, extract_json, normalized_key

R = TypeVar("R", bound="Reply")


class Reply(BaseModel):
    """Base of every reply schema. Subclasses declare fields with ``Field(description=...)``; set
    ``example`` to show the model one filled-in reply (optional)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    example: ClassVar[dict[str, Any] | None] = None
    bare_list_field: ClassVar[str | None] = None
    """When set, a reply that is a bare JSON list is read as the value of this (list) field."""
    refuse_example_echo: ClassVar[bool] = True
    """A reply whose only answer is ``example`` (alone, or inside echoed format text or an echoed prompt) is no
    answer. Only a schema whose parser checks every value against the input itself (a decomposition keeps an
    example fact only when the TEXT says it) turns this off."""

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        return cls.model_json_schema()

    @classmethod
    def format_instructions(cls) -> str:
        schema = cls.model_json_schema()
        defs = schema.get("$defs", {})
        lines = ["Answer with one JSON object and nothing before or after it. Its fields:"]
        for name, prop in schema.get("properties", {}).items():
            desc = prop.get("description", "")
            lines.append(f'- "{name}": {_describe_type(prop, defs)}' + (f" - {desc}" if desc else ""))
        if cls.example is not None:
            lines.append("For example: " + json.dumps(cls.example, ensure_ascii=False))
        return "\n".join(lines)

    @classmethod
    def echoes(cls) -> list[Any]:
        """The JSON values that are this schema's example echoed back (the example, and its list alone when a bare
        list is accepted): :func:`~halluscope.text.parsing.extract_json` never takes them for the answer."""
        if cls.example is None or not cls.refuse_example_echo:
            return []
        values: list[Any] = [cls.example]
        if cls.bare_list_field and isinstance(cls.example.get(cls.bare_list_field), list):
            values.append(cls.example[cls.bare_list_field])
        return values

    @classmethod
    def parse(cls: type[R], text: str) -> R:
        """The reply as this schema, or :class:`ParseError` saying why not."""
        expect: tuple[type, ...] = (dict, list) if cls.bare_list_field else (dict,)
        data = extract_json(text, expect, examples=cls.echoes())
        if isinstance(data, list):
            data = {cls.bare_list_field: data}
        nested = restated_field(data, {normalized_key(name) for name in cls.model_fields})
        if nested is not None:
            raise ParseError(
                f"the reply states {nested!r} a second time inside another value; a verdict must be stated once"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ParseError(validation_message(exc)) from exc


MAX_NESTED_WALK = 10_000
"""At most this many values beside the schema's fields are searched for a second statement of a field."""


def restated_field(data: dict[str, Any], fields: set[str]) -> str | None:
    """A key, inside any value the schema does not declare (``"second_opinion": {"supported": false}``), that
    names one of the schema's fields again; None when there is none. The walk is iterative and bounded: a reply
    with more values beside the schema's fields than :data:`MAX_NESTED_WALK` is refused."""
    stack: list[Any] = [v for k, v in data.items() if normalized_key(k) not in fields]
    seen = 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > MAX_NESTED_WALK:
            raise ParseError(f"the reply holds more than {MAX_NESTED_WALK} values beside its fields")
        if isinstance(value, dict):
            for key, item in value.items():
                if normalized_key(key) in fields:
                    return str(key)
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return None


def _describe_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        ref = defs.get(prop["$ref"].split("/")[-1], {})
        fields = ", ".join(f'"{k}": {_describe_type(v, defs)}' for k, v in ref.get("properties", {}).items())
        return "{" + fields + "}"
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    if "anyOf" in prop:
        return " or ".join(_describe_type(p, defs) for p in prop["anyOf"])
    kind = prop.get("type")
    if kind == "array":
        return f"a list of {_describe_type(prop.get('items', {}), defs)}"
    if kind == "integer":
        lo, hi = prop.get("minimum"), prop.get("maximum")
        return f"an integer from {lo} to {hi}" if lo is not None and hi is not None else "an integer"
    if kind == "number":
        return "a number"
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        return "a string"
    if kind == "null":
        return "null"
    return "a value"


def validation_message(exc: ValidationError, limit: int = 300) -> str:
    """Where and why a reply failed its schema (the first error), at most ``limit`` characters."""
    errs = exc.errors()
    if not errs:
        return f"schema mismatch at root: {exc}"[:limit]
    loc = ".".join(str(p) for p in errs[0]["loc"])
    return f"schema mismatch at {loc or 'root'}: {errs[0]['msg']}"[:limit]
