"""``localize``: end-to-end LLM localization of factual inconsistencies as free-form descriptions (FINAL,
seed 002, §2, §4.1, App. C, H.2-H.3).

One call asks the model to list every inconsistency of the target as a self-contained description, or
"None". Styles: ``zero_shot``, ``few_shot`` (three worked examples written for halluscope) and ``cot``
(reason first, then the list after a ``Final Output:`` marker, which is where the list is parsed from).

2-step variants (``filter=...``): a binary decision first; only a target judged inconsistent is localized.
``filter="self"`` asks the same model (step-by-step, then "Final answer: yes/no"); ``filter="<method>"``
runs another registered method and labels by ``filter_threshold`` (default: that method's own threshold);
``filter="oracle"`` uses the gold label and therefore only works on labelled examples in the bench harness
(:meth:`Localize.run_example`). ``hint=True`` (2-step only) tells the localizer that the target is known to
contain an inconsistency and drops the "None" option; if the model still answers None it is kept as none.

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

import re
from typing import Any, Literal

from halluscope.llm.structured import generate_parsed
from halluscope.methods import method_class, register_method
from halluscope.methods._descriptions import parse_description_list, spans_for_description
from halluscope.methods.base import Method
from halluscope.methods.dcr import verdict_words
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Example, Finding, LLMCall, Report
from halluscope.stages import register_stage
from halluscope.text import ParseError

Style = Literal["zero_shot", "few_shot", "cot"]
STYLES: tuple[str, ...] = ("zero_shot", "few_shot", "cot")
FINAL_MARKER = "Final Output:"
_SYSTEM = "You are a meticulous fact-checker who compares texts with the source documents they are based on."

_TASK = (
    "Find every factual inconsistency in the TEXT with respect to the SOURCE it was written from (the TEXT "
    "may be, for example, a summary of the SOURCE or an answer based on it). A factual inconsistency is any "
    "piece of information in the TEXT that the SOURCE contradicts, or that cannot be verified from the "
    "SOURCE. Report only factual inconsistencies: information the TEXT leaves out is not one, and neither "
    "are style or grammar.\n\n"
    "Describe each inconsistency separately, in one self-contained sentence: quote in double quotes the "
    "words of the TEXT it is about, and say what the SOURCE says instead, or that the SOURCE does not say "
    "it. Two wrong details are two inconsistencies. Put each description on its own line, labelled A., B., "
    "C., and so on."
)
_NONE_RULE = "If the TEXT has no factual inconsistency, answer with the single word None."
_HINT = "The TEXT is known to contain at least one factual inconsistency."
_INPUTS = "SOURCE:\n$source\n\nTEXT:\n$target"
_COT_TAIL = (
    "First think step by step: break the TEXT into its individual factual statements and check each one "
    f"against the SOURCE. Then write a line \"{FINAL_MARKER}\" followed by the labelled list of "
    "descriptions{none}."
)

# Worked examples written for halluscope (invented texts; not taken from any benchmark).
_FEW_SHOT = """Here are three worked examples.

Example 1
SOURCE:
The Riverside library will close for renovation from 3 March until the end of May, the city council said on Monday. Books borrowed before the closure can be returned at the Hillgate branch. The work, costing 2.4m pounds, will add a children's wing and a cafe. Council leader Maria Okafor said the project had been delayed twice because of funding problems.
TEXT:
Riverside library will close for six months from March while a 4m-pound children's wing is built, the mayor has announced.
ANSWER:
A. The text says the closure lasts "six months", but the source says it runs from 3 March until the end of May.
B. The text gives the cost as "4m-pound", but the source says the work costs 2.4m pounds.
C. The text says "the mayor has announced" the closure, but the source says the city council announced it and mentions no mayor.

Example 2
SOURCE:
Firefighters rescued two hikers who had been stranded overnight on Ben Carrow after fog rolled in on Saturday afternoon. The pair, both in their 60s, were found cold but unhurt at about 07:00 on Sunday. A mountain rescue spokesperson urged walkers to check the forecast before setting out.
TEXT:
Two hikers stranded overnight on a mountain in fog have been rescued unhurt.
ANSWER:
None

Example 3
SOURCE:
Shares in the electric carmaker Voltra rose 8% on Thursday after it reported its first quarterly profit. The Lyon-based company said deliveries grew by a third compared with the same quarter last year. Chief executive Tom Reyes said the firm would open a second factory in 2026.
TEXT:
Lyon-based carmaker Voltra has reported its first annual profit, sending its shares up 8%, and plans to build two new factories.
ANSWER:
A. The text calls the profit "annual", but the source says it was the company's first quarterly profit.
B. The text says Voltra plans "two new factories", but the source mentions a single second factory.

