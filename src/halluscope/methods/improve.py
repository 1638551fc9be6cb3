"""``improve``: the reason-assisted improver (RAI) of DCR (seed 001, §3.3, Algorithm 1, App. F-G).

Each round: the sentences DCR judged inconsistent are rewritten by the LLM, using DCR's reason for each
and the source; sentences judged consistent are never touched (their text is kept byte for byte). The
rewritten text is then evaluated again by the same DCE + AMC. Rounds stop when the text is consistent,
after ``rounds`` rounds, or when a rewrite cannot be used (unparseable, empty, or unchanged).

Nothing is returned as a fix unless it was re-verified: ``details["improved_target"]`` is the best-scoring
re-evaluated text, and it differs from the original only if its verified score is strictly higher than the
original's (ties go to the earlier text). The Report itself (score, verdicts, findings) is about the target
that was given; ``subscores["final_score"]`` is the score of ``improved_target``.

``details`` holds: ``rounds`` (one :class:`ImprovementRound` per evaluated text, round 0 = the original),
``improved_target``, ``improved`` (bool), ``best_round``, ``stop_reason`` and ``diff`` (a unified diff with
one sentence per line, original vs improved). With ``level="paragraph"`` the whole text is rewritten at once.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from halluscope.llm.structured import generate_parsed
from halluscope.methods import register_method
from halluscope.methods.dcr import DCR, AmcMode, DcrEvaluation, Level, parse_sentence_number
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import LLMCall, Report
from halluscope.text import ParseError, Sentence, extract_json, split_sentences

RAI_SENTENCE_PROMPT = PromptTemplate(
    name="rai_sentence",
    version="1",
    system="You are a careful editor who corrects texts so that they say only what their source supports.",
    user=(
        "A reviewer found that some sentences of a TEXT are not consistent with the SOURCE the text is based "
        "on. Rewrite each of those sentences so that everything it says is supported by the SOURCE.\n\n"
        "How to rewrite:\n"
        "- Read the reviewer's reason to see exactly what is wrong.\n"
        "- Correct wrong details from the SOURCE, and drop details the SOURCE does not contain. Keep the rest "
        "of the sentence, its role in the text and its style, and change as little as possible.\n"
        "- Do not add anything the SOURCE does not say.\n"
        '- If no part of a sentence can be supported by the SOURCE, give "" as its rewrite to delete it.\n\n'
        "SOURCE:\n$source\n\n"
        "FULL TEXT, for context:\n$target\n\n"
        "SENTENCES TO REWRITE, each with the reviewer's reason:\n$flagged\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"rewrites": [{"id": <sentence number>, "improved_sentence": "<the rewritten sentence>"}]}\n'
        "Give one entry for each sentence listed above, and only for those."
    ),
)

RAI_PARAGRAPH_PROMPT = PromptTemplate(
    name="rai_paragraph",
    version="1",
    system="You are a careful editor who corrects texts so that they say only what their source supports.",
    user=(
        "A reviewer found that the TEXT below is not consistent with the SOURCE it is based on, for the reason "
        "given. Rewrite the TEXT so that everything it says is supported by the SOURCE: correct wrong details "
        "from the SOURCE, drop details the SOURCE does not contain, keep everything else, its purpose and its "
        "style, and add nothing the SOURCE does not say.\n\n"
        "SOURCE:\n$source\n\nTEXT:\n$target\n\nREVIEWER'S REASON:\n$reason\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"improved_text": "<the rewritten text>"}'
    ),
)

RAI_PROMPTS = (RAI_SENTENCE_PROMPT, RAI_PARAGRAPH_PROMPT)


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


# ---------------------------------------------------------------------------------------------- parsing


def parse_rai_sentences(text: str, flagged: set[int], n: int) -> tuple[dict[int, str], list[int]]:
    """``{0-based sentence index: rewrite}`` for flagged sentences, and the ids (1-based) of rewrites for
    sentences that were not flagged (ignored). Raises ParseError when no flagged sentence was rewritten."""
    data = extract_json(text)
    items: Any = data
    if isinstance(data, dict):
        items = next((data[k] for k in ("rewrites", "sentences", "improved", "items") if isinstance(data.get(k), list)),
                     None)
        if items is None and isinstance(data.get("improved_sentence"), str):
            items = [data]
    if not isinstance(items, list):
        raise ParseError("no list of rewrites in the reply")
    rewrites: dict[int, str] = {}
    ignored: list[int] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        new = next((item[k] for k in ("improved_sentence", "improved", "rewrite", "new_sentence")
                    if isinstance(item.get(k), str)), None)
        index = next((parse_sentence_number(item[k], n) for k in ("id", "sentence_id", "sentence_number", "number")
                      if k in item), None)
        if new is None or index is None:
            continue
        if index in flagged:
            rewrites.setdefault(index, " ".join(new.split()))
        else:
            ignored.append(index + 1)
    if not rewrites:
        raise ParseError("the reply rewrites none of the flagged sentences")
    return rewrites, ignored


def parse_rai_paragraph(text: str) -> str:
    data = extract_json(text, dict)
    for key in ("improved_text", "improved_summary", "improved", "text", "summary"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    raise ParseError("the reply has no non-empty 'improved_text'")


# ---------------------------------------------------------------------------------------------- splicing


def splice(text: str, sentences: list[Sentence], rewrites: dict[int, str]) -> str:
    """``text`` with the given sentences replaced; everything else is kept exactly. An empty rewrite deletes
    the sentence together with the whitespace after it (or before it, for the last sentence)."""
    out = text
    for index in sorted(rewrites, reverse=True):  # right to left keeps earlier offsets valid
        span = sentences[index].span
        start, end = span.start, span.end
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


# ------------------------------------------------------------------------------------------------- loop


class _Rewrite(BaseModel):
    text: str | None = None
    changes: list[SentenceChange] = Field(default_factory=list)
    ignored: list[int] = Field(default_factory=list)
    error: str | None = None


async def _rewrite(dcr: DCR, source: str, evaluation: DcrEvaluation, calls: list[LLMCall]) -> _Rewrite:
    flagged = evaluation.inconsistent_indices
    verdicts = evaluation.verdicts
    if evaluation.level == "paragraph":
        prompt = apply_overrides(RAI_PARAGRAPH_PROMPT, dcr.config.prompts_dir)
        parsed = await generate_parsed(
            dcr.llm, prompt.render(source=source, target=evaluation.target, reason=verdicts[0].reason),
            parse_rai_paragraph, params=dcr.llm.params(json_mode=True),
            format_hint='one JSON object {"improved_text": "..."}')
        calls.extend(parsed.calls)
        if parsed.value is None:
            return _Rewrite(error=parsed.error)
        change = SentenceChange(sentence=1, before=evaluation.target.strip(), after=parsed.value,
                                reason=verdicts[0].reason)
        return _Rewrite(text=parsed.value, changes=[change])
    sentences = evaluation.sentences
    listing = "\n".join(
        f"[{i + 1}] {' '.join(sentences[i].text.split())}\n    reason: {' '.join(verdicts[i].reason.split())}"
        for i in flagged)
    prompt = apply_overrides(RAI_SENTENCE_PROMPT, dcr.config.prompts_dir)
    parsed = await generate_parsed(
        dcr.llm, prompt.render(source=source, target=evaluation.target, flagged=listing),
        lambda text: parse_rai_sentences(text, set(flagged), len(sentences)),
        params=dcr.llm.params(json_mode=True),
        format_hint='one JSON object {"rewrites": [{"id": 2, "improved_sentence": "..."}]}')
    calls.extend(parsed.calls)
    if parsed.value is None:
        return _Rewrite(error=parsed.error)
    rewrites, ignored = parsed.value
    rewrites = {i: new for i, new in rewrites.items() if new != sentences[i].text}
    changes = [SentenceChange(sentence=i + 1, before=sentences[i].text, after=new, reason=verdicts[i].reason)
               for i, new in sorted(rewrites.items())]
    return _Rewrite(text=splice(evaluation.target, sentences, rewrites), changes=changes, ignored=ignored)


def _round(number: int, evaluation: DcrEvaluation, changes: list[SentenceChange] | None = None,
           ignored: list[int] | None = None) -> ImprovementRound:
    return ImprovementRound(
        round=number, text=evaluation.target, score=evaluation.score, consistent=evaluation.consistent,
        inconsistent_sentences=[i + 1 for i in evaluation.inconsistent_indices],
        unscored_reason=evaluation.unscored_reason, changes=list(changes or []), ignored_rewrites=list(ignored or []),
    )


async def improve_loop(dcr: DCR, source: str, evaluation: DcrEvaluation, report: Report, max_rounds: int) -> Report:
    """Run up to ``max_rounds`` RAI rounds starting from ``evaluation`` (the original target's) and return
    ``report`` with the rounds, the verified improved text and the diff added."""
    rounds = [_round(0, evaluation)]
    extra_calls: list[LLMCall] = []
    current = evaluation
    stop_reason = f"reached the maximum of {max_rounds} round(s)"
    for number in range(1, max_rounds + 1):
        if current.consistent:
            stop_reason = "consistent"
            break
        if current.score is None:
            stop_reason = f"could not evaluate the text of round {number - 1}: {current.unscored_reason}"
            break
        if not current.inconsistent_indices:
            stop_reason = "no sentence was judged inconsistent (the others could not be judged)"
            break
        rewrite = await _rewrite(dcr, source, current, extra_calls)
        if rewrite.text is None or rewrite.error:
            rounds[-1].rewrite_error = rewrite.error
            stop_reason = f"the rewrite of round {number} could not be used: {rewrite.error}"
            break
        if not rewrite.text.strip():
            rounds[-1].rewrite_error = "the rewrite deleted the whole text"
            stop_reason = f"the rewrite of round {number} deleted the whole text"
            break
        if rewrite.text == current.target:
            rounds[-1].rewrite_error = "the rewrite changed nothing"
            stop_reason = f"the rewrite of round {number} changed nothing"
            break
        current = await dcr.evaluate(source, rewrite.text)
        extra_calls += current.calls
        extra_calls += [c for v in current.verdicts for c in v.calls]
        rounds.append(_round(number, current, rewrite.changes, rewrite.ignored))
    else:
        if current.consistent:
            stop_reason = "consistent"

    original = rounds[0]
    best = original
    for r in rounds[1:]:
        if r.score is not None and (best.score is None or r.score > best.score):
            best = r
    improved = best.round > 0 and original.score is not None
    improved_target = best.text if improved else original.text
    details = dict(report.details)
    details.update({
        "rounds": [r.model_dump() for r in rounds],
        "max_rounds": max_rounds,
        "improved_target": improved_target,
        "improved": improved,
        "best_round": best.round if improved else 0,
        "stop_reason": stop_reason,
        "diff": sentence_diff(original.text, improved_target) if improved else "",
    })
    subscores = dict(report.subscores)
    subscores.update({"initial_score": original.score,
                      "final_score": best.score if improved else original.score,
                      "rounds_run": float(len(rounds) - 1)})
    return report.model_copy(update={"details": details, "subscores": subscores,
                                     "calls": list(report.calls) + extra_calls})


@register_method
class Improve(DCR):
    """DCR evaluation followed by up to ``rounds`` rounds of reason-assisted rewriting."""

    name = "improve"
    description = ("DCR + RAI: rewrite the sentences DCR flags, re-verify, repeat up to `rounds` times; "
                   "the report scores the given target and carries the verified improved text and a diff.")
    prompts = DCR.prompts + RAI_PROMPTS

    def __init__(self, llm=None, config=None, rounds: int = 2, level: Level = "sentence", amc: AmcMode = "llm",
                 retrieval: bool = False, top_k: int = 3, window: int = 1, retriever: str = "auto"):
        if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= 10:
            raise ValueError(f"rounds must be an integer in 1..10, got {rounds!r}")
        super().__init__(llm, config, level=level, amc=amc, retrieval=retrieval, top_k=top_k, window=window,
                         retriever=retriever, improve=rounds)

    def options(self) -> dict[str, Any]:
        opts = super().options()
        opts["rounds"] = opts.pop("improve")
        return opts
