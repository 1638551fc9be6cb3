"""``dcr``: Divide-Conquer-Reasoning consistency evaluation (seed 001, §3.1-3.2, App. G and I).

* **DCE** (divide-conquer evaluator): the target is split into sentences (by us, so every sentence keeps its
  exact character span) and one LLM call judges every sentence against the *whole* source, giving a reason
  per sentence. ``level="paragraph"`` judges the whole target at once (the paper's paragraph-level variant).
* **AMC** (auto-metric converter): each reason is mapped to +1 (consistent) or -1 (not), by an LLM call that
  only reads the reasons (``amc="llm"``, the paper's design) or by the verdict word each reason is asked to
  start with, else the verdict words of its first sentence (``amc="rule"``, no extra call; see
  :func:`rule_mark`).
* **Score**: ``Z = (sum z_i + alpha) / (k + beta)`` over the ``k`` marked reasons, where ``alpha`` and
  ``beta`` remove the reasons that are not about exactly one sentence (App. I): a reason not tied to a
  sentence (e.g. "the two paragraphs are not consistent"), or a second reason about a sentence that already
  has one. For each such reason ``alpha -= z`` and ``beta -= 1``, so ``Z`` is the mean mark of the sentences.
  The score is ``(Z + 1) / 2`` = the fraction of judged sentences that are consistent; a text is consistent
  when the score is 1 (``default_threshold = 1.0``). When a sentence has several reasons, its negative one
  is kept (a sentence is consistent only if nothing said about it is negative).
* Sentences the model gave no usable reason for are ``unscored`` verdicts; the score is over the judged ones
  (``subscores["judged"]`` says how many). No judged sentence at all (e.g. only paragraph-level reasons,
  where ``k + beta = 0``) gives an unscored Report.
* **Long sources**: when the prompt with the whole source does not fit the model (token pre-check, or a
  :class:`ContextOverflowError`), or with ``retrieval=True``, each sentence is judged against each of its
  top-``top_k`` retrieved source snippets (window ``window``) and keeps its best mark (seed 003, Eq. 1-2).
* ``improve=N`` runs the reason-assisted improver (``halluscope.methods.improve``) for up to N rounds.

Audit: calls shared by all sentences (the joint DCE call, the AMC call) are on ``Report.calls``; calls made
for one sentence only (retrieval mode) are on that sentence's ``Verdict.calls``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rapidfuzz import fuzz

from halluscope.llm import ContextOverflowError
from halluscope.llm.structured import generate_parsed
from halluscope.methods import register_method
from halluscope.methods._long_source import prompt_fits, reply_budget
from halluscope.methods.base import Method
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Verdict
from halluscope.stages import register_stage
from halluscope.text import ParseError, Sentence, extract_json, split_sentences

Level = Literal["sentence", "paragraph"]
AmcMode = Literal["llm", "rule"]

_SYSTEM = ("You are a meticulous fact-checker. You compare a text with the source document it is supposed to "
           "be based on, and you explain every judgment.")

DCE_SENTENCE_PROMPT = PromptTemplate(
    name="dcr_dce_sentence",
    version="1",
    system=_SYSTEM,
    user=(
        "Check, one sentence at a time, whether the TEXT is consistent with the SOURCE.\n\n"
        "For each numbered sentence of the TEXT:\n"
        "- work out every piece of information it states: who did what, to whom, when, where, how much or how "
        "many, why, and with what result;\n"
        "- look for each piece in the SOURCE;\n"
        "- the sentence is consistent only if the SOURCE states or directly implies all of it. Anything the "
        "SOURCE contradicts, or that cannot be found in or inferred from the SOURCE, makes it inconsistent.\n"
        "The TEXT does not have to mention everything in the SOURCE: leaving things out is not an error.\n\n"
        "SOURCE:\n$source\n\n"
        "TEXT, one numbered sentence per line:\n$sentences\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"sentences": [{"id": <sentence number>, "reason": "<start with \'Consistent:\' or \'Inconsistent:\', '
        'then explain; when inconsistent, quote the exact words of the sentence that the source does not '
        'support and say what the source says instead>"}], '
        '"is_consistent": <true if every sentence is consistent, otherwise false>}\n'
        "Give exactly one entry per sentence, in order."
    ),
)

DCE_PARAGRAPH_PROMPT = PromptTemplate(
    name="dcr_dce_paragraph",
    version="1",
    system=_SYSTEM,
    user=(
        "Check whether the TEXT as a whole is consistent with the SOURCE.\n\n"
        "Work out every piece of information the TEXT states (who did what, to whom, when, where, how much, "
        "why, with what result) and look for each in the SOURCE. The TEXT is consistent only if the SOURCE "
        "states or directly implies all of it; anything contradicted by the SOURCE, or not found in it, makes "
        "the TEXT inconsistent. Leaving things out is not an error.\n\n"
        "SOURCE:\n$source\n\nTEXT:\n$target\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"reason": "<start with \'Consistent:\' or \'Inconsistent:\', then explain; quote the exact words '
        'of the text that the source does not support>", "is_consistent": <true or false>}'
    ),
)

DCE_EXCERPT_PROMPT = PromptTemplate(
    name="dcr_dce_excerpt",
    version="1",
    system=_SYSTEM,
    user=(
        "Below is an EXCERPT of a long source document and one SENTENCE from a text that is supposed to be "
        "based on that document. Decide whether the EXCERPT supports the SENTENCE: the sentence is consistent "
        "only if the EXCERPT states or directly implies every piece of information in it (who, what, when, "
        "where, how much, why, result). Anything contradicted by the EXCERPT, or not found in it, makes the "
        "sentence inconsistent.\n\n"
        "EXCERPT:\n$source\n\nSENTENCE:\n$sentence\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"reason": "<start with \'Consistent:\' or \'Inconsistent:\', then explain>"}'
    ),
)

AMC_PROMPT = PromptTemplate(
    name="dcr_amc",
    version="1",
    system="You read reviewers' assessments and classify what they conclude.",
    user=(
        "A reviewer compared a text with its source document and wrote the numbered assessments below, each "
        "about one sentence of the text (or about the text as a whole).\n"
        "For each assessment, decide what it concludes:\n"
        "- +1 if it finds the sentence consistent with the source (everything in it is supported);\n"
        "- -1 if it reports any problem: information that is wrong, contradicted, unsupported, not mentioned "
        "in the source, or unclear.\n\n"
        "ASSESSMENTS:\n$reasons\n\n"
        "Answer with one JSON object and nothing else, with one mark per assessment, in order:\n"
        '{"marks": [<+1 or -1>, ...]}\n'
        "There are $count assessments, so the list must have $count marks."
    ),
)

DCR_PROMPTS = (DCE_SENTENCE_PROMPT, DCE_PARAGRAPH_PROMPT, DCE_EXCERPT_PROMPT, AMC_PROMPT)
DCE_REPLY_TOKENS = 1024  # room kept for the DCE reply when checking that a prompt fits the context


# ---------------------------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class RawReason:
    """One reason from a DCE reply. ``sentence_index`` (0-based) is None when it is not about one sentence."""

    text: str
    sentence_index: int | None


@dataclass(frozen=True)
class DceReply:
    reasons: list[RawReason]
    is_consistent: bool | None = None  # the model's own overall verdict; recorded, never used in the score


_REASON_KEYS = ("reason", "reasons", "explanation", "analysis", "assessment", "justification")
_ID_KEYS = ("id", "sentence_id", "sentence_number", "number", "index", "sentence_index")
_LIST_KEYS = ("sentences", "reasons", "reason", "evaluations", "results", "assessments", "items")


_NUMBER_LIKE = re.compile(r"^\W*(?:s|sentence|id|no\.?)?\s*#?\s*(\d{1,4})\W*$", re.I)


def parse_sentence_number(value: Any, n: int) -> int | None:
    """A 0-based index from a 1-based sentence number given as an int or a short string like "2", "[2]", "S2",
    "Sentence 2"; None when absent, out of range, or not number-like (a quoted sentence is not a number)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        m = _NUMBER_LIKE.match(value)
        value = int(m.group(1)) if m else None
    if isinstance(value, int) and 1 <= value <= n:
        return value - 1
    return None


