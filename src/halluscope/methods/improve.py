"""``improve``: the reason-assisted improver (RAI) of DCR (seed 001, §3.3, Algorithm 1, App. F-G).

The one way to run RAI. It is DCR (:mod:`halluscope.methods.dcr`, same options, same verifier -- also a
swapped one) followed by up to ``rounds`` rounds of rewriting. Each round: the sentences DCR judged
inconsistent are rewritten by the LLM, using DCR's reason for each and the source; sentences judged
consistent are never touched (their text is kept byte for byte). The rewritten text is then evaluated again
by the same DCR pipeline. Rounds stop when the text is consistent, after ``rounds`` rounds, or when a rewrite
cannot be used (unusable reply, empty, or unchanged).

Nothing is returned as a fix unless it was re-verified: ``details["improved_target"]`` is the best-scoring
re-evaluated text, and it differs from the original only if its verified score is strictly higher than the
original's (ties go to the earlier text). Scores are DCR's, with its ``amc_weights``: under the default
(``paper``, alpha = beta = 0 over all sentences) a text with a sentence DCR could not mark has no score, so the
rounds stop there (the original) or that rewrite is not a candidate (a later round), with the reason recorded;
``amc_weights=auto`` scores such texts on their judged sentences. The Report itself (score, verdicts, findings) is about the target
that was given; ``subscores["final_score"]`` is the score of ``improved_target``.

``details`` holds: ``rounds`` (one :class:`ImprovementRound` per evaluated text, round 0 = the original),
``improved_target``, ``improved`` (bool), ``best_round``, ``stop_reason`` and ``diff`` (a unified diff with
one sentence per line, original vs improved). With ``level="paragraph"`` the whole text is rewritten at once.

Strict replies: a sentence rewrite is ``{"rewrites": [{"id": <n>, "improved_sentence": "..."}]}`` (ids are
JSON integers; rewrites of sentences that were not flagged are ignored and listed; echoed placeholders are
not rewrites; ``""`` deletes the sentence); a paragraph rewrite is ``{"improved_text": "..."}``, not empty.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.methods import register_method
from halluscope.methods.dcr import DCR, DCR_PROMPTS, DcrOptions
from halluscope.prompts import PromptTemplate
from halluscope.records import Report, Span, Verdict
from halluscope.text import ParseError, split_sentences
from halluscope.text.placeholders import is_placeholder, shown_strings

# ------------------------------------------------------------------------------------------------ replies


class SentenceRewrite(BaseModel):
    """One rewritten sentence, by its number in the TEXT."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    id: int = Field(description="the number of the sentence")
    improved_sentence: str = Field(description="the rewritten sentence, or an empty string to delete it")


class RewritesReply(Reply):
    """RAI at sentence level: one rewrite per sentence listed for rewriting."""

    rewrites: list[SentenceRewrite] = Field(description="one entry for each sentence listed for rewriting, "
                                                        "and only for those")


class ImprovedTextReply(Reply):
    """RAI at paragraph level: the whole rewritten text."""

    improved_text: str = Field(description="the rewritten TEXT")


REWRITE_ECHOES = shown_strings(RewritesReply) | shown_strings(ImprovedTextReply)

# ------------------------------------------------------------------------------------------------ prompts

_SYSTEM = "You are a careful editor who corrects texts so that they say only what their source supports."

RAI_SENTENCE_PROMPT = PromptTemplate(
    name="rai_sentence",
    version="2",
    reply=RewritesReply,
    system=_SYSTEM,
    user=(
        "A reviewer found that some sentences of a TEXT are not consistent with the SOURCE the text is based "
        "on. Rewrite each of those sentences so that everything it says is supported by the SOURCE.\n\n"
        "How to rewrite:\n"
        "- Read the reviewer's reason to see exactly what is wrong.\n"
        "- Correct wrong details from the SOURCE, and drop details the SOURCE does not contain. Keep the rest "
        "of the sentence, its role in the text and its style, and change as little as possible.\n"
        "- Do not add anything the SOURCE does not say.\n"
        '- If no part of a sentence can be supported by the SOURCE, give "" as its rewrite to delete it.\n\n'
        'Give one entry for each sentence listed below, and only for those, with its number as "id".\n\n'
        "$format\n\n"
        "SOURCE:\n$source\n\n"
        "FULL TEXT, for context:\n$target\n\n"
        "SENTENCES TO REWRITE, each with its number and the reviewer's reason:\n$flagged"
    ),
)

