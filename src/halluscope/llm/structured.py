"""Structured generation: parse (and validate) a reply, ask once for a repair, else report why not.

Never raises on a bad reply: the caller gets ``Parsed.value`` or ``Parsed.error`` (the reason, to put on
an ``unscored`` verdict) together with the audit trail of every call made.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from halluscope.llm.base import Completion, GenerateParams, Message, ReplyTooLargeError
from halluscope.llm.client import LLM
from halluscope.llm.replies import Reply, validation_message
from halluscope.records import LLMCall, StepResult
from halluscope.text.parsing import ParseError, extract_json

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

REPAIR_REQUEST = (
    "Your previous reply could not be used ({error}). Reply again, in exactly this format and with nothing "
    "before or after it: {format_hint}"
)


Parsed = StepResult  # the generic step result; kept under this name for the parsers' callers

PARSE_OFF_LOOP_CHARS = 4_000
"""Replies longer than this are parsed in a worker thread, so a hostile reply cannot stall the event loop."""

PARSE_TIMEOUT_S = 10.0
"""A parse that takes longer than this counts as a failure (the reply is unusable)."""


def _call_record(llm: LLM, messages: list[Message], completion: Completion) -> LLMCall:
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
    repair_params: GenerateParams | None = None,
) -> StepResult[T]:
    """Call the model and ``parse`` its reply; on ParseError/ValidationError ask once for a repair (with
    ``repair_params`` when given, e.g. a schema-constrained request after an unconstrained first one)."""
    calls: list[LLMCall] = []
    convo = list(messages)
    attempts = 2 if repair else 1
    error = "no attempt made"
    for attempt in range(attempts):
        try:
            completion = await llm.generate(convo, params if attempt == 0 else (repair_params or params))
        except ReplyTooLargeError as exc:  # never parsed; the repair request carries only a short excerpt
            calls.append(
                LLMCall(
                    model=llm.name,
                    messages=[dict(m) for m in convo],
                    reply=exc.excerpt,
                    reply_size=exc.size,
                    reply_size_unit=exc.unit,  # type: ignore[arg-type]
                )
            )
            error = str(exc)
            if attempt + 1 < attempts:
                convo = convo + [
                    {"role": "assistant", "content": _refused_excerpt(exc)},
                    {"role": "user", "content": REPAIR_REQUEST.format(error=error, format_hint=format_hint)},
                ]
            continue
        calls.append(_call_record(llm, convo, completion))
        try:
            return StepResult(await _run_parser(parse, completion.text), None, calls, completion.logprobs)
        except (ParseError, ValidationError, ValueError, TypeError, KeyError, RecursionError) as exc:
            error = _short_error(exc)
        except TimeoutError:
            error = f"parsing the reply took longer than {PARSE_TIMEOUT_S:.0f} s"
        if attempt + 1 < attempts:
            convo = convo + [
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": REPAIR_REQUEST.format(error=error, format_hint=format_hint)},
            ]
    return StepResult(None, f"unparseable reply after {attempts} attempt(s): {error}", calls)


async def _run_parser(parse: Callable[[str], T], text: str) -> T:
    if len(text) <= PARSE_OFF_LOOP_CHARS:
        return parse(text)
    return await asyncio.wait_for(asyncio.to_thread(parse, text), PARSE_TIMEOUT_S)


def _refused_excerpt(exc: ReplyTooLargeError) -> str:
    """What the repair request shows of a reply refused for its size: its start (if it was read) and a note."""
    note = f"[reply cut here: {exc.size} {exc.unit} in all, over the size limit]"
    return f"{exc.excerpt}\n{note}" if exc.excerpt else note


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return validation_message(exc)
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
) -> StepResult[M]:
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


R = TypeVar("R", bound=Reply)


async def generate_reply(
    llm: LLM,
    messages: list[Message],
    schema: type[R],
    *,
    params: GenerateParams | None = None,
    repair: bool = True,
    parse: Callable[[str], R] | None = None,
) -> StepResult[R]:
    """Ask for a reply matching ``schema`` (a :class:`Reply`), parse it strictly, ask once for a repair, else
    fail the step with the reason. The first request goes the way the backend declares
    (:data:`~halluscope.llm.base.StructuredOutput`: the schema for constrained decoding by default, or plain
    text where that is faster); the repair request always sends the schema. ``parse`` replaces
    ``schema.parse`` when a stage needs extra checks (e.g. a count)."""
    base = params or llm.default_params
    constrained = base.model_copy(
        update={"json_mode": True, "json_schema": json.dumps(schema.json_schema(), sort_keys=True)}
    )
    # without a repair request the one request is the constrained one
    way = getattr(llm.api, "structured_output", "schema") if repair else "schema"
    if way == "plain":
        first = base.model_copy(update={"json_mode": False, "json_schema": None})
    elif way == "json_object":
        first = base.model_copy(update={"json_mode": True, "json_schema": None})
    else:
        first = constrained
    return await generate_parsed(
        llm,
        messages,
        parse or schema.parse,
        params=first,
        format_hint=schema.format_instructions(),
        repair=repair,
        repair_params=constrained,
    )