Now the real task."""


def _localize_prompt(style: str, hint: bool) -> PromptTemplate:
    parts = [_HINT] if hint else []
    parts.append(_TASK if hint else f"{_TASK}\n{_NONE_RULE}")
    if style == "few_shot":
        parts.append(_FEW_SHOT)
    parts.append(_INPUTS)
    if style == "cot":
        none = "" if hint else ', or the word None if there is no inconsistency'
        parts.append(_COT_TAIL.replace("{none}", none))
    else:
        parts.append("ANSWER:")
    return PromptTemplate(name=f"localize_{style}" + ("_hint" if hint else ""), version="1", system=_SYSTEM,
                          user="\n\n".join(parts))


LOCALIZE_PROMPTS: dict[tuple[str, bool], PromptTemplate] = {
    (style, hint): _localize_prompt(style, hint) for style in STYLES for hint in (False, True)
}

BINARY_PROMPT = PromptTemplate(
    name="localize_binary_filter",
    version="1",
    system=_SYSTEM,
    user=(
        "Decide whether the TEXT is factually consistent with the SOURCE: it is consistent only if every piece "
        "of information in the TEXT is supported by the SOURCE.\n\n"
        f"{_INPUTS}\n\n"
        'Reason step by step, then end your reply with a last line that reads exactly "Final answer: yes" '
        '(the TEXT is consistent) or "Final answer: no" (it is not).'
    ),
)

_FINAL_ANSWER = re.compile(r"final\s+answer\s*[:\-]?\s*\**\s*(yes|no)\b", re.I)
_BARE_ANSWER = re.compile(r"^\W*(yes|no)\W*$", re.I)


def parse_binary_verdict(text: str) -> bool:
    """True (consistent) / False from the last "Final answer: yes|no". Without one, a last line that is only
    "yes"/"no", or that states the verdict in words ("The text is not consistent with the source."), counts.
    Anything else raises ParseError."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    found = _FINAL_ANSWER.findall(text)
    if found:
        return found[-1].lower() == "yes"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    m = _BARE_ANSWER.match(last)
    if m:
        return m.group(1).lower() == "yes"
    if len(last) <= 200 and re.search(r"\b(?:text|summary|answer)\b", last, re.I):
        mark = verdict_words(last)
        if mark is not None:
            return mark == 1
    raise ParseError('no "Final answer: yes/no" in the reply')


@register_stage("localize.describe")
class DescriptionLocalizer:
    """One call that lists the target's inconsistencies as descriptions (``[]`` = none found)."""

    name = "localize.describe"

    def __init__(self, llm, prompt: PromptTemplate, style: str):
        self.llm = llm
        self.prompt = prompt
        self.marker = FINAL_MARKER if style == "cot" else None

    async def __call__(self, source: str, target: str):
        hint = ('your reasoning, then a line "Final Output:" followed by one description per line '
                '(A., B., ...) or None') if self.marker else "one description per line (A., B., ...) or None"
        return await generate_parsed(self.llm, self.prompt.render(source=source, target=target),
                                     lambda text: parse_description_list(text, self.marker), format_hint=hint)


@register_stage("localize.binary")
class BinaryFilter:
    """Step 1 of the 2-step variant with the same model: is the target consistent (True) or not?"""

    name = "localize.binary"

    def __init__(self, llm, prompt: PromptTemplate = BINARY_PROMPT):
        self.llm = llm
        self.prompt = prompt

    async def __call__(self, source: str, target: str):
        return await generate_parsed(self.llm, self.prompt.render(source=source, target=target), parse_binary_verdict,
                                     format_hint='a last line "Final answer: yes" or "Final answer: no"')


def description_score(n: int) -> float:
    """1 when nothing was found, then 1/2, 1/3, ...: see the module docstring for why."""
    return 1.0 / (1 + n)


def findings_from_descriptions(descriptions: list[str], target: str) -> list[Finding]:
    return [Finding(description=d, kind="inconsistent", target_spans=spans_for_description(d, target))
            for d in descriptions]