RAI_PARAGRAPH_PROMPT = PromptTemplate(
    name="rai_paragraph",
    version="2",
    reply=ImprovedTextReply,
    system=_SYSTEM,
    user=(
        "A reviewer found that the TEXT below is not consistent with the SOURCE it is based on, for the reason "
        "given. Rewrite the TEXT so that everything it says is supported by the SOURCE: correct wrong details "
        "from the SOURCE, drop details the SOURCE does not contain, keep everything else, its purpose and its "
        "style, and add nothing the SOURCE does not say.\n\n"
        "$format\n\nSOURCE:\n$source\n\nTEXT:\n$target\n\nREVIEWER'S REASON:\n$reason"
    ),
)

RAI_PROMPTS = (RAI_SENTENCE_PROMPT, RAI_PARAGRAPH_PROMPT)

# ------------------------------------------------------------------------------------------------ records


class SentenceChange(BaseModel):
    """One rewritten sentence. ``sentence`` is its 1-based number in the text the round started from."""

    model_config = ConfigDict(extra="forbid")

    sentence: int
    before: str
    after: str  # "" = deleted
    reason: str  # DCR's reason for flagging it


class ImprovementRound(BaseModel):
    """One evaluated text. Round 0 is the original target; round r > 0 is the rewrite made in round r."""

    model_config = ConfigDict(extra="forbid")

    round: int
    text: str
    score: float | None
    consistent: bool
    inconsistent_sentences: list[int] = Field(default_factory=list)  # 1-based, in this round's text
    unscored_reason: str | None = None
    changes: list[SentenceChange] = Field(default_factory=list)  # the edits that produced ``text``
    rewrite_error: str | None = None  # why the rewrite of this round's flagged sentences could not be used
    ignored_rewrites: list[int] = Field(default_factory=list)  # ids the model rewrote that were not flagged


# ------------------------------------------------------------------------------------------------ parsing


def parse_rai_sentences(text: str, flagged: set[int], n: int) -> tuple[dict[int, str], list[int]]:
    """``{0-based sentence index: rewrite}`` for flagged sentences, and the ids (1-based, as written) of
    rewrites for sentences that were not flagged (ignored). Echoed placeholders are not rewrites. Raises
    ParseError when the reply is not the declared schema or rewrites no flagged sentence."""
    entries = RewritesReply.parse(text).rewrites
    rewrites: dict[int, str] = {}
    ignored: list[int] = []
    for entry in entries:
        new = " ".join(entry.improved_sentence.split())
        if new and is_placeholder(new, REWRITE_ECHOES):
            continue
        index = entry.id - 1
        if index in flagged and 0 <= index < n:
            rewrites.setdefault(index, new)
        else:
            ignored.append(entry.id)
    if not rewrites:
        raise ParseError("the reply rewrites none of the flagged sentences")
    return rewrites, ignored


def parse_rai_paragraph(text: str) -> str:
    value = ImprovedTextReply.parse(text).improved_text.strip()
    if not value or is_placeholder(value, REWRITE_ECHOES):
        raise ParseError("'improved_text' is empty or a placeholder")
    return value


# ------------------------------------------------------------------------------------------------ splicing


