"""``localize``: end-to-end LLM localization of factual inconsistencies as free-form descriptions (FINAL,
seed 002, §2, §4.1, App. C, H.2-H.3).

One call asks the model to describe every inconsistency of the target as a self-contained description.
The reply is a declared list (:class:`LocalizationReply`, ``{"inconsistencies": [...]}``), and an empty list
is the explicit "no inconsistency" answer. Styles:

* ``zero_shot``: the task and the reply schema (JSON mode);
* ``few_shot``: the same with three worked examples written for halluscope, answered in the same schema;
* ``cot`` (default): the model reasons step by step, then writes a ``Final Output:`` line followed by the
  same JSON object; only what follows the last such line is read, and it must be that object.

Each style has two prompt wordings (``variant=1|2``), as in the paper, which writes two per style and keeps,
per model, the one with the higher FINAL F1 on the dev split. ``variant="auto"`` (default) leaves that choice
to the bench (:mod:`halluscope.bench.final_protocol` runs both on the dev split and records the choice); a
single check with ``auto`` uses variant 1 and says so in ``details``.

A reply that is not the declared format (prose, bullet lines, a list of placeholders, a lone "None" line in
a JSON style, a chain of thought without its marked final answer) is no answer: after one repair request
the target is *unscored* with the reason, never scored from whatever lines it had. (The paper's prompts ask
for lettered lists A., B., ...; halluscope asks for the JSON list so that an answer can be told from junk.)

2-step variants (``filter=...``): a binary decision first; only a target judged inconsistent is localized.
``filter="self"`` asks the same model (step by step, then a last line that is exactly "Final answer: yes" or
"Final answer: no"; anything else is unscored); ``filter="<method>"`` runs another registered method and
labels by ``filter_threshold`` (unset: the bench chooses it on the dev split by the F1 of flagging inconsistent
targets, as the paper does for TrueTeacher; a single check uses that method's own threshold); ``filter="oracle"``
uses the gold label and therefore only works on labelled examples in the bench harness
(:meth:`Localize.run_example`).
``hint=True`` (2-step only) tells the localizer that the target is known to contain an inconsistency and
drops the empty-list option from the instructions; if the model still answers with an empty list it is
kept as none found.

Each description becomes a Finding. Its quoted target words (the prompts ask for them), or the clause after
"the summary says ...", are located in the target (exact -> normalized -> close fuzzy); descriptions whose
wording does not allow that keep ``target_spans=[]``.

Score: ``1 / (1 + n)`` for ``n`` descriptions; 1 when there are none. Why this function: it is 1 exactly
when nothing was found (the binary decision FINAL's "binarized" baseline uses), and it keeps decreasing with
every additional inconsistency, so it still ranks targets for AUC and correlation metrics instead of
collapsing all inconsistent targets to one value. The default threshold 0.75 (anything between 0.5 and 1
is equivalent) labels a target inconsistent as soon as one description is given.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_parsed, generate_reply
from halluscope.methods import method_class, register_method
from halluscope.methods.base import Method
from halluscope.methods.options import MethodOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Example, Finding, Report, StepResult
from halluscope.text import ParseError
from halluscope.text.labels import ascii_text
from halluscope.text.descriptions import clean_descriptions, spans_for_description
from halluscope.text.tags import strip_think
from halluscope.text.placeholders import (
    example_strings,
    normalized,
    resembles,
    shown_strings,
)

Style = Literal["zero_shot", "few_shot", "cot"]
STYLES: tuple[str, ...] = ("zero_shot", "few_shot", "cot")
FINAL_MARKER = "Final Output:"
_SYSTEM = "You are a meticulous fact-checker who compares texts with the source documents they are based on."

# ------------------------------------------------------------------------------------------------ few-shot

# Worked examples written for halluscope (invented texts; not taken from any benchmark).
FEW_SHOT_EXAMPLES: tuple[tuple[str, str, list[str]], ...] = (
    ("The Riverside library will close for renovation from 3 March until the end of May, the city council said "
     "on Monday. Books borrowed before the closure can be returned at the Hillgate branch. The work, costing "
     "2.4m pounds, will add a children's wing and a cafe. Council leader Maria Okafor said the project had been "
     "delayed twice because of funding problems.",
     "Riverside library will close for six months from March while a 4m-pound children's wing is built, the "
     "mayor has announced.",
     ['The text says the closure lasts "six months", but the source says it runs from 3 March until the end '
      "of May.",
      'The text gives the cost as "4m-pound", but the source says the work costs 2.4m pounds.',
      'The text says "the mayor has announced" the closure, but the source says the city council announced it '
      "and mentions no mayor."]),
    ("Firefighters rescued two hikers who had been stranded overnight on Ben Carrow after fog rolled in on "
     "Saturday afternoon. The pair, both in their 60s, were found cold but unhurt at about 07:00 on Sunday. A "
     "mountain rescue spokesperson urged walkers to check the forecast before setting out.",
     "Two hikers stranded overnight on a mountain in fog have been rescued unhurt.",
     []),
    ("Shares in the electric carmaker Voltra rose 8% on Thursday after it reported its first quarterly profit. "
     "The Lyon-based company said deliveries grew by a third compared with the same quarter last year. Chief "
     "executive Tom Reyes said the firm would open a second factory in 2026.",
     "Lyon-based carmaker Voltra has reported its first annual profit, sending its shares up 8%, and plans to "
     "build two new factories.",
     ['The text calls the profit "annual", but the source says it was the company\'s first quarterly profit.',
      'The text says Voltra plans "two new factories", but the source mentions a single second factory.']),
)

# ------------------------------------------------------------------------------------------------ replies


class LocalizationReply(Reply):
    """The declared list of descriptions; ``[]`` is the explicit "no inconsistency" answer. Echoed
    placeholders and the prompt's own examples are not descriptions: a list of nothing else is refused, and
    so is a list that says "None" beside real descriptions."""

    inconsistencies: list[str] = Field(
        description="every factual inconsistency of the TEXT, each as one self-contained sentence that quotes "
                    "the TEXT's words in double quotes and says what the SOURCE says instead, or that the SOURCE "
                    "does not say it; an empty list when the TEXT has no factual inconsistency")
    example: ClassVar[dict[str, Any] | None] = {"inconsistencies": [
        'The text says the bridge opened "in 1990", but the source says it opened in 1992.']}

    @field_validator("inconsistencies")
    @classmethod
    def _real_descriptions(cls, items: list[str]) -> list[str]:
        return clean_descriptions(items, LOCALIZATION_ECHOES)


class HintedLocalizationReply(LocalizationReply):
    """The same list, for a TEXT known to contain an inconsistency (the empty-list option is not offered)."""

    inconsistencies: list[str] = Field(
        description="every factual inconsistency of the TEXT, each as one self-contained sentence that quotes "
                    "the TEXT's words in double quotes and says what the SOURCE says instead, or that the SOURCE "
                    "does not say it")


LOCALIZATION_EXAMPLES = example_strings(LocalizationReply) | frozenset(
    normalized(d) for _, _, ds in FEW_SHOT_EXAMPLES for d in ds)
LOCALIZATION_ECHOES = shown_strings(LocalizationReply) | shown_strings(HintedLocalizationReply) | LOCALIZATION_EXAMPLES


def reply_schema(hint: bool) -> type[LocalizationReply]:
    return HintedLocalizationReply if hint else LocalizationReply


_MARKER_LINE = re.compile(r"^[ \t*#>_]*final\s+output\s*:", re.I | re.M | re.A)
"""ASCII-only case folding (``re.A``): "Fınal Output:" with a dotless i is no marker."""


def _without_example_copies(descriptions: list[str], target: str) -> list[str]:
    """Drop near copies of the prompt's example descriptions (small models copy an example with a detail
    changed) unless they point at words of the target; a list of nothing else is no answer."""
    kept = [d for d in descriptions if not resembles(d, LOCALIZATION_EXAMPLES) or spans_for_description(d, target)]
    if descriptions and not kept:
        raise ParseError("the list copies the prompt's example descriptions instead of describing the TEXT")
    return kept


def parse_localization(text: str, hint: bool = False, target: str = "") -> list[str]:
    """Descriptions from a zero-/few-shot reply: exactly the declared JSON object (``[]`` = none found)."""
    return _without_example_copies(reply_schema(hint).parse(text).inconsistencies, target)


def parse_final_output(text: str, hint: bool = False, target: str = "") -> list[str]:
    """Descriptions from a chain-of-thought reply: the reasoning, then a line starting ``Final Output:``;
    what follows the last such line must be the declared JSON object (in a code fence or not). Raises
    ParseError when the marker is missing, when the final answer is anything else, and when an earlier marker
    line states a different answer (two verdicts)."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    body = strip_think(text)
    marks = list(_MARKER_LINE.finditer(body))
    if not marks:
        raise ParseError(f'no line starting "{FINAL_MARKER}" in the reply')
    rest = body[marks[-1].end():].lstrip(" \t*_").strip()
    if not rest:
        raise ParseError(f'nothing after "{FINAL_MARKER}"')
    if not rest.startswith(("{", "```")):
        raise ParseError(f'after "{FINAL_MARKER}" the reply must be the JSON object, not {rest[:40]!r}')
    final = reply_schema(hint).parse(rest).inconsistencies
    for before, after in zip(marks, marks[1:]):  # an earlier final output that answers otherwise: two verdicts
        try:
            earlier = reply_schema(hint).parse(body[before.end():after.start()]).inconsistencies
        except (ParseError, ValidationError):
            continue
        if earlier != final:
            raise ParseError(f'the reply has two "{FINAL_MARKER}" lines with different answers')
    return _without_example_copies(final, target)


