"""Several units judged in one LLM call where a paper judges each unit on its own against the same context.

The ``batch_size`` option of ``dcr``, ``factscore`` and ``probe`` (and of ``dove``, whose fact checker set the
pattern) uses it. The units that share one context (the whole source, or one identical excerpt) are numbered
in one prompt; the reply lists one entry per unit, by number, and each entry is read exactly as that unit's
own reply would be (the same schema plus ``id``). Nothing is guessed:

* a unit gets its verdict from a batch reply only from exactly one valid entry with its number;
* a unit the reply leaves out, gives twice, or gives in an entry that fails the schema is asked again on its
  own (the per-unit path is the reference) and is unscored, with both reasons, only when that fails too;
* an entry numbered outside 1..n means the reply's numbering cannot be trusted: the whole reply is refused
  and every unit of the batch is asked on its own.

``batch_size = 1`` is always the paper's one call per unit.

What a method writes for its batch path is only what is its own: the batch prompt's wording (a
:class:`~halluscope.prompts.PromptTemplate` whose per-call material, the units, is a numbered list) and how an
entry becomes a result. The rest is here: the batch reply schemas derived from the single-unit reply
(:func:`numbered_entry`, :func:`batch_reply`), one batch call (:class:`BatchCall`: the prompt rendered with the
numbered units, the reply room of ``n`` single calls, the reply read per unit), the chunking and the per-unit
redo (:func:`judge_in_batches`), and the verifier scaffolding (:class:`BatchingVerifier`). Rounds of calls that
several claims share across retrieved snippets live in the pipeline
(:func:`~halluscope.stages.snippets.max_over_snippets`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, Field, ValidationError, create_model

from halluscope.llm import LLM
from halluscope.llm.base import GenerateParams
from halluscope.llm.label_probs import (
    TRUE_FALSE,
    VERDICT_TOP_LOGPROBS,
    LabelProbability,
    label_probabilities,
    with_label_probability,
)
from halluscope.llm.replies import Reply, restated_field, validation_message
from halluscope.llm.structured import generate_reply
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, LLMCall, Verdict
from halluscope.stages import Context
from halluscope.stages.verifiers import LLMVerifier, messages_tokens, reply_budget
from halluscope.text import ParseError, extract_json
from halluscope.text.parsing import normalized_key
from halluscope.text.placeholders import is_placeholder

E = TypeVar("E", bound=BaseModel)
S = TypeVar("S", bound=BaseModel)
T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V")


async def gather_or_cancel(aws: Iterable[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` whose first error cancels the siblings (after a context overflow the pipeline starts
    over on snippets; the other calls must not keep running)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def chunked(items: Sequence[T], size: int) -> list[list[T]]:
    """``items`` in consecutive chunks of at most ``size`` (``size`` >= 1)."""
    size = max(1, int(size))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def batch_reply_budget(llm: LLM, per_unit: int, n: int, overhead: int = 32) -> int:
    """Completion tokens for a batch of ``n`` units: what ``n`` single calls could use (each capped by the
    client's ``max_tokens``), plus the list's own syntax. A batch never gets less room per unit than a single
    call, so batching cannot cut replies short that single calls would finish."""
    return n * reply_budget(llm, per_unit) + overhead


def redone_verdict(verdict: Verdict, why: str, batch_calls: Sequence[LLMCall]) -> Verdict:
    """A unit's verdict asked on its own after the batch reply gave it none: it keeps the batch's calls too, and
    an unscored one says why both failed."""
    update: dict[str, Any] = {"calls": list(batch_calls) + list(verdict.calls)}
    if verdict.label == "unscored":
        update["reason"] = f"batch: {why}; alone: {verdict.reason}"
    return verdict.model_copy(update=update)


def numbered(texts: Sequence[str]) -> str:
    """``1. first`` / ``2. second`` ..., each text on one line."""
    return "\n".join(f"{i}. {' '.join(t.split())}" for i, t in enumerate(texts, 1))


def numbered_as_written(texts: Sequence[str]) -> str:
    """``1. first`` / ``2. second`` ..., each text as it is written (dove's batch prompt lists facts so)."""
    return "\n".join(f"{i}. {t}" for i, t in enumerate(texts, 1))


# ------------------------------------------------------------------------------------------------ schemas


def numbered_entry(single: type[S], unit: str, doc: str, *, name: str) -> type[S]:
    """A batch reply's entry: the single-unit reply ``single`` (its fields, descriptions and validators, in
    order) plus ``id``, the number of the ``unit`` it judges. ``name`` and ``doc`` name and describe the
    derived class."""
    return create_model(
        name,
        __base__=single,
        __doc__=doc,
        __module__=single.__module__,
        id=(int, Field(ge=1, description=f"the number of the {unit}")),
    )


def batch_reply(
    entry: type[BaseModel], unit: str, doc: str, *, name: str, example: dict[str, Any] | None = None
) -> type[Reply]:
    """A batch reply: ``{"results": [entry, ...]}``, exactly one entry per numbered ``unit`` (a bare list is
    read as ``results``); ``example`` is shown to the model, as a single reply's is."""
    reply = create_model(
        name,
        __base__=Reply,
        __doc__=doc,
        __module__=entry.__module__,
        results=(
            list[entry],  # type: ignore[valid-type]
            Field(description=f"exactly one entry per {unit}, in any order"),
        ),
    )
    reply.example = example
    reply.bare_list_field = "results"
    return reply


# ------------------------------------------------------------------------------------------------ parsing


@dataclass
class BatchAnswers(Generic[E]):
    """A batch reply read per unit: ``judged`` maps a 0-based unit index to its entry, ``missing`` maps every
    other unit to why the reply gave it none."""

    judged: dict[int, E]
    missing: dict[int, str]


def _refuse_restated(value: dict[str, Any], fields: set[str]) -> None:
    """ParseError when a value beside ``fields`` states one of them again (a nested second verdict)."""
    nested = restated_field(value, fields)
    if nested is not None:
        raise ParseError(
            f"the reply states {nested!r} a second time inside another value; a verdict must be stated once"
        )


def parse_batch(  # noqa: C901 - one strict pass over a batch reply; each branch is a way a reply can be wrong
    text: str,
    n: int,
    entry: type[E],
    *,
    list_field: str = "results",
    unit: str = "unit",
    check: Callable[[E], None] | None = None,
    examples: Sequence[Any] = (),
) -> BatchAnswers[E]:
    """``{"<list_field>": [{"id": i, ...}, ...]}`` (or the bare list) for units 1..n, each entry validated as
    ``entry`` (which declares ``id``) and then by ``check`` (raise ParseError/ValueError to refuse it). Raises
    ParseError when the reply is no such list, when an entry is numbered outside 1..n, when no unit got an
    entry, and when the reply is one of ``examples`` (the batch schema's example echoed back: its ids 1, 2 are
    never applied to real units) or otherwise not one unambiguous statement (see
    :func:`~halluscope.text.parsing.extract_json`)."""
    data: Any = extract_json(text, (dict, list), examples=examples)
    if isinstance(data, dict):
        if not isinstance(data.get(list_field), list):
            raise ParseError(f'expected a "{list_field}" list')
        _refuse_restated(data, {normalized_key(list_field)})  # {"results": [...], "second_opinion": {"results": ...}}
        data = data[list_field]
    if _holds_an_example(data, examples, list_field):
        raise ParseError(
            f"the reply repeats the format's example entries (their ids are the example's, not the {unit}s')"
        )
    valid: dict[int, list[E]] = {}
    invalid: dict[int, list[str]] = {}
    for item in data:
        raw_id = item.get("id") if isinstance(item, dict) else None
        if type(raw_id) is int and not 1 <= raw_id <= n:
            raise ParseError(f"the reply judges {unit} {raw_id}, but the {unit}s are numbered 1 to {n}")
        try:
            if isinstance(item, dict):
                _refuse_restated(item, {normalized_key(f) for f in entry.model_fields})
            parsed = entry.model_validate(item)
            if check is not None:
                check(parsed)
        except ValidationError as exc:
            if type(raw_id) is int:
                invalid.setdefault(raw_id - 1, []).append(validation_message(exc, limit=200))
            continue
        except (ParseError, ValueError) as exc:
            if type(raw_id) is int:
                invalid.setdefault(raw_id - 1, []).append(str(exc)[:200])
            continue
        valid.setdefault(int(parsed.id) - 1, []).append(parsed)  # type: ignore[attr-defined]  # entries have an id
    judged: dict[int, E] = {}
    missing: dict[int, str] = {}
    for index in range(n):
        good, bad = valid.get(index, []), invalid.get(index, [])
        if len(good) == 1 and not bad:
            judged[index] = good[0]
        elif len(good) + len(bad) > 1:
            missing[index] = f"the batch reply has {len(good) + len(bad)} entries for {unit} {index + 1}"
        elif bad:
            missing[index] = f"the batch reply's entry for {unit} {index + 1} is unusable: {bad[0]}"
        else:
            missing[index] = f"the batch reply has no entry for {unit} {index + 1}"
    if not judged:
        raise ParseError(f"no usable entry in the {list_field} list ({next(iter(missing.values()), 'empty')})")
    return BatchAnswers(judged, missing)


def _holds_an_example(entries: list[Any], examples: Sequence[Any], list_field: str) -> bool:
    """Whether ``entries`` hold every entry of one of ``examples`` word for word (the example's answer with more
    entries added: its ids 1, 2 would otherwise be applied to real units)."""
    spelled = {json.dumps(e, sort_keys=True) for e in entries}
    for example in examples:
        shown = example.get(list_field) if isinstance(example, dict) else example
        if isinstance(shown, list) and shown and all(json.dumps(e, sort_keys=True) in spelled for e in shown):
            return True
    return False


# ------------------------------------------------------------------------------------------------ asking


@dataclass
class BatchStep(Generic[E]):
    """One batch call: the per-unit answers (None when the whole reply was unusable, ``error`` says why) and
    every exchange made (the call and its repair request)."""

    answers: BatchAnswers[E] | None
    error: str | None
    calls: list[LLMCall] = field(default_factory=list)
    logprobs: list[Any] | None = None  # the reply's token log-probabilities, when asked for and given

    def label_probabilities(self, key: str, positive: Sequence[str], negative: Sequence[str]) -> dict[int, float]:
        """Per unit index (0-based), the positive label's probability at the ``key`` field of its entry (see
        :meth:`label_readings`; an entry whose probability is refused or contradicts its label has none)."""
        found = self.label_readings(key, positive, negative)
        return {i: f.probability for i, f in found.items() if f.probability is not None}

    def label_readings(self, key: str, positive: Sequence[str], negative: Sequence[str]) -> dict[int, LabelProbability]:
        """Per unit index (0-based), what the ``key`` field of its entry reads, only when the reply's entries can be
        told apart in its text: as many ``key`` fields as ``"id"`` fields, each id a unit's number once (else
        ``{}``: nothing is guessed)."""
        if not self.logprobs or self.answers is None:
            return {}
        found = label_probabilities(self.logprobs, positive, negative, key=key)
        text = "".join(getattr(t, "token", "") for t in self.logprobs)
        ids = [int(m) for m in re.findall(r'"id"\s*:\s*(\d+)', text)]
        if len(ids) != len(found) or len(set(ids)) != len(ids):
            return {}
        return {i - 1: f for i, f in zip(ids, found)}

    def why_missing(self, index: int) -> str:
        if self.answers is None:
            return f"batch reply unusable: {self.error}"
        return self.answers.missing.get(index, "no entry")


async def ask_batch(
    llm: LLM,
    messages: list[dict[str, str]],
    reply: type[Reply],
    entry: type[E],
    n: int,
    *,
    params: GenerateParams | None = None,
    list_field: str = "results",
    unit: str = "unit",
    check: Callable[[E], None] | None = None,
) -> BatchStep[E]:
    """One call for ``n`` numbered units; the reply parsed per unit (:func:`parse_batch`), one repair asked for
    when it is unusable as a whole."""
    step = await generate_reply(
        llm,
        messages,
        reply,
        params=params,
        parse=lambda text: parse_batch(  # type: ignore[arg-type, return-value]
            text, n, entry, list_field=list_field, unit=unit, check=check, examples=reply.echoes()
        ),
    )
    return BatchStep(step.value, step.error, list(step.calls), step.logprobs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class BatchCall(Generic[E]):
    """How one method asks for a batch: its batch ``prompt`` (whose reply schema is a :func:`batch_reply`), the
    reply's ``entry`` schema, the prompt field that takes the numbered units (``listing``, numbered by
    ``number``; the prompt's ``count`` literal gets their number), what a unit is called in replies and errors
    (``unit``), and the reply room of one single call (``reply_tokens``; ``overhead`` more for the list)."""

    prompt: PromptTemplate
    entry: type[E]
    listing: str
    unit: str
    reply_tokens: int
    overhead: int = 32
    number: Callable[[Sequence[str]], str] = numbered

    def messages(self, texts: Sequence[str], **fields: Any) -> list[dict[str, str]]:
        """The batch prompt for the units ``texts`` (numbered from 1), with the prompt's other ``fields``."""
        return self.prompt.render(**{self.listing: self.number(texts)}, **fields, count=len(texts))

    def budget(self, llm: LLM, n: int) -> int:
        """Completion tokens for ``n`` units (:func:`batch_reply_budget`)."""
        return batch_reply_budget(llm, self.reply_tokens, n, overhead=self.overhead)

    def reserve(self, llm: LLM, texts: Sequence[str], **fields: Any) -> int:
        """Tokens a batch call for ``texts`` needs besides the fields left empty: the prompt and the reply."""
        return messages_tokens(llm, self.messages(texts, **fields)) + self.budget(llm, len(texts))

    async def ask(
        self,
        llm: LLM,
        texts: Sequence[str],
        *,
        params: GenerateParams | None = None,
        check: Callable[[E], None] | None = None,
        **fields: Any,
    ) -> BatchStep[E]:
        """One call for the units ``texts``; ``params`` (default: the client's) get the batch's reply room."""
        n = len(texts)
        budget = self.budget(llm, n)
        params = llm.params(max_tokens=budget) if params is None else params.model_copy(update={"max_tokens": budget})
        return await ask_batch(
            llm, self.messages(texts, **fields), self.reply, self.entry, n, params=params, unit=self.unit, check=check
        )

    @property
    def reply(self) -> type[Reply]:
        """The batch prompt's reply schema (a :func:`batch_reply`)."""
        if self.prompt.reply is None:
            raise TypeError(f"the batch prompt {self.prompt.name} declares no reply schema")
        return self.prompt.reply


async def judge_in_batches(
    units: Sequence[U],
    size: int,
    *,
    ask: Callable[[list[U]], Awaitable[BatchStep[E]]],
    accept: Callable[[U, E, list[LLMCall]], V],
    alone: Callable[[U], Awaitable[V]],
    redone: Callable[[V, str, list[LLMCall]], V],
) -> list[V]:
    """Every unit's result, in order: units in chunks of ``size``; a chunk of one goes the per-unit way
    (``alone``); a larger chunk is one batch call (``ask``), each answered unit read by ``accept(unit, entry,
    calls)``, every other unit asked ``alone`` and passed to ``redone(result, why_missing, batch_calls)``."""
    if size <= 1 or len(units) < 2:
        return await gather_or_cancel(alone(u) for u in units)

    async def chunk(part: list[U]) -> list[V]:
        if len(part) == 1:
            return [await alone(part[0])]
        step = await ask(part)
        out: list[V | None] = [None] * len(part)
        redo: list[int] = []
        for i, unit in enumerate(part):
            if step.answers is not None and i in step.answers.judged:
                out[i] = accept(unit, step.answers.judged[i], step.calls)
            else:
                redo.append(i)
        again = await gather_or_cancel(alone(part[i]) for i in redo)
        for i, result in zip(redo, again):
            out[i] = redone(result, step.why_missing(i), step.calls)
        return [r for r in out if r is not None]

    results = await gather_or_cancel(chunk(part) for part in chunked(units, size))
    return [r for part in results for r in part]


# ------------------------------------------------------------------------------------------------ verifiers


class BatchingVerifier(LLMVerifier, Generic[E]):
    """A verifier whose claims, when they share the whole source and ``batch_size`` > 1, are judged up to
    ``batch_size`` per call (:class:`BatchCall`), each on its own; a claim the batch reply does not judge is
    checked alone (:meth:`check`, the per-claim path and the reference). Against a retrieved snippet every claim
    has its own context, so each gets its own calls.

    A subclass sets ``prompt`` (the single-claim prompt), ``batch_size`` and ``batch``, and implements
    :meth:`messages`, :meth:`check` and :meth:`accept` (a batch entry's verdict). A template placeholder claim
    is never judged: it is left out of the batch (``placeholders_in_batch = False``) or, when True, numbered in
    it as written and unscored whatever the reply says."""

    placeholders_in_batch: ClassVar[bool] = False
    label_key: ClassVar[str | None] = "supported"
    """The JSON boolean field of a batch entry that states the verdict: its token probabilities give each claim's
    P(supported) (None: the entries state no such field)."""
    prompt: PromptTemplate
    batch_size: int
    batch: BatchCall[E]

    def used_prompts(self) -> list[PromptTemplate]:
        return [self.prompt] + ([self.batch.prompt] if self.batch_size > 1 else [])

    def shares_calls(self, claims: Sequence[Claim], context: Context) -> bool:
        """Whether ``claims`` are judged in batch calls: several claims against the whole source."""
        return self.batch_size > 1 and context.kind == "source" and len(claims) > 1

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """The larger of a one-claim call (longest claim) and, when batching, a call with the first batch."""
        reserve = super().reserve_tokens(claims)
        if self.batch_size > 1 and len(claims) > 1:
            reserve = max(reserve, self.batch.reserve(self.llm, [c.text for c in claims[: self.batch_size]], source=""))
        return reserve

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        if not self.shares_calls(claims, context):
            return await gather_or_cancel(self.check(c, context, source) for c in claims)
        asked = list(claims) if self.placeholders_in_batch else [c for c in claims if not is_placeholder(c.text)]

        def accept(claim: Claim, entry: E, calls: list[LLMCall]) -> Verdict:
            if is_placeholder(claim.text):  # judged in the batch, but a placeholder is never a claim
                return Verdict.unscored(claim, self.placeholder_reason(claim), calls)
            return self.accept(claim, entry, calls, source)

        readings: dict[int, LabelProbability] = {}  # id(claim) -> what its batch entry's label reads

        async def ask(part: list[Claim]) -> BatchStep[E]:
            params = self.llm.params(top_logprobs=VERDICT_TOP_LOGPROBS) if self.label_key else None
            step = await self.batch.ask(self.llm, [c.text for c in part], params=params, source=context.text)
            if self.label_key:
                for i, found in step.label_readings(self.label_key, *TRUE_FALSE).items():
                    if 0 <= i < len(part):
                        readings[id(part[i])] = found
            return step

        def accept_with_probability(claim: Claim, entry: E, calls: list[LLMCall]) -> Verdict:
            return with_label_probability(accept(claim, entry, calls), readings.get(id(claim)))

        judged = iter(
            await judge_in_batches(
                asked,
                self.batch_size,
                ask=ask,
                accept=accept_with_probability,
                alone=lambda claim: self.check(claim, context, source),
                redone=redone_verdict,
            )
        )
        return [
            next(judged)
            if self.placeholders_in_batch or not is_placeholder(c.text)
            else await self.check(c, context, source)
            for c in claims
        ]

    async def check(self, claim: Claim, context: Context, source: str) -> Verdict:
        """One claim against ``context`` in a call of its own."""
        raise NotImplementedError

    def accept(self, claim: Claim, entry: E, calls: list[LLMCall], source: str) -> Verdict:
        """The verdict a batch ``entry`` gives ``claim`` (as :meth:`check` reads a single reply)."""
        raise NotImplementedError

    def placeholder_reason(self, claim: Claim) -> str:
        return f"the claim {claim.text[:40]!r} is a template placeholder, not a claim"
