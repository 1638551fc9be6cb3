"""The six LLM rewrite perturbations: one prompt each, and the stage that asks for, checks and keeps a rewrite.

Each rewrite is applied to the whole target as in the paper, or sentence by sentence with
``unit="sentence"`` (shorter prompts for small models). A reply that fails :func:`parse_rewritten` or
:func:`check_rewrite` gets one repair request; after that the item is skipped with the reason and the raw
replies kept -- the original is never passed off as a perturbation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, get_args

from halluscope.generators.perturb.checks import (
    FORMAT_HINT,
    check_rewrite,
    parse_rewritten,
    reply_is_tagged,
    rewrite_stats,
)
from halluscope.generators.perturb.rows import PerturbOutcome, Unit, perturbed_row, skipped, usage_of
from halluscope.llm import LLM, GenerateParams, LLMError
from halluscope.llm.structured import generate_parsed
from halluscope.options import StageOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Example, LLMCall, StepResult
from halluscope.stages import PromptResolver, same_prompt
from halluscope.text import Sentence, split_sentences
from halluscope.text.parsing import ParseError

_REWRITE_SYSTEM = (
    "You edit texts for a robustness test of fact-checking tools. Your edit changes how the text is "
    "written, never what it says: every fact, name, number, date, relation and event order in the original "
    "must still be stated in your version, and you must not add, drop, soften or strengthen any "
    "information. Do not add explanations, notes or commentary."
)
_REWRITE_FORMAT = (
    "\n\nReturn the complete edited text between <rewritten> and </rewritten>, and nothing else inside "
    "the tags.\n\nTEXT:\n$text"
)


def _rewrite_prompt(name: str, instruction: str) -> PromptTemplate:
    return PromptTemplate(
        name=f"perturb_{name}", version="1", system=_REWRITE_SYSTEM, user=instruction + _REWRITE_FORMAT
    )


REWRITE_PROMPTS: dict[str, PromptTemplate] = {
    "paraphrased": _rewrite_prompt(
        "paraphrased",
        "Paraphrase the text below. Use different wording and different sentence structures throughout, so "
        "that a reader recognises the same content although few phrases are reused verbatim.",
    ),
    "simplified": _rewrite_prompt(
        "simplified",
        "Make the text below easier to read. Break long, complex or compound sentences into several short, "
        "simple sentences and prefer plain constructions. Only the sentence structure may change; every "
        "piece of information stays.",
    ),
    "synonym_replaced": _rewrite_prompt(
        "synonym_replaced",
        "Replace a number of common content words in the text below (nouns, verbs, adjectives, adverbs) with "
        "close synonyms that keep the meaning in context. Keep names, numbers and the sentence structure as "
        "they are.",
    ),
    "less_diverse": _rewrite_prompt(
        "less_diverse",
        "Rewrite the text below with a smaller, more repetitive vocabulary: where it uses several different "
        "words for similar things or actions, use one plain, frequent word each time, even if that makes the "
        "style repetitive.",
    ),
    "negated": _rewrite_prompt(
        "negated",
        "Rewrite the text below so that several of its statements are expressed through a negation that is "
        "logically equivalent to the original statement -- for example 'the door was open' becomes 'the door "
        "was not closed', and 'everyone agreed' becomes 'nobody disagreed'. Each rewritten statement must mean "
        "exactly what the original statement meant; do not negate a statement without compensating for it.",
    ),
    "compressed": _rewrite_prompt(
        "compressed",
        "Rewrite the text below more concisely: cut redundancy, filler and wordy phrasing and merge sentences "
        "where that helps, while still stating every fact the text states.",
    ),
}


RewriteName = Literal["paraphrased", "simplified", "synonym_replaced", "less_diverse", "negated", "compressed"]
assert set(get_args(RewriteName)) == set(REWRITE_PROMPTS), "RewriteName must list every rewrite prompt"


class RewritePerturbation:
    """An LLM rewrite perturbation (paraphrased, simplified, ...) of one Example's target."""

    name = "perturb_rewrite"  # a generator step built by PerturbGenerator, not a registered stage

    class Options(StageOptions):
        perturbation: RewriteName = "paraphrased"
        """Which rewrite (each has its own prompt)."""

        unit: Unit = "target"
        """Rewrite the whole target at once, or sentence by sentence."""

        require_tags: bool = False
        """Refuse a reply without the rewritten text inside its tags."""

    @classmethod
    def from_options(
        cls, model: LLM, options: RewritePerturbation.Options, *, prompts: PromptResolver = same_prompt
    ) -> RewritePerturbation:
        return cls(
            options.perturbation,
            model,
            prompts(REWRITE_PROMPTS[options.perturbation]),
            unit=options.unit,
            require_tags=options.require_tags,
        )

    def __init__(
        self, perturbation: str, llm: LLM, prompt: PromptTemplate, *, unit: Unit = "target", require_tags: bool = False
    ):
        if perturbation not in REWRITE_PROMPTS:
            raise ValueError(f"{perturbation!r} is not an LLM rewrite perturbation")
        self.perturbation = perturbation
        self.llm = llm
        self.prompt = prompt
        self.unit = unit
        self.require_tags = require_tags

    def _params(self, text: str) -> GenerateParams:
        # a rewrite can be longer than its input; leave room for the tags and a little preamble
        return self.llm.params(max_tokens=max(256, 2 * self.llm.count_tokens(text) + 128))

    async def _rewrite(self, text: str, validate: Callable[[str], None]) -> StepResult[str]:
        def parse(reply: str) -> str:
            rewritten = parse_rewritten(reply, require_tags=self.require_tags)
            validate(rewritten)
            return rewritten

        return await generate_parsed(
            self.llm, self.prompt.render(text=text), parse, params=self._params(text), format_hint=FORMAT_HINT
        )

    async def __call__(self, original: Example) -> PerturbOutcome:
        target = original.target
        calls: list[LLMCall] = []
        accepted: list[str] = []  # the raw replies whose text was used

        def skip(reason: str) -> PerturbOutcome:
            return skipped(original, self.perturbation, reason, calls)

        try:
            if self.unit == "target":
                parsed = await self._rewrite(target, lambda t: check_rewrite(self.perturbation, target, t))
                calls.extend(parsed.calls)
                if parsed.value is None:
                    return skip(parsed.error or "unparseable reply")
                perturbed = parsed.value
                accepted.append(parsed.raw)
            else:
                sentences = split_sentences(target)
                if not sentences:
                    return skip("the target has no sentences")
                # sentences run one after another: the embedded model is serial anyway, and a failure
                # stops the item early instead of spending calls on the rest
                pieces: list[str] = []
                for sentence in sentences:
                    parsed = await self._rewrite(
                        sentence.text,
                        lambda t, s=sentence.text: check_rewrite(self.perturbation, s, t, part=True),  # type: ignore[misc]
                    )
                    calls.extend(parsed.calls)
                    if parsed.value is None:
                        return skip(f"sentence {sentence.index}: {parsed.error or 'unparseable reply'}")
                    pieces.append(parsed.value)
                    accepted.append(parsed.raw)
                perturbed = _replace_sentences(target, sentences, pieces)
                try:
                    check_rewrite(self.perturbation, target, perturbed)
                except ParseError as exc:
                    return skip(str(exc))
        except LLMError as exc:
            return skip(f"LLM error: {exc}")
        meta = {
            "model": self.llm.name,
            "prompt": f"{self.prompt.name}@{self.prompt.version}",
            "unit": self.unit,
            "reply_format": "tagged" if all(reply_is_tagged(r) for r in accepted) else "untagged",
            "stats": rewrite_stats(target, perturbed),
            "usage": usage_of(calls).model_dump(),
        }
        return PerturbOutcome(
            self.perturbation,
            example=perturbed_row(original, self.perturbation, perturbed, meta),
            usage=usage_of(calls),
        )


def _replace_sentences(text: str, sentences: Sequence[Sentence], replacements: Sequence[str]) -> str:
    out: list[str] = []
    cursor = 0
    for sentence, new in zip(sentences, replacements):
        out.append(text[cursor : sentence.span.start])
        out.append(new)
        cursor = sentence.span.end
    out.append(text[cursor:])
    return "".join(out)