_LAST_LINE_ANSWER = re.compile(r"^final\s+answer\s*[:\-]?\s*(yes|no)\s*\.?$", re.I | re.A)


def parse_binary_verdict(text: str) -> bool:
    """True (consistent) / False from a reply whose last line is exactly "Final answer: yes" or "Final answer:
    no" (FINAL H.3; case, markdown emphasis and a final period aside). Anything else raises ParseError: a
    verdict is not guessed from wording elsewhere in the reply; look-alike letters ("yeſ") are not "yes"; an
    earlier "Final answer:" line with the other answer makes two verdicts (refused)."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    lines = [line for line in strip_think(text).splitlines() if line.strip()]
    last = re.sub(r"[*_`#>]", "", lines[-1]).strip() if lines else ""
    answers = {a.lower() for line in lines[:-1] if (a := _stated_answer(line)) is not None}
    m = _LAST_LINE_ANSWER.match(last) if ascii_text(last) is not None else None
    if m is None:
        raise ParseError(f'the last line is not "Final answer: yes" or "Final answer: no": {last[:60]!r}')
    if answers - {m.group(1).lower()}:
        raise ParseError('the reply states "Final answer: yes" and "Final answer: no": two verdicts')
    return m.group(1).lower() == "yes"


def _stated_answer(line: str) -> str | None:
    """The yes/no of an earlier "Final answer: ..." line (a verdict stated before the last line), else None."""
    m = _LAST_LINE_ANSWER.match(re.sub(r"[*_`#>]", "", line).strip())
    return m.group(1) if m else None


# ------------------------------------------------------------------------------------------------ prompts
#
# Two prompt variants per style, as in FINAL (App. C, H.2): the paper writes two wordings of each style and
# keeps, per model, the one with the higher FINAL F1 on the dev split (``variant="auto"`` in the bench, see
# halluscope.bench.final_protocol). The wording below is halluscope's own; what each variant carries:
#
# * variant 1 - short and plain. Zero-/few-shot: "identify and explain" every inconsistency, defined as
#   information the TEXT states that cannot be verified from the SOURCE; only factual problems (omissions are
#   not); each one separately, brief; an empty list when there is none. CoT: find the facts that cannot be
#   verified, describe each clearly, think step by step, answer under "Final Output:" (the paper's CoT
#   prompt 1 states no "None" rule; the reply schema still allows the empty list).
# * variant 2 - explicit criteria. Zero-shot: the "none" rule first, inconsistency = contradicted OR not
#   verifiable, no omissions or other errors, short separate descriptions. Few-shot: a structured brief (task,
#   goal, what counts - including wrong names, places, numbers, events, specific claims - and numbered rules).
#   CoT: numbered steps (split the TEXT into statements, check each for contradicted / not verifiable, say
#   exactly what is wrong), then "Final Output:", only what is wrong, an empty list when nothing is.
#
# Both variants ask for the same declared reply (a JSON list of descriptions quoting the TEXT; see the module
# docstring for why not the paper's lettered lists), so they are scored the same way.

Variant = Literal[1, 2]
VARIANTS: tuple[int, ...] = (1, 2)

_INPUTS = "SOURCE:\n$source\n\nTEXT:\n$target"
_QUOTE_RULE = ("quote in double quotes the words of the TEXT it is about, and say what the SOURCE says instead, or "
               "that the SOURCE does not say it")
_NONE_RULE = "If the TEXT has no factual inconsistency, give an empty list."

# Stated first, in place of the "no inconsistency" rule, when the 2-step filter judged the TEXT inconsistent.
_HINTS: dict[int, str] = {
    1: "The TEXT is factually inconsistent with the SOURCE.",
    2: "The TEXT contains factual inconsistencies with respect to the SOURCE.",
}


def _task_v1(hint: bool) -> str:
    return (
        "Identify and explain every factual inconsistency in the TEXT with respect to the SOURCE it was written "
        "from (the TEXT may be, for example, a summary of the SOURCE or an answer based on it). A factual "
        "inconsistency is any information in the TEXT that cannot be verified from the SOURCE.\n\n"
        "Look only for factual inconsistencies, not for other kinds of problems such as information the TEXT "
        "leaves out.\n\n"
        "List each inconsistency separately, as a brief and concise description of it: " + _QUOTE_RULE + "."
        + ("" if hint else "\n\n" + _NONE_RULE)
    )


def _task_v2_zero(hint: bool) -> str:
    return (
        "Find all factual inconsistencies in the TEXT, compared with the SOURCE it was written from, and "
        "describe each one briefly." + ("" if hint else " " + _NONE_RULE) + "\n\n"
        "A factual inconsistency is any detail of the TEXT that the SOURCE contradicts or that cannot be "
        "verified from the SOURCE. Deal only with such inconsistencies: do not comment on omissions or on any "
        "other kind of error.\n\n"
        "Give each inconsistency as a separate item with a short description of what is inconsistent: "
        + _QUOTE_RULE + ". Keep the descriptions concise and about factual inconsistencies only."
    )


def _task_v2_few(hint: bool) -> str:
    return (
        "Task: find the factual inconsistencies of a TEXT.\n\n"
        "Goal: the TEXT, written from the SOURCE below, may contain factual inconsistencies. Compare it closely "
        "with the SOURCE and record each inconsistency." + ("" if hint else " " + _NONE_RULE) + "\n\n"
        "What counts as a factual inconsistency:\n"
        "- any statement of the TEXT that the SOURCE does not directly support or let you verify;\n"
        "- a wrong name, place, number, event or specific claim.\n\n"
        "Rules:\n"
        "1. Report each distinct inconsistency separately.\n"
        "2. Describe each one briefly and precisely: " + _QUOTE_RULE + ".\n"
        "3. Report only factual discrepancies, not differences of style or structure.\n"
        "4. Do not report omissions or missing information."
    )


def _task_cot(variant: int) -> str:
    if variant == 1:
        return ("Find every fact in the TEXT that cannot be verified from the SOURCE it was written from, and "
                "describe each of these factual inconsistencies clearly: " + _QUOTE_RULE + ". Think step by step.")
    return ("Find every factual inconsistency in the TEXT by following these steps:\n"
            "1. Read the TEXT carefully and break it into its distinct factual statements.\n"
            "2. Check each statement against the SOURCE it was written from: is it contradicted by the SOURCE "
            "(it conflicts with it), or not verifiable from it (the SOURCE lacks the support it needs)?\n"
            "3. For each inconsistency, describe exactly what is wrong in the TEXT: " + _QUOTE_RULE + ".")


def _answer(descriptions: list[str]) -> str:
    return json.dumps({"inconsistencies": descriptions}, ensure_ascii=False)


def _few_shot_block(variant: int = 1) -> str:
    label = "ANSWER" if variant == 1 else "INCONSISTENCIES"
    parts = ["Here are three worked examples: a SOURCE, a TEXT written from it, and the list of the TEXT's "
             "factual inconsistencies."]
    for i, (source, target, descriptions) in enumerate(FEW_SHOT_EXAMPLES, 1):
        parts.append(f"Example {i}\nSOURCE:\n{source}\nTEXT:\n{target}\n{label}:\n{_answer(descriptions)}")
    parts.append("Now the real task: answer in the same format as the examples.")
    return "\n\n".join(parts).replace("$", "$$")


def _cot_instructions(hint: bool, variant: int = 1) -> str:
    """What a chain-of-thought reply must end with (also the repair request's format hint)."""
    fields = reply_schema(hint).format_instructions().splitlines()
    if fields and fields[0].startswith("Answer with"):
        fields = fields[1:]
    if variant == 1:
        text = (f'At the end of your reply, write a line "{FINAL_MARKER}" and after it one JSON object that lists '
                "each fact that cannot be verified with a clear description of the inconsistency, and nothing "
                "after it.")
    else:
        text = (f'Think step by step, and at the end of your reply write a line "{FINAL_MARKER}" and after it one '
                "JSON object with a clear description of each mistake, and nothing after it. Report only what is "
                "wrong in the TEXT." + ("" if hint else f' If you found no factual inconsistency, the list after '
                                                         f'"{FINAL_MARKER}" is empty.'))
    return (text + " Its fields:\n" + "\n".join(fields)).replace("$", "$$")


def _localize_prompt(style: str, hint: bool, variant: int) -> PromptTemplate:
    parts = [_HINTS[variant]] if hint else []
    if style == "cot":
        parts += [_task_cot(variant), _cot_instructions(hint, variant), _INPUTS]
    else:
        if variant == 1:
            parts.append(_task_v1(hint))
        else:
            parts.append(_task_v2_few(hint) if style == "few_shot" else _task_v2_zero(hint))
        if style == "few_shot":
            parts.append(_few_shot_block(variant))
        parts += ["$format", _INPUTS]
    name = f"localize_{style}" + ("" if variant == 1 else f"_v{variant}") + ("_hint" if hint else "")
    return PromptTemplate(name=name, version="3" if variant == 1 else "1", system=_SYSTEM, user="\n\n".join(parts),
                          reply=None if style == "cot" else reply_schema(hint))


LOCALIZE_PROMPTS: dict[tuple[str, bool, int], PromptTemplate] = {
    (style, hint, variant): _localize_prompt(style, hint, variant)
    for style in STYLES for hint in (False, True) for variant in VARIANTS
}
"""Every localization prompt, by (style, hint, variant)."""

BINARY_PROMPT = PromptTemplate(
    name="localize_binary_filter",
    version="2",
    system=_SYSTEM,
    user=(
        "Decide whether the TEXT is factually consistent with the SOURCE: it is consistent only if every piece "
        "of information in the TEXT is supported by the SOURCE.\n\n"
        'Reason step by step, then end your reply with a last line that reads exactly "Final answer: yes" '
        '(the TEXT is consistent) or "Final answer: no" (it is not), and nothing after it.\n\n'
        f"{_INPUTS}"
    ),
)

# ------------------------------------------------------------------------------------------------ steps


class DescriptionLocalizer:
    """One call that lists the target's inconsistencies as descriptions (``[]`` = none found)."""

    def __init__(self, method: Localize):
        self.llm = method.llm
        self.style = method.opts.style
        self.hint = method.opts.hint
        self.variant = method.variant
        self.prompt = method.prompt(LOCALIZE_PROMPTS[(self.style, self.hint, self.variant)])

    async def __call__(self, source: str, target: str) -> StepResult[list[str]]:
        messages = self.prompt.render(source=source, target=target)
        if self.style == "cot":
            hint = _cot_instructions(self.hint, self.variant).replace("$$", "$")
            return await generate_parsed(self.llm, messages, lambda text: parse_final_output(text, self.hint, target),
                                         format_hint=hint)
        # the schema goes to the backend (JSON mode); the parse adds the check against copied examples
        return await generate_reply(self.llm, messages, reply_schema(self.hint),  # type: ignore[return-value]
                                    parse=lambda text: parse_localization(text, self.hint, target))  # type: ignore[arg-type, return-value]


class BinaryFilter:
    """Step 1 of the 2-step variant with the same model: is the target consistent (True) or not?"""

    def __init__(self, method: Localize):
        self.llm = method.llm
        self.prompt = method.prompt(BINARY_PROMPT)

    async def __call__(self, source: str, target: str) -> StepResult[bool]:
        return await generate_parsed(self.llm, self.prompt.render(source=source, target=target), parse_binary_verdict,
                                     format_hint='your reasoning, then a last line that is exactly "Final answer: '
                                                 'yes" or "Final answer: no"')


def description_score(n: int) -> float:
    """1 when nothing was found, then 1/2, 1/3, ...: see the module docstring for why."""
    return 1.0 / (1 + n)


def findings_from_descriptions(descriptions: list[str], target: str) -> list[Finding]:
    return [Finding(description=d, kind="inconsistent", target_spans=spans_for_description(d, target))
            for d in descriptions]


# ------------------------------------------------------------------------------------------------ method


class LocalizeOptions(MethodOptions):
    style: Style = "cot"
    """zero_shot, few_shot (three worked examples) or cot (reasoning, then a marked final answer)."""

    filter: str | None = None
    """2-step variant: self (the same model answers yes/no first), oracle (gold labels, bench only), or a method name."""

    hint: bool = False
    """2-step only: tell the localizer the target is known to contain an inconsistency."""

    filter_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """filter=<method>: the score below which the target counts as inconsistent; None: in the bench, the one with the best F1 on the dev split (FINAL's protocol), in a single check that method's own threshold."""

    filter_options: dict[str, Any] = Field(default_factory=dict)
    """filter=<method>: options for that method."""

    variant: Literal[1, 2, "auto"] = "auto"
    """Prompt wording: 1 (short) or 2 (explicit criteria), FINAL's two per style; auto: the bench picks the one with the higher FINAL F1 on the dev split, per model (a single check uses 1)."""

    @field_validator("variant", mode="before")
    @classmethod
    def _variant_number(cls, value: object) -> object:
        if isinstance(value, str) and value.strip() in ("1", "2"):
            return int(value.strip())
        return value

    @field_validator("filter", mode="before")
    @classmethod
    def _no_filter(cls, value: object) -> object:
        return None if isinstance(value, str) and value.strip().lower() in ("", "none") else value

    @field_validator("filter")
    @classmethod
    def _known_filter(cls, value: str | None) -> str | None:
        if value is None or value in ("self", "oracle"):
            return value
        if value == "localize":
            raise ValueError("localize cannot be its own filter")
        try:
            method_class(value)
        except KeyError as exc:
            raise ValueError(f"filter must be self, oracle or a method name: {exc.args[0]}") from None
        return value

    @model_validator(mode="after")
    def _hint_needs_filter(self) -> LocalizeOptions:
        if self.hint and self.filter is None:
            raise ValueError("hint=True is for the 2-step variant: it needs a filter (self, oracle or a method name)")
        return self


@register_method
class Localize(Method):
    name = "localize"
    description = ("End-to-end LLM localization (FINAL): list each inconsistency as a self-contained "
                   "description, mapped to target spans; styles zero_shot/few_shot/cot, optional 2-step filter.")
    Options = LocalizeOptions
    opts: LocalizeOptions
    prompts = tuple(LOCALIZE_PROMPTS.values()) + (BINARY_PROMPT,)
    default_threshold = 0.75

    @property
    def variant(self) -> int:
        """The prompt variant this instance sends: ``variant`` when it is 1 or 2; with ``auto`` (resolved by the
        bench on a dev split, see halluscope.bench.final_protocol) a single check uses variant 1."""
        return 1 if self.opts.variant == "auto" else int(self.opts.variant)

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(LOCALIZE_PROMPTS[(self.opts.style, self.opts.hint, self.variant)])]
        return used + ([self.prompt(BINARY_PROMPT)] if self.opts.filter == "self" else [])

    async def run(self, source: str, target: str) -> Report:
        if self.opts.filter == "oracle":
            return Report(method=self.name, unscored_reason=(
                "filter=oracle uses gold labels, so it only runs on labelled examples (the bench harness)"))
        if self.opts.filter is None:
            return await self._localize(source, target, {})
        consistent, info, error = await self._filter_step(source, target)
        if error is not None:
            return Report(method=self.name, unscored_reason=f"2-step filter failed: {error}", details={"filter": info})
        return await self._after_filter(source, target, bool(consistent), info)

    async def run_example(self, example: Example) -> Report:
        if self.opts.filter != "oracle":
            return await self.run(example.source, example.target)
        label = example.label
        if label is None and example.descriptions is not None:
            label = 0 if example.descriptions else 1
        if label is None:
            return Report(method=self.name, unscored_reason=f"example {example.id} has no gold label for filter=oracle")
        info = {"kind": "oracle", "consistent": label == 1}
        return await self._after_filter(example.source, example.target, label == 1, info)

    async def _after_filter(self, source: str, target: str, consistent: bool, info: dict[str, Any]) -> Report:
        if consistent:
            return Report(method=self.name, score=1.0, subscores={"descriptions": 0.0},
                          details={"filter": info, "localized": False, "descriptions": []})
        return await self._localize(source, target, {"filter": info})

    async def _filter_step(self, source: str, target: str) -> tuple[bool | None, dict[str, Any], str | None]:
        if self.opts.filter == "self":
            step = await BinaryFilter(self)(source, target)
            return step.value, {"kind": "self", "consistent": step.value}, step.error
        from halluscope.methods import get_method

        if self.opts.filter is None:
            raise ValueError("localize: no filter method is set")
        method = get_method(self.opts.filter, llm=self.llm, config=self.config, **self.opts.filter_options)
        # run() (not acheck): the filter's calls land in this check's call log, so in this report's calls
        try:
            report = await method.run(source, target)
        finally:
            method.close()  # built for this check: e.g. probe judges' clients go with it
        threshold = self.opts.filter_threshold if self.opts.filter_threshold is not None else method.default_threshold
        info = {"kind": "method", "method": self.opts.filter, "score": report.score, "threshold": threshold,
                "consistent": None if report.score is None else report.score >= threshold}
        if report.score is None:
            return None, info, f"{self.opts.filter} could not score: {report.unscored_reason}"
        return report.score >= threshold, info, None

    async def _localize(self, source: str, target: str, details: dict[str, Any]) -> Report:
        step = await DescriptionLocalizer(self)(source, target)
        if step.value is None:
            return Report(method=self.name, unscored_reason=f"localization reply unusable: {step.error}",
                          details=details)
        descriptions: list[str] = step.value
        findings = findings_from_descriptions(descriptions, target)
        details = {**details, "localized": True, "descriptions": descriptions, "prompt_variant": self.variant}
        if self.opts.variant == "auto":
            details["prompt_variant_note"] = "variant=auto is chosen on a dev split by the bench; a single check uses 1"
        return Report(method=self.name, score=description_score(len(descriptions)),
                      subscores={"descriptions": float(len(descriptions)),
                                 "located": float(sum(bool(f.target_spans) for f in findings))},
                      findings=findings, details=details)
