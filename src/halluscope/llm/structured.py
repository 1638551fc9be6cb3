"""Structured generation: parse (and validate) a reply, ask once for a repair, else report why not.

Never raises on a bad reply: the caller gets ``Parsed.value`` or ``Parsed.error`` (the reason, to put on
an ``unscored`` verdict) together with the audit trail of every call made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from halluscope.llm.base import GenerateParams, Message
from halluscope.llm.client import LLM
from halluscope.records import LLMCall
from halluscope.text.parsing import ParseError, extract_json

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

REPAIR_REQUEST = (
    "Your previous reply could not be used ({error}). Answer again with only {format_hint}, "
    "and nothing before or after it."
)


@dataclass
class Parsed(Generic[T]):
    value: T | None
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def raw(self) -> str:
        return self.calls[-1].reply if self.calls else ""


def _call_record(llm: LLM, messages: list[Message], completion) -> LLMCall:
    return LLMCall(
        model=completion.model,
        messages=[dict(m) for m in messages],
        reply=completion.text,
        cached=completion.cached,
        usage=completion.usage,
    )


async def generate_parsed(
    llm: LLM,
    messages: list[Message],
    parse: Callable[[str], T],
    *,
    params: GenerateParams | None = None,
    format_hint: str = "the requested format",
    repair: bool = True,
) -> Parsed[T]:
    """Call the model and ``parse`` its reply; on ParseError/ValidationError ask once for a repair."""
    calls: list[LLMCall] = []
    convo = list(messages)
    attempts = 2 if repair else 1
    error = "no attempt made"
    for attempt in range(attempts):
        completion = await llm.generate(convo, params)
        calls.append(_call_record(llm, convo, completion))
        try:
            return Parsed(parse(completion.text), None, calls)
        except (ParseError, ValidationError, ValueError, TypeError, KeyError) as exc:
            error = _short_error(exc)
        if attempt + 1 < attempts:
            convo = convo + [
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": REPAIR_REQUEST.format(error=error, format_hint=format_hint)},
            ]
    return Parsed(None, f"unparseable reply after {attempts} attempt(s): {error}", calls)


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = ".".join(str(p) for p in first.get("loc", ()))
        return f"schema mismatch at {loc or 'root'}: {first.get('msg', str(exc))}"[:300]
    return str(exc)[:300] or type(exc).__name__


def json_parser(schema: type[M]) -> Callable[[str], M]:
    """A parser that extracts JSON from a reply and validates it against ``schema``. A bare list is
    accepted for a schema with a single list field (small models often drop the wrapper object)."""
    list_fields = [n for n, f in schema.model_fields.items() if getattr(f.annotation, "__origin__", None) is list]

    bare_list_ok = len(schema.model_fields) == 1 and bool(list_fields)
    expect: tuple[type, ...] = (dict, list) if bare_list_ok else (dict,)

    def parse(text: str) -> M:
        data: Any = extract_json(text, expect)
        if isinstance(data, list):
            data = {list_fields[0]: data}
        return schema.model_validate(data)

    return parse


async def generate_structured(
    llm: LLM,
    messages: list[Message],
    schema: type[M],
    *,
    params: GenerateParams | None = None,
    repair: bool = True,
) -> Parsed[M]:
    """Ask for JSON matching ``schema``; validate; repair once; else ``Parsed.error``."""
    fields = ", ".join(schema.model_fields)
    return await generate_parsed(
        llm,
        messages,
        json_parser(schema),
        params=params,
        format_hint=f"one JSON object with the fields: {fields}",
        repair=repair,
    )