def match_sentence(text: Any, sentences: list[Sentence]) -> int | None:
    """The index of the sentence a quoted "sentence" field reproduces (fuzzy ratio >= 85), else None."""
    if not isinstance(text, str) or not text.strip():
        return None
    best, best_score = None, 85.0
    for s in sentences:
        score = fuzz.ratio(text.strip().lower(), s.text.lower())
        if score >= best_score:
            best, best_score = s.index, score
    return best


def _reason_text(item: Any) -> str | None:
    if isinstance(item, str):
        return item.strip() or None
    if isinstance(item, dict):
        for key in _REASON_KEYS:
            value = item.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
            if isinstance(value, dict):  # {"reason": {"sentence": ..., "reason": ...}}
                inner = _reason_text(value)
                if inner:
                    return inner
    return None


def parse_bool(value: Any) -> bool | None:
    """True/False from a JSON boolean or "true"/"false"/"yes"/"no"; None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return value.strip().lower() in ("true", "yes")
    return None


def parse_dce_sentences(text: str, sentences: list[Sentence]) -> DceReply:
    """Reasons from a sentence-level DCE reply. A reason is tied to a sentence by its ``id``, else by its
    quoted ``sentence`` text; when no item carries either and there is one item per sentence, by position
    (the prompt asks for them in order). Anything else is kept as a reason not about one sentence."""
    data = extract_json(text)
    overall: bool | None = None
    items: list[Any] | None = None
    if isinstance(data, list):
        items = data
    else:
        overall = parse_bool(data.get("is_consistent", data.get("consistent")))
        for key in _LIST_KEYS:
            if isinstance(data.get(key), list):
                items = data[key]
                break
        if items is None and _reason_text(data):  # a single reason object
            items = [data]
    if not items:
        raise ParseError("no list of per-sentence reasons in the reply")
    n = len(sentences)
    tied: list[tuple[str, int | None]] = []
    for item in items:
        reason = _reason_text(item)
        if reason is None:
            continue
        index = None
        if isinstance(item, dict):
            index = next((parse_sentence_number(item[k], n) for k in _ID_KEYS if k in item), None)
            if index is None:
                index = match_sentence(item.get("sentence"), sentences)
        tied.append((reason, index))
    if not tied:
        raise ParseError("the reply has no usable reason text")
    if all(i is None for _, i in tied) and len(tied) == n:
        tied = [(reason, i) for i, (reason, _) in enumerate(tied)]
    return DceReply([RawReason(r, i) for r, i in tied], overall)


def parse_dce_single(text: str) -> DceReply:
    """The one reason of a paragraph-level (or one-sentence) DCE reply."""
    data = extract_json(text)
    if isinstance(data, list):
        data = next((d for d in data if _reason_text(d)), None)
        if data is None:
            raise ParseError("no reason in the reply")
    reason = _reason_text(data)
    if reason is None:
        raise ParseError("the reply has no 'reason' text")
    overall = parse_bool(data.get("is_consistent", data.get("consistent"))) if isinstance(data, dict) else None
    return DceReply([RawReason(reason, 0)], overall)


_MARK_WORDS = {"positive": 1, "consistent": 1, "negative": -1, "inconsistent": -1}


def _mark(value: Any) -> int:
    if isinstance(value, bool):
        raise ParseError("a mark must be +1 or -1, got a boolean")
    if isinstance(value, (int, float)) and value in (1, -1):
        return int(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("+1", "1", "-1"):
            return int(v)
        if v in _MARK_WORDS:
            return _MARK_WORDS[v]
    raise ParseError(f"a mark must be +1 or -1, got {str(value)[:40]!r}")


def parse_amc(text: str, count: int) -> list[int]:
    """Exactly ``count`` marks, each +1 or -1, from ``{"marks": [...]}`` (or a bare list)."""
    data = extract_json(text)
    marks: Any = data
    if isinstance(data, dict):
        marks = next((data[k] for k in ("marks", "answer", "scores", "labels") if isinstance(data.get(k), list)), None)
        if marks is None:
            marks = next((v for v in data.values() if isinstance(v, list)), None)
    if not isinstance(marks, list):
        raise ParseError("no list of marks in the reply")
    if len(marks) != count:
        raise ParseError(f"expected {count} marks, got {len(marks)}")
    return [_mark(m) for m in marks]


_ENUMERATION = re.compile(r"^\s*(?:[-*•]+|\(?\d{1,3}[.):]|\[\d{1,3}\])\s*")
_NEGATIVE_START = re.compile(
    r"^\W*(?:verdict\W+)?(?:(?:this|the) (?:sentence|text|summary) is )?"
    r"(?:not consistent|inconsistent|not supported|unsupported|contradict|incorrect|not accurate|inaccurate|"
    r"false\b|no\b)",
    re.I,
)
_POSITIVE_START = re.compile(
    r"^\W*(?:verdict\W+)?(?:(?:this|the) (?:sentence|text|summary) is )?"
    r"(?:consistent|supported|correct|accurate|true\b|yes\b)",
    re.I,
)
_NEGATIVE_WORDS = re.compile(
    r"\b(?:not consistent|inconsistent|not supported|unsupported|"
    r"(?:does not|doesn't|do not|don't) (?:support|mention|state)|no mention|"
    r"not (?:mentioned|stated|found)|contradict\w*|incorrect|inaccurate|not accurate)\b",
    re.I,
)
_POSITIVE_WORDS = re.compile(r"\b(?:consistent|supported|supports|correct|accurate)\b", re.I)
_FIRST_SENTENCE = re.compile(r"^(.*?)(?:[.!?](?:\s|$)|\n|$)", re.S)


def rule_mark(reason: str) -> int:
    """+1/-1 from a reason's verdict: the verdict word it starts with ("Consistent: ..." / "Inconsistent: ...",
    after any list numbering), else the verdict words of its first sentence, negative ones first (so "not
    consistent" is never read as "consistent"). A reason whose first sentence carries no verdict raises
    ParseError (it is then unscored, not guessed). A heuristic: the LLM converter (``amc="llm"``) is the
    paper's design."""
    text = _ENUMERATION.sub("", reason.strip(), count=1)
    if _NEGATIVE_START.search(text):
        return -1
    if _POSITIVE_START.search(text):
        return 1
    m = _FIRST_SENTENCE.match(text)
    mark = verdict_words(m.group(1)[:300] if m else "")
    if mark is None:
        raise ParseError(f"the reason does not state a verdict: {reason[:60]!r}")
    return mark


def verdict_words(text: str) -> int | None:
    """-1 if ``text`` says inconsistent / not supported / contradicts / not mentioned..., else +1 if it says
    consistent / supported / correct, else None. Negative phrases are checked first."""
    if _NEGATIVE_WORDS.search(text):
        return -1
    if _POSITIVE_WORDS.search(text):
        return 1
    return None


# ------------------------------------------------------------------------------------------ arithmetic


@dataclass(frozen=True)
class AmcScore:
    """Eq. 3 of seed 001. ``marks`` are all k marked reasons; ``sentence_level[i]`` says whether reason i
    counts (is the one reason kept for exactly one sentence)."""

    marks: tuple[int, ...]
    sentence_level: tuple[bool, ...]
    alpha: float
    beta: float
    z: float | None  # Z in [-1, 1]; None when no reason is sentence-level (k + beta = 0)
    score: float | None  # (Z + 1) / 2

    @property
    def k(self) -> int:
        return len(self.marks)


def amc_score(marks: list[int] | tuple[int, ...], sentence_level: list[bool] | tuple[bool, ...]) -> AmcScore:
    """``Z = (sum z + alpha) / (k + beta)`` with ``alpha = -sum(z of excluded)``, ``beta = -#excluded``.

    Seed 001 App. I: marks [-1, +1, -1] where the first reason is paragraph-level -> alpha = 1, beta = -1,
    Z = (-1 + 1) / 2 = 0, score 0.5."""
    if len(marks) != len(sentence_level):
        raise ValueError(f"{len(marks)} marks but {len(sentence_level)} sentence-level flags")
    if any(m not in (1, -1) for m in marks):
        raise ValueError("marks must be +1 or -1")
    alpha = float(-sum(m for m, s in zip(marks, sentence_level) if not s))
    beta = float(-sum(1 for s in sentence_level if not s))
    denominator = len(marks) + beta
    if denominator == 0:
        return AmcScore(tuple(marks), tuple(sentence_level), alpha, beta, None, None)
    z = (sum(marks) + alpha) / denominator
    return AmcScore(tuple(marks), tuple(sentence_level), alpha, beta, z, (z + 1) / 2)


# ---------------------------------------------------------------------------------------------- stages


@dataclass
class StageResult:
    """What a DCR stage returns: a value or the reason there is none, and the calls made."""

    value: Any
    error: str | None = None
    calls: list[LLMCall] = field(default_factory=list)


@register_stage("dcr.dce")
class DivideConquerEvaluator:
    """Judge target sentences (or the whole target) against a source; one call."""

    name = "dcr.dce"

    def __init__(self, llm, sentence_prompt: PromptTemplate = DCE_SENTENCE_PROMPT,
                 paragraph_prompt: PromptTemplate = DCE_PARAGRAPH_PROMPT):
        self.llm = llm
        self.sentence_prompt = sentence_prompt
        self.paragraph_prompt = paragraph_prompt

    def messages(self, source: str, target: str, sentences: list[Sentence], level: Level):
        if level == "paragraph":
            return self.paragraph_prompt.render(source=source, target=target)
        return self.sentence_prompt.render(source=source, sentences=number_sentences(sentences))

    async def __call__(self, source: str, target: str, sentences: list[Sentence], level: Level) -> StageResult:
        messages = self.messages(source, target, sentences, level)
        if level == "paragraph":
            parsed = await generate_parsed(self.llm, messages, parse_dce_single, params=self.llm.params(json_mode=True),
                                           format_hint='one JSON object {"reason": "...", "is_consistent": true}')
        else:
            parsed = await generate_parsed(
                self.llm, messages, lambda text: parse_dce_sentences(text, sentences),
                params=self.llm.params(json_mode=True),
                format_hint=('one JSON object {"sentences": [{"id": 1, "reason": "Consistent: ..."}], '
                             '"is_consistent": true}'),
            )
        return StageResult(parsed.value, parsed.error, parsed.calls)


@register_stage("dcr.amc")
class AutoMetricConverter:
    """Map reasons to +1/-1: by an LLM that reads only the reasons (``mode="llm"``) or by their opening verdict
    word (``mode="rule"``). Returns one mark or None per reason, with per-reason errors."""

    name = "dcr.amc"

    def __init__(self, llm, mode: AmcMode = "llm", prompt: PromptTemplate = AMC_PROMPT):
        self.llm = llm
        self.mode = mode
        self.prompt = prompt

    async def __call__(self, reasons: list[str]) -> StageResult:
        if not reasons:
            return StageResult(([], []))
        if self.mode == "rule":
            marks: list[int | None] = []
            errors: list[str | None] = []
            for reason in reasons:
                try:
                    marks.append(rule_mark(reason))
                    errors.append(None)
                except ParseError as exc:
                    marks.append(None)
                    errors.append(str(exc))
            return StageResult((marks, errors))
        numbered = "\n".join(f"{i}. {' '.join(r.split())}" for i, r in enumerate(reasons, 1))
        parsed = await generate_parsed(
            self.llm, self.prompt.render(reasons=numbered, count=len(reasons)),
            lambda text: parse_amc(text, len(reasons)), params=self.llm.params(json_mode=True),
            format_hint=f'one JSON object {{"marks": [...]}} with exactly {len(reasons)} marks, each 1 or -1',
        )
        if parsed.value is None:
            error = f"AMC failed: {parsed.error}"
            return StageResult(([None] * len(reasons), [error] * len(reasons)), error, parsed.calls)
        return StageResult((list(parsed.value), [None] * len(reasons)), None, parsed.calls)


def number_sentences(sentences: list[Sentence]) -> str:
    return "\n".join(f"[{s.index + 1}] {' '.join(s.text.split())}" for s in sentences)


# ------------------------------------------------------------------------------------------ evaluation


@dataclass
class DcrEvaluation:
    """One DCE + AMC pass over one target (also what each improvement round re-runs)."""

    target: str
    level: Level
    sentences: list[Sentence]
    verdicts: list[Verdict]
    amc: AmcScore | None
    calls: list[LLMCall]
    unscored_reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float | None:
        return None if self.unscored_reason or self.amc is None else self.amc.score

    @property
    def consistent(self) -> bool:
        """Every unit judged, and judged consistent (the paper's score == 1)."""
        return (self.score == 1.0 and bool(self.verdicts)
                and all(v.label == "supported" for v in self.verdicts))

    @property
    def inconsistent_indices(self) -> list[int]:
        """Indices (into ``sentences``) of the units judged inconsistent."""
        return [i for i, v in enumerate(self.verdicts) if v.label in ("unsupported", "contradicted")]

    def findings(self) -> list[Finding]:
        return [
            Finding(description=v.reason, kind="inconsistent", target_spans=list(v.claim.target_spans),
                    evidence=list(v.evidence), claim_ids=[v.claim.id] if v.claim.id else [])
            for v in self.verdicts if v.label in ("unsupported", "contradicted")
        ]

    def subscores(self) -> dict[str, float | None]:
        judged = sum(v.label != "unscored" for v in self.verdicts)
        sub: dict[str, float | None] = {"units": float(len(self.verdicts)), "judged": float(judged)}
        if self.amc is not None:
            sub.update({"Z": self.amc.z, "alpha": self.amc.alpha, "beta": self.amc.beta, "k": float(self.amc.k)})
        return sub

    def to_report(self, method: str) -> Report:
        claims = [v.claim for v in self.verdicts]
        return Report(method=method, score=self.score, unscored_reason=self.unscored_reason,
                      subscores=self.subscores(), claims=claims, verdicts=self.verdicts,
                      findings=self.findings(), calls=self.calls, details=dict(self.details))


def _claim(sentence: Sentence, kind: str = "sentence") -> Claim:
    return Claim(text=sentence.text, kind=kind, id=f"s{sentence.index + 1}", target_spans=[sentence.span])


def _whole_target(target: str) -> Sentence:
    start = len(target) - len(target.lstrip())
    text = target.strip()
    return Sentence(text=text, span=Span(start=start, end=start + len(text)), index=0)


# ---------------------------------------------------------------------------------------------- method


@register_method
class DCR(Method):
    name = "dcr"
    description = ("Divide-Conquer-Reasoning: judge each target sentence against the source with a reason, "
                   "map reasons to +1/-1 (AMC), score (Z+1)/2; improve=N rewrites flagged sentences (RAI).")
    prompts = DCR_PROMPTS
    default_threshold = 1.0

    def __init__(self, llm=None, config=None, level: Level = "sentence", amc: AmcMode = "llm",
                 retrieval: bool = False, top_k: int = 3, window: int = 1, retriever: str = "auto",
                 improve: int = 0):
        super().__init__(llm, config)
        if level not in ("sentence", "paragraph"):
            raise ValueError(f"level must be 'sentence' or 'paragraph', got {level!r}")
        if amc not in ("llm", "rule"):
            raise ValueError(f"amc must be 'llm' or 'rule', got {amc!r}")
        if not isinstance(improve, int) or isinstance(improve, bool) or not 0 <= improve <= 10:
            raise ValueError(f"improve must be an integer number of rounds in 0..10, got {improve!r}")
        if top_k < 1 or window < 0:
            raise ValueError("top_k must be >= 1 and window >= 0")
        self.level: Level = level
        self.amc_mode: AmcMode = amc
        self.retrieval = bool(retrieval)
        self.top_k = top_k
        self.window = window
        if retriever not in ("auto", "embedding", "bm25"):
            raise ValueError(f"retriever must be auto, embedding or bm25, got {retriever!r}")
        self.retriever = retriever
        self.improve_rounds = improve

    def options(self) -> dict[str, Any]:
        return {"level": self.level, "amc": self.amc_mode, "retrieval": self.retrieval, "top_k": self.top_k,
                "window": self.window, "retriever": self.retriever, "improve": self.improve_rounds}

    @property
    def prompt_version(self) -> str:
        templates = list(self.prompts)
        if self.improve_rounds > 0:
            from halluscope.methods.improve import RAI_PROMPTS

            templates += [p for p in RAI_PROMPTS if p not in templates]
        return ",".join(f"{p.name}@{p.version}" for p in templates)

    def _prompt(self, template: PromptTemplate) -> PromptTemplate:
        return apply_overrides(template, self.config.prompts_dir)

    async def run(self, source: str, target: str) -> Report:
        evaluation = await self.evaluate(source, target)
        report = evaluation.to_report(self.name)
        if self.improve_rounds > 0:
            from halluscope.methods.improve import improve_loop

            report = await improve_loop(self, source, evaluation, report, self.improve_rounds)
        return report

    async def evaluate(self, source: str, target: str) -> DcrEvaluation:
        """DCE + AMC over ``target``: against the whole source when it fits, else with retrieval."""
        if self.level == "paragraph":
            sentences = [_whole_target(target)] if target.strip() else []
        else:
            sentences = split_sentences(target)
        if not sentences:
            return DcrEvaluation(target, self.level, [], [], None, [], unscored_reason="the target has no sentences")
        dce = DivideConquerEvaluator(self.llm, self._prompt(DCE_SENTENCE_PROMPT), self._prompt(DCE_PARAGRAPH_PROMPT))
        why_retrieval = "requested (retrieval=True)" if self.retrieval else None
        if why_retrieval is None:
            messages = dce.messages(source, target, sentences, self.level)
            if not prompt_fits(self.llm, messages, reply_budget(self.llm, DCE_REPLY_TOKENS)):
                why_retrieval = "the source does not fit the model's context window"
        if why_retrieval is None:
            try:
                return await self._evaluate_full(dce, source, target, sentences)
            except ContextOverflowError as exc:
                why_retrieval = f"the model reported a context overflow: {exc}"
        if self.level == "paragraph":
            return DcrEvaluation(target, self.level, sentences, [], None, [], unscored_reason=(
                f"paragraph-level DCR needs the whole source in one prompt, but {why_retrieval}; "
                "use level=sentence, which works on long sources through retrieval"))
        evaluation = await self._evaluate_retrieval(source, target, sentences)
        evaluation.details["retrieval_reason"] = why_retrieval
        return evaluation

    async def _evaluate_full(self, dce: DivideConquerEvaluator, source: str, target: str,
                             sentences: list[Sentence]) -> DcrEvaluation:
        kind = "paragraph" if self.level == "paragraph" else "sentence"
        dce_result = await dce(source, target, sentences, self.level)
        calls = list(dce_result.calls)
        if dce_result.value is None:
            verdicts = [Verdict.unscored(_claim(s, kind), f"DCE reply unusable: {dce_result.error}") for s in sentences]
            return DcrEvaluation(target, self.level, sentences, verdicts, None, calls,
                                 unscored_reason=f"DCE reply unusable: {dce_result.error}", details={"mode": "full"})
        reply: DceReply = dce_result.value
        amc = AutoMetricConverter(self.llm, self.amc_mode, self._prompt(AMC_PROMPT))
        amc_result = await amc([r.text for r in reply.reasons])
        calls += amc_result.calls
        marks, errors = amc_result.value
        details: dict[str, Any] = {"mode": "full", "dce_is_consistent": reply.is_consistent}
        return self._combine(target, sentences, kind, reply.reasons, marks, errors, calls, details,
                             per_sentence_calls={}, evidence={})

    def _combine(self, target: str, sentences: list[Sentence], kind: str, reasons: list[RawReason],
                 marks: list[int | None], errors: list[str | None], calls: list[LLMCall], details: dict[str, Any],
                 per_sentence_calls: dict[int, list[LLMCall]], evidence: dict[int, list[Evidence]]) -> DcrEvaluation:
        """Choose one reason per sentence (its negative one if any), flag the rest as not sentence-level for
        alpha/beta, and build the verdicts."""
        marked = [(r, m) for r, m in zip(reasons, marks) if m is not None]
        chosen: dict[int, int] = {}  # sentence index -> position in ``marked``
        for pos, (reason, mark) in enumerate(marked):
            i = reason.sentence_index
            if i is None:
                continue
            if i not in chosen or (mark == -1 and marked[chosen[i]][1] == 1):
                chosen[i] = pos
        kept = set(chosen.values())
        sentence_level = [pos in kept for pos in range(len(marked))]
        amc = amc_score([m for _, m in marked], sentence_level) if marked else None
        details["other_reasons"] = [
            {"reason": r.text, "mark": m, "sentence": None if r.sentence_index is None else r.sentence_index + 1}
            for pos, (r, m) in enumerate(marked) if pos not in kept
        ]
        unmarked = {r.sentence_index: e for r, m, e in zip(reasons, marks, errors)
                    if m is None and r.sentence_index is not None}
        verdicts: list[Verdict] = []
        for s in sentences:
            claim = _claim(s, kind)
            own_calls = per_sentence_calls.get(s.index, [])
            if s.index in chosen:
                reason, mark = marked[chosen[s.index]]
                verdicts.append(Verdict(claim=claim, label="supported" if mark == 1 else "unsupported",
                                        reason=reason.text, score=float(mark), calls=own_calls,
                                        evidence=evidence.get(s.index, [])))
            elif s.index in unmarked:
                verdicts.append(Verdict.unscored(claim, f"reason could not be marked: {unmarked[s.index]}", own_calls))
            else:
                verdicts.append(Verdict.unscored(claim, "the evaluator gave no reason for this sentence", own_calls))
        unscored_reason = None
        if amc is None or amc.score is None:
            why = next((e for e in errors if e), None)
            unscored_reason = ("no sentence received a usable judgment"
                               + (f" ({why})" if why else " (only reasons not about a single sentence)"))
        return DcrEvaluation(target, self.level, sentences, verdicts, amc, calls, unscored_reason, details)

    async def _evaluate_retrieval(self, source: str, target: str, sentences: list[Sentence]) -> DcrEvaluation:
        """Each sentence against each of its retrieved snippets (DCE on the excerpt, then AMC on that one
        reason); a sentence's mark is its best over snippets, stopping at the first consistent one."""
        from halluscope.retrieval import RetrievalConfig, SourceIndex, Snippet, score_with_retrieval

        config = RetrievalConfig(top_k=self.top_k, window=self.window, retriever=self.retriever)
        index = await SourceIndex.abuild(source, config)
        prompt = self._prompt(DCE_EXCERPT_PROMPT)
        amc = AutoMetricConverter(self.llm, self.amc_mode, self._prompt(AMC_PROMPT))
        judged: dict[tuple[str, int], tuple[str | None, int | None, str | None]] = {}  # -> reason, mark, error
        calls_by_text: dict[str, list[LLMCall]] = {}

        async def verify(text: str, snippet: Snippet) -> float | None:
            parsed = await generate_parsed(self.llm, prompt.render(source=snippet.text, sentence=text),
                                           parse_dce_single, params=self.llm.params(json_mode=True),
                                           format_hint='one JSON object {"reason": "Consistent: ..."}')
            calls = calls_by_text.setdefault(text, [])
            calls.extend(parsed.calls)
            if parsed.value is None:
                judged[(text, snippet.span.start)] = (None, None, f"DCE reply unusable: {parsed.error}")
                return None
            reason = parsed.value.reasons[0].text
            result = await amc([reason])
            calls.extend(result.calls)
            (mark,), (error,) = result.value
            judged[(text, snippet.span.start)] = (reason, mark, error)
            return None if mark is None else (1.0 if mark == 1 else 0.0)

        outcome = await score_with_retrieval([s.text for s in sentences], index, verify, config)
        reasons: list[RawReason] = []
        marks: list[int | None] = []
        errors: list[str | None] = []
        evidence: dict[int, list[Evidence]] = {}
        per_sentence_calls: dict[int, list[LLMCall]] = {}
        for sentence, result in zip(sentences, outcome.claims):
            per_sentence_calls[sentence.index] = calls_by_text.get(sentence.text, [])
            tried = [(sn, judged.get((sentence.text, sn.span.start))) for sn in result.snippets]
            tried = [(sn, j) for sn, j in tried if j is not None]
            best = result.best_snippet  # the first supporting snippet, else the best-ranked judged one
            if best is not None:
                reason, mark, _ = judged[(sentence.text, best.span.start)]
                reasons.append(RawReason(reason or "", sentence.index))
                marks.append(mark)
                errors.append(None)
                evidence[sentence.index] = [Evidence(text=best.text, span=best.span,
                                                     relation="supports" if mark == 1 else "related")]
            elif tried:
                reasons.append(RawReason("", sentence.index))
                marks.append(None)
                errors.append(next((j[2] for _, j in tried if j[2]), "no snippet could be judged"))
            else:
                reasons.append(RawReason("", sentence.index))
                marks.append(None)
                errors.append("no source snippet was retrieved for this sentence")
        details: dict[str, Any] = {"mode": "retrieval", "retrieval": index.describe()}
        return self._combine(target, sentences, "sentence", reasons, marks, errors, [], details,
                             per_sentence_calls, evidence)