@register_method
class Localize(Method):
    name = "localize"
    description = ("End-to-end LLM localization (FINAL): list each inconsistency as a self-contained "
                   "description, mapped to target spans; styles zero_shot/few_shot/cot, optional 2-step filter.")
    prompts = tuple(LOCALIZE_PROMPTS.values()) + (BINARY_PROMPT,)
    default_threshold = 0.75

    def __init__(self, llm=None, config=None, style: Style = "cot", filter: str | None = None, hint: bool = False,
                 filter_threshold: float | None = None, filter_options: dict[str, Any] | None = None):
        super().__init__(llm, config)
        if style not in STYLES:
            raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
        if filter in ("", "none", "None"):
            filter = None
        if filter is not None and filter not in ("self", "oracle"):
            method_class(filter)  # raises KeyError naming the available methods
        if hint and filter is None:
            raise ValueError("hint=True is for the 2-step variant: it needs a filter (self, oracle or a method name)")
        self.style: Style = style
        self.filter = filter
        self.hint = bool(hint)
        self.filter_threshold = filter_threshold
        self.filter_options = dict(filter_options or {})

    def options(self) -> dict[str, Any]:
        return {"style": self.style, "filter": self.filter, "hint": self.hint,
                "filter_threshold": self.filter_threshold, "filter_options": self.filter_options}

    @property
    def prompt_version(self) -> str:
        used = [LOCALIZE_PROMPTS[(self.style, self.hint)]] + ([BINARY_PROMPT] if self.filter == "self" else [])
        return ",".join(f"{p.name}@{p.version}" for p in used)

    async def run(self, source: str, target: str) -> Report:
        if self.filter == "oracle":
            return Report(method=self.name, unscored_reason=(
                "filter=oracle uses gold labels, so it only runs on labelled examples (the bench harness)"))
        if self.filter is None:
            return await self._localize(source, target, [], {})
        consistent, info, calls, error = await self._filter_step(source, target)
        if error is not None:
            return Report(method=self.name, unscored_reason=f"2-step filter failed: {error}", calls=calls,
                          details={"filter": info})
        return await self._after_filter(source, target, consistent, info, calls)

    async def run_example(self, example: Example) -> Report:
        if self.filter != "oracle":
            return await self.run(example.source, example.target)
        label = example.label
        if label is None and example.descriptions is not None:
            label = 0 if example.descriptions else 1
        if label is None:
            return Report(method=self.name, unscored_reason=f"example {example.id} has no gold label for filter=oracle")
        info = {"kind": "oracle", "consistent": label == 1}
        return await self._after_filter(example.source, example.target, label == 1, info, [])

    async def _after_filter(self, source: str, target: str, consistent: bool, info: dict[str, Any],
                            calls: list[LLMCall]) -> Report:
        if consistent:
            return Report(method=self.name, score=1.0, subscores={"descriptions": 0.0}, calls=calls,
                          details={"filter": info, "localized": False, "descriptions": []})
        return await self._localize(source, target, calls, {"filter": info})

    async def _filter_step(self, source: str, target: str) -> tuple[bool, dict[str, Any], list[LLMCall], str | None]:
        if self.filter == "self":
            binary = BinaryFilter(self.llm, apply_overrides(BINARY_PROMPT, self.config.prompts_dir))
            parsed = await binary(source, target)
            info = {"kind": "self", "consistent": parsed.value}
            return bool(parsed.value), info, list(parsed.calls), parsed.error
        from halluscope.methods import get_method

        method = get_method(self.filter, llm=self.llm, config=self.config, **self.filter_options)
        # run() (not acheck) so the filter's LLM calls are counted in this report's usage
        report = await method.run(source, target)
        threshold = self.filter_threshold if self.filter_threshold is not None else method.default_threshold
        info = {"kind": "method", "method": self.filter, "score": report.score, "threshold": threshold,
                "consistent": None if report.score is None else report.score >= threshold}
        calls = list(report.calls) + [c for v in report.verdicts for c in v.calls]
        if report.score is None:
            return False, info, calls, f"{self.filter} could not score: {report.unscored_reason}"
        return report.score >= threshold, info, calls, None

    async def _localize(self, source: str, target: str, calls: list[LLMCall], details: dict[str, Any]) -> Report:
        prompt = apply_overrides(LOCALIZE_PROMPTS[(self.style, self.hint)], self.config.prompts_dir)
        parsed = await DescriptionLocalizer(self.llm, prompt, self.style)(source, target)
        calls = calls + parsed.calls
        if parsed.value is None:
            return Report(method=self.name, unscored_reason=f"localization reply unusable: {parsed.error}",
                          calls=calls, details=details)
        descriptions: list[str] = parsed.value
        findings = findings_from_descriptions(descriptions, target)
        details = {**details, "localized": True, "descriptions": descriptions}
        return Report(method=self.name, score=description_score(len(descriptions)),
                      subscores={"descriptions": float(len(descriptions)),
                                 "located": float(sum(bool(f.target_spans) for f in findings))},
                      findings=findings, calls=calls, details=details)
