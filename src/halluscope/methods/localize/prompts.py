"""The localization prompts (three styles x two wordings, with and without the 2-step hint) and the 2-step
filter's yes/no prompt."""

from __future__ import annotations

import json
from typing import Literal

from halluscope.methods.localize.examples import FEW_SHOT_EXAMPLES
from halluscope.methods.localize.replies import FINAL_MARKER, reply_schema
from halluscope.prompts import PromptTemplate

Style = Literal["zero_shot", "few_shot", "cot"]
STYLES: tuple[str, ...] = ("zero_shot", "few_shot", "cot")
_SYSTEM = "You are a meticulous fact-checker who compares texts with the source documents they are based on."

#
# Two prompt variants per style, as in FINAL (App. C, H.2): the paper writes two wordings of each style and
# keeps, per model, the one with the higher FINAL F1 on the dev split (``variant="auto"`` in the bench, see
# halluscope.methods.localize.protocol). The wording below is halluscope's own; what each variant carries:
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
_QUOTE_RULE = (
    "quote in double quotes the words of the TEXT it is about, and say what the SOURCE says instead, or "
    "that the SOURCE does not say it"
)
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
        "List each inconsistency separately, as a brief and concise description of it: "
        + _QUOTE_RULE
        + "."
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
        + _QUOTE_RULE
        + ". Keep the descriptions concise and about factual inconsistencies only."
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
        return (
            "Find every fact in the TEXT that cannot be verified from the SOURCE it was written from, and "
            "describe each of these factual inconsistencies clearly: " + _QUOTE_RULE + ". Think step by step."
        )
    return (
        "Find every factual inconsistency in the TEXT by following these steps:\n"
        "1. Read the TEXT carefully and break it into its distinct factual statements.\n"
        "2. Check each statement against the SOURCE it was written from: is it contradicted by the SOURCE "
        "(it conflicts with it), or not verifiable from it (the SOURCE lacks the support it needs)?\n"
        "3. For each inconsistency, describe exactly what is wrong in the TEXT: " + _QUOTE_RULE + "."
    )


def _answer(descriptions: list[str]) -> str:
    return json.dumps({"inconsistencies": descriptions}, ensure_ascii=False)


def _few_shot_block(variant: int = 1) -> str:
    label = "ANSWER" if variant == 1 else "INCONSISTENCIES"
    parts = [
        "Here are three worked examples: a SOURCE, a TEXT written from it, and the list of the TEXT's "
        "factual inconsistencies."
    ]
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
        text = (
            f'At the end of your reply, write a line "{FINAL_MARKER}" and after it one JSON object that lists '
            "each fact that cannot be verified with a clear description of the inconsistency, and nothing "
            "after it."
        )
    else:
        text = (
            f'Think step by step, and at the end of your reply write a line "{FINAL_MARKER}" and after it one '
            "JSON object with a clear description of each mistake, and nothing after it. Report only what is "
            "wrong in the TEXT."
            + ("" if hint else f' If you found no factual inconsistency, the list after "{FINAL_MARKER}" is empty.')
        )
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
    return PromptTemplate(
        name=name,
        version="3" if variant == 1 else "1",
        system=_SYSTEM,
        user="\n\n".join(parts),
        reply=None if style == "cot" else reply_schema(hint),
    )


LOCALIZE_PROMPTS: dict[tuple[str, bool, int], PromptTemplate] = {
    (style, hint, variant): _localize_prompt(style, hint, variant)
    for style in STYLES
    for hint in (False, True)
    for variant in VARIANTS
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