def splice(text: str, spans: Sequence[Span], rewrites: dict[int, str]) -> str:
    """``text`` with the sentences at the given spans replaced; everything else is kept exactly. An empty
    rewrite deletes the sentence together with the whitespace after it (or before it, for the last one)."""
    out = text
    for index in sorted(rewrites, reverse=True):  # right to left keeps earlier offsets valid
        start, end = spans[index].start, spans[index].end
        new = rewrites[index]
        if not new:
            while end < len(out) and out[end] in " \t":
                end += 1
            if not out[end:].strip():  # the last sentence: take the space before it instead
                while start > 0 and out[start - 1] in " \t":
                    start -= 1
        out = out[:start] + new + out[end:]
    return out


def sentence_diff(before: str, after: str) -> str:
    """Unified diff of the two texts with one sentence per line."""
    a = [s.text for s in split_sentences(before)]
    b = [s.text for s in split_sentences(after)]
    return "\n".join(difflib.unified_diff(a, b, "original", "improved", lineterm=""))


# ------------------------------------------------------------------------------------------------ loop


@dataclass(frozen=True)
class Evaluated:
    """One text and DCR's Report on it (the given target, or a rewrite)."""

    text: str
    report: Report

    @property
    def verdicts(self) -> list[Verdict]:
        return self.report.verdicts

    @property
    def score(self) -> float | None:
        return self.report.score

    @property
    def consistent(self) -> bool:
        """Every unit judged, and judged consistent (the paper's score == 1)."""
        return self.score == 1.0 and bool(self.verdicts) and all(v.label == "supported" for v in self.verdicts)

    @property
    def flagged(self) -> list[int]:
        """Indices of the units judged inconsistent."""
        return [i for i, v in enumerate(self.verdicts) if v.label in ("unsupported", "contradicted")]

    def round(self, number: int, changes: Sequence[SentenceChange] = (), ignored: Sequence[int] = ()
              ) -> ImprovementRound:
        return ImprovementRound(round=number, text=self.text, score=self.score, consistent=self.consistent,
                                inconsistent_sentences=[i + 1 for i in self.flagged],
                                unscored_reason=self.report.unscored_reason, changes=list(changes),
                                ignored_rewrites=list(ignored))


@dataclass
class Rewrite:
    """A rewrite of one round: the new text, or the reason there is none."""

    text: str | None = None
    changes: list[SentenceChange] = field(default_factory=list)
    ignored: list[int] = field(default_factory=list)
    error: str | None = None


class ImproveOptions(DcrOptions):
    """RAI's rounds on top of every DCR option (the evaluation of each round is DCR's)."""

    rounds: int = Field(default=2, ge=1, le=10)
    """Most rewrite rounds; each rewrite is re-evaluated by DCR (the paper converges within about 2)."""


@register_method
class Improve(DCR):
    """DCR evaluation followed by up to ``rounds`` rounds of reason-assisted rewriting."""

    name = "improve"
    description = ("DCR + RAI: rewrite the sentences DCR flags, re-verify, repeat up to `rounds` times; "
                   "the report scores the given target and carries the verified improved text and a diff.")
    Options: ClassVar[type[ImproveOptions]] = ImproveOptions
    opts: ImproveOptions
    prompts = DCR_PROMPTS + RAI_PROMPTS

    def used_prompts(self) -> list[PromptTemplate]:
        rai = RAI_PARAGRAPH_PROMPT if self.opts.level == "paragraph" else RAI_SENTENCE_PROMPT
        return super().used_prompts() + [self.prompt(rai)]

    async def run(self, source: str, target: str) -> Report:
        original = Evaluated(target, await super().run(source, target))
        rounds = [original.round(0)]
        current = original
        max_rounds = self.opts.rounds
        stop_reason = f"reached the maximum of {max_rounds} round(s)"
        for number in range(1, max_rounds + 1):
            if current.consistent:
                stop_reason = "consistent"
                break
            if current.score is None:
                stop_reason = f"could not evaluate the text of round {number - 1}: {current.report.unscored_reason}"
                break
            if not current.flagged:
                stop_reason = "no sentence was judged inconsistent (the others could not be judged)"
                break
            rewrite = await self.rewrite(source, current)
            if rewrite.text is None:
                problem = rewrite.error or "no rewrite"
                stop = f"could not be used: {problem}"
            elif not rewrite.text.strip():
                stop = "deleted the whole text"
                problem = f"the rewrite {stop}"
            elif rewrite.text == current.text:
                stop = "changed nothing"
                problem = f"the rewrite {stop}"
            else:
                current = Evaluated(rewrite.text, await super().run(source, rewrite.text))
                rounds.append(current.round(number, rewrite.changes, rewrite.ignored))
                continue
            rounds[-1].rewrite_error = problem
            stop_reason = f"the rewrite of round {number} {stop}"
            break
        else:
            if current.consistent:
                stop_reason = "consistent"
        return self.result(original.report, rounds, stop_reason)

    async def rewrite(self, source: str, evaluated: Evaluated) -> Rewrite:
        """RAI on the units ``evaluated`` flags: the whole text (paragraph level) or the flagged sentences."""
        verdicts = evaluated.verdicts
        if self.opts.level == "paragraph":
            reason = verdicts[0].reason
            step = await generate_reply(self.llm, self.prompt(RAI_PARAGRAPH_PROMPT).render(
                source=source, target=evaluated.text, reason=reason), ImprovedTextReply,
                parse=parse_rai_paragraph)  # type: ignore[arg-type]
            if step.value is None:
                return Rewrite(error=step.error)
            new: str = step.value  # type: ignore[assignment]
            return Rewrite(text=new, changes=[SentenceChange(sentence=1, before=evaluated.text.strip(), after=new,
                                                             reason=reason)])
        flagged = evaluated.flagged
        texts = [v.claim.text for v in verdicts]
        listing = "\n".join(f"[{i + 1}] {' '.join(texts[i].split())}\n    reason: {' '.join(verdicts[i].reason.split())}"
                            for i in flagged)
        n = len(verdicts)
        step = await generate_reply(self.llm, self.prompt(RAI_SENTENCE_PROMPT).render(
            source=source, target=evaluated.text, flagged=listing), RewritesReply,
            parse=lambda text: parse_rai_sentences(text, set(flagged), n))  # type: ignore[arg-type, return-value]
        if step.value is None:
            return Rewrite(error=step.error)
        rewrites, ignored = step.value  # type: ignore[misc]
        rewrites = {i: new for i, new in rewrites.items() if new != texts[i]}
        changes = [SentenceChange(sentence=i + 1, before=texts[i], after=new, reason=verdicts[i].reason)
                   for i, new in sorted(rewrites.items())]
        spans = [v.claim.target_spans[0] for v in verdicts]
        return Rewrite(text=splice(evaluated.text, spans, rewrites), changes=changes, ignored=ignored)

    def result(self, report: Report, rounds: list[ImprovementRound], stop_reason: str) -> Report:
        """``report`` (about the given target) with the rounds, the verified improved text and the diff."""
        original = best = rounds[0]
        for r in rounds[1:]:
            if r.score is not None and (best.score is None or r.score > best.score):
                best = r
        improved = best.round > 0 and original.score is not None
        improved_target = best.text if improved else original.text
        details: dict[str, Any] = {**report.details,
                                   "rounds": [r.model_dump() for r in rounds],
                                   "max_rounds": self.opts.rounds,
                                   "improved_target": improved_target,
                                   "improved": improved,
                                   "best_round": best.round if improved else 0,
                                   "stop_reason": stop_reason,
                                   "diff": sentence_diff(original.text, improved_target) if improved else ""}
        subscores = {**report.subscores, "initial_score": original.score,
                     "final_score": best.score if improved else original.score,
                     "rounds_run": float(len(rounds) - 1)}
        return report.model_copy(update={"details": details, "subscores": subscores})
