"""``probe``: process-based hallucination detection (seed 004 §3.3, §4; SPEC §2).

Four steps, each a named async stage whose output lands in ``Report.details["steps"]`` so it can be
inspected and scored on its own (see :mod:`halluscope.bench.suite_probe`):

1. **claim decomposition** (``probe.decompose``): the target becomes atomic claims, each with the target
   segment it came from, mapped to a character span of the target with :func:`halluscope.text.locate`
   (segment first, then the claim's own wording, then the most similar target sentence; how each claim was
   placed is recorded).
2. **evidence finding** (``probe.find_evidence``): the model quotes the source passages that bear on a
   claim. Every quote is checked against the source with ``locate``; quotes that are not in the source are
   rejected and recorded, never used. On a source that does not fit the model's context next to the prompt
   (or with ``narrow="always"``) the shared retrieval stage first narrows the source to the top-K snippets
   for the claim; quotes are still located in the full source.
3. **evidence evaluation** (``probe.evaluate``): for each verified passage, does the passage ALONE support
   the claim? The surrounding source sentences are shown to help understanding, not as proof. PASS/FAIL
   per judge; with several judges (other models, or repeated samples of one) a passage counts as
   supporting when the PASS fraction of the valid votes reaches ``consensus`` (the paper uses 3 of 4,
   i.e. 0.75) and at least half of the votes are valid.
4. **localization**: a claim with no supporting passage is hallucinated; its target span becomes a
   Finding. The score is the fraction of scored claims that are supported.

A claim is ``unscored`` (and left out of the score, counted in ``subscores["unscored_claims"]``) when its
evidence-finding reply could not be parsed, or when no passage was accepted and some passage could not be
judged. A claim with no verified passage at all is ``unsupported``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field
from rapidfuzz import fuzz

from halluscope.llm import LLM, ContextOverflowError, get_llm
from halluscope.llm.base import GenerateParams
from halluscope.llm.structured import generate_parsed
from halluscope.methods import register_method
from halluscope.methods.base import Method
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Verdict
from halluscope.retrieval import IndexCache, RetrievalConfig, RetrieverName, SourceIndex, fits_in_context
from halluscope.stages import register_stage
from halluscope.text import ParseError, extract_json, locate, parse_items_after_marker, split_sentences

# --- prompts -------------------------------------------------------------------------------------------------

DECOMPOSE_PROMPT = PromptTemplate(
    name="probe_decompose",
    version="1",
    system="You split a generated text into the smallest statements that can each be checked on their own.",
    user=(
        "The TEXT below was generated from some source material (it may be a summary, an answer, or a "
        "rewrite). List every assertion it makes, however small: every name, number, date, place, action, "
        "cause, quality and relationship it states, including those in headings or lists.\n\n"
        "For each assertion:\n"
        '- "claim": one short sentence that can be judged true or false without reading the TEXT '
        "(replace pronouns and vague references with what they refer to);\n"
        '- "segment": the exact words of the TEXT that express it, copied character for character as one '
        "contiguous stretch (the shortest stretch that carries the assertion).\n\n"
        "TEXT:\n$target\n\n"
        'Reply with one JSON object: {"claims": [{"segment": "<copied from the TEXT>", "claim": "<assertion>"}]}'
    ),
)

FIND_EVIDENCE_PROMPT = PromptTemplate(
    name="probe_find_evidence",
    version="1",
    system="You locate passages in a source document, quoting them exactly.",
    user=(
        "Find the passages of the SOURCE that bear on the ASSERTION: passages that support it, contradict it, "
        "or are otherwise directly relevant to checking it.\n\n"
        "Rules:\n"
        "- Copy each passage exactly as it is written in the SOURCE, character for character: whole "
        "sentences, not paraphrases, not fragments glued together.\n"
        "- Give at most $max_evidence passages, most relevant first.\n"
        "- If nothing in the SOURCE bears on the assertion, give an empty list.\n\n"
        "ASSERTION:\n$claim\n\n"
        "$source_heading:\n$source\n\n"
        'Reply with one JSON object: {"reasoning": "<brief thoughts>", "evidence": ["<passage copied from '
        'the SOURCE>", ...]}'
    ),
)

EVALUATE_PROMPT = PromptTemplate(
    name="probe_evaluate",
    version="1",
    system="You are a strict fact-checker who judges one piece of evidence at a time.",
    user=(
        "Decide whether the EVIDENCE EXCERPT, on its own, supports the ASSERTION.\n\n"
        "The SURROUNDING CONTEXT is the source text around the excerpt. Use it only to understand the "
        "excerpt (who or what it refers to); it is not evidence. If the assertion follows only from the "
        "context, or needs guesses or long chains of inference beyond the excerpt, the excerpt does not "
        "support it. Every part of the assertion (names, numbers, dates, places, causes) must be backed by "
        "the excerpt.\n\n"
        "ASSERTION:\n$claim\n\n"
        "EVIDENCE EXCERPT:\n$evidence\n\n"
        "SURROUNDING CONTEXT:\n$context\n\n"
        'Reply with one JSON object: {"reasoning": "<your analysis, based on the excerpt alone>", '
        '"verdict": "PASS" or "FAIL"}'
    ),
)

FIND_REPLY_TOKENS = 768  # reply budgets per step, capped by Config.max_tokens
EVALUATE_REPLY_TOKENS = 512


def reply_budget(llm: LLM, wanted: int) -> int:
    """``wanted`` completion tokens, capped by the client's configured ``max_tokens``."""
    return min(wanted, llm.default_params.max_tokens)

FULL_SOURCE_HEADING = "SOURCE"
NARROWED_SOURCE_HEADING = ("SOURCE (excerpts of a longer document, the parts most related to the assertion; "
                           "[...] marks omitted text)")

# --- parsers (each raises ParseError on anything it cannot use) -----------------------------------------------


_PLACEHOLDER = re.compile(r"^\s*<[^<>]{1,60}>\s*$")


def is_placeholder(text: str) -> bool:
    """An echoed template slot such as "<assertion>": the model repeated the format instead of answering."""
    return bool(_PLACEHOLDER.match(text))


class _ClaimItem(BaseModel):
    claim: str = Field(min_length=1)
    segment: str = ""


_CLAIM_KEYS = ("claim", "assertion", "fact", "text", "statement")
_SEGMENT_KEYS = ("segment", "source_segment", "span", "quote")


def parse_claims(text: str) -> list[_ClaimItem]:
    """``{"claims": [{"segment", "claim"}]}`` (or a bare list of such objects / strings); else the
    "> segment" / claim-line format. An empty list is a failure: every target asserts something."""
    try:
        data = extract_json(text)
    except ParseError as json_error:
        items = _parse_quoted_segments(text)
        if not items:
            raise ParseError(f"no claims found ({json_error})") from json_error
        return items
    if isinstance(data, dict):
        data = next((data[k] for k in ("claims", "assertions", "facts") if isinstance(data.get(k), list)), None)
        if data is None:
            raise ParseError("JSON object without a 'claims' list")
    items: list[_ClaimItem] = []
    for entry in data:
        if isinstance(entry, str) and entry.strip() and not is_placeholder(entry):
            items.append(_ClaimItem(claim=entry.strip()))
        elif isinstance(entry, dict):
            claim = next((entry[k] for k in _CLAIM_KEYS if isinstance(entry.get(k), str) and entry[k].strip()), None)
            if claim is None or is_placeholder(claim):
                continue
            segment = next((entry[k] for k in _SEGMENT_KEYS if isinstance(entry.get(k), str)), "")
            segment = "" if is_placeholder(segment) else segment
            items.append(_ClaimItem(claim=claim.strip(), segment=segment.strip()))
    if not items:
        raise ParseError("the reply lists no claims (only empty entries or template placeholders)")
    return items


def _parse_quoted_segments(text: str) -> list[_ClaimItem]:
    """The plain-text layout: a line "> segment" followed by the claim line(s) it yields."""
    if not isinstance(text, str):
        return []
    items: list[_ClaimItem] = []
    segment: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(">"):
            segment = line.lstrip(">").strip()
        elif line and segment is not None:
            items.append(_ClaimItem(claim=line.lstrip("-*• ").strip() or line, segment=segment))
    return [i for i in items if i.claim.strip() and not is_placeholder(i.claim)]


_FINAL_MARKER = "FINAL OUTPUT:"


def parse_evidence(text: str) -> list[str]:
    """Quoted passages: ``{"evidence": [...]}`` / a bare list of strings, or free-form lines after a
    "FINAL OUTPUT:" marker. Free-form text without the marker is refused (it would turn chatter into
    "quotes")."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    try:
        data = extract_json(text)
    except ParseError as json_error:
        if _FINAL_MARKER.lower() not in text.lower():
            raise
        items = parse_items_after_marker(text, _FINAL_MARKER)
        return [i for i in items if not re.fullmatch(r"(segment|passage)\s*#?\d*:?", i, re.I)] or items
    if isinstance(data, dict):
        value = next((data[k] for k in ("evidence", "passages", "segments", "quotes") if k in data), None)
        if value is None:
            raise ParseError("JSON object without an 'evidence' list")
        data = value
    if not isinstance(data, list):
        raise ParseError("'evidence' is not a list")
    quotes: list[str] = []
    for entry in data:
        if isinstance(entry, dict):
            entry = next((entry[k] for k in ("text", "passage", "quote", "evidence") if isinstance(entry.get(k), str)),
                         None)
        if not isinstance(entry, str):
            raise ParseError("an evidence item is not a string")
        if entry.strip():
            quotes.append(entry.strip())
    if quotes and all(is_placeholder(q) for q in quotes):
        raise ParseError("the reply repeats the template placeholder instead of quoting the source")
    return [q for q in quotes if not is_placeholder(q)]


_VERDICT_WORD = re.compile(r"\b(PASS|FAIL)(?:ED|ES)?\b", re.I)
_VERDICT_AFTER_LABEL = re.compile(r"verdict[\"']?\s*[:=]?\s*[\"'\[]?\s*(pass|fail)\b([^\n]*)", re.I)


def parse_verdict(text: str) -> bool:
    """True for PASS, False for FAIL. Reads a JSON ``verdict`` field, else the last "VERDICT: ..." line,
    else a reply that is just the word. An echoed "PASS or FAIL" is ambiguous and refused."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("empty reply")
    try:
        data = extract_json(text, dict)
    except ParseError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("verdict"), str):
        return _single_verdict(data["verdict"])
    matches = list(_VERDICT_AFTER_LABEL.finditer(text))
    if matches:
        word, rest = matches[-1].group(1), matches[-1].group(2)
        if _VERDICT_WORD.search(rest):
            raise ParseError("ambiguous verdict (both PASS and FAIL after 'VERDICT')")
        return word.upper() == "PASS"
    stripped = text.strip().strip(".!\"'`*[]").strip()
    return _single_verdict(stripped)


def _single_verdict(value: str) -> bool:
    words = {m.group(1).upper() for m in _VERDICT_WORD.finditer(value)}
    if len(words) != 1 or len(value.strip()) > 40:
        raise ParseError(f"no single PASS/FAIL verdict in {value[:60]!r}")
    return words == {"PASS"}


# --- step results --------------------------------------------------------------------------------------------


@dataclass
class Decomposition:
    claims: list[Claim]
    placements: list[dict[str, Any]]  # per claim: segment, how it was placed in the target
    calls: list[LLMCall]
    error: str | None = None  # the decomposer's reply could not be used
    fallback: str | None = None  # what was done instead (e.g. "sentences")


@dataclass
class FoundEvidence:
    claim_id: str
    evidence: list[Evidence]
    quotes: list[dict[str, Any]]  # every quote with how it was located, or rejected
    calls: list[LLMCall]
    narrowed: bool
    snippets: list[Span] = field(default_factory=list)
    error: str | None = None


@dataclass
class Vote:
    judge: str
    sample: int
    passed: bool | None
    error: str | None = None


@dataclass
class EvidenceJudgment:
    claim_id: str
    evidence: Evidence
    votes: list[Vote]
    calls: list[LLMCall]
    consensus: float

    @property
    def valid_votes(self) -> list[Vote]:
        return [v for v in self.votes if v.passed is not None]

    @property
    def pass_fraction(self) -> float | None:
        valid = self.valid_votes
        return sum(v.passed for v in valid) / len(valid) if valid else None  # type: ignore[misc]

    @property
    def accepted(self) -> bool | None:
        """True/False by consensus; None when fewer than half of the votes could be read."""
        if 2 * len(self.valid_votes) < len(self.votes) or not self.valid_votes:
            return None
        return self.pass_fraction >= self.consensus  # type: ignore[operator]


# --- stages --------------------------------------------------------------------------------------------------


@register_stage("probe.decompose")
class ProbeDecompose:
    """Target -> atomic claims with the target span each came from."""

    name: str

    def __init__(self, llm: LLM, prompt: PromptTemplate = DECOMPOSE_PROMPT, *, fallback: Literal["sentences", "none"] = "sentences"):
        self.llm, self.prompt, self.fallback = llm, prompt, fallback

    async def __call__(self, target: str) -> Decomposition:
        parsed = await generate_parsed(self.llm, self.prompt.render(target=target), parse_claims,
                                       params=self.llm.params(json_mode=True),
                                       format_hint='one JSON object like {"claims": [{"segment": "...", "claim": "..."}]}')
        if parsed.value is None:
            if self.fallback == "none":
                return Decomposition([], [], parsed.calls, error=f"claim decomposition failed: {parsed.error}")
            claims, placements = sentence_claims(target)
            return Decomposition(claims, placements, parsed.calls, error=parsed.error, fallback="sentences")
        claims, placements = place_claims(parsed.value, target)
        return Decomposition(claims, placements, parsed.calls)


def sentence_claims(target: str) -> tuple[list[Claim], list[dict[str, Any]]]:
    claims, placements = [], []
    for i, s in enumerate(split_sentences(target)):
        claims.append(Claim(text=s.text, kind="sentence", id=f"c{i + 1}", target_spans=[s.span]))
        placements.append({"segment": s.text, "placed_by": "sentence"})
    return claims, placements


def place_claims(items: Sequence[_ClaimItem], target: str, *, min_similarity: float = 60.0
                 ) -> tuple[list[Claim], list[dict[str, Any]]]:
    """Map each claim to its target span: the quoted segment, else the claim's own wording, else the most
    similar target sentence (token-set similarity >= ``min_similarity``), else no span."""
    sentences = split_sentences(target)
    claims, placements = [], []
    for i, item in enumerate(items):
        span, how = None, "unplaced"
        for needle, label in ((item.segment, "segment"), (item.claim, "claim")):
            match = locate(needle, target) if needle else None
            if match is not None:
                span, how = match.span, f"{label}:{match.how}"
                break
        if span is None and sentences:
            best = max(sentences, key=lambda s: fuzz.token_set_ratio(item.claim, s.text))
            if fuzz.token_set_ratio(item.claim, best.text) >= min_similarity:
                span, how = best.span, "sentence:similar"
        claims.append(Claim(text=item.claim, kind="atomic", id=f"c{i + 1}",
                            target_spans=[span] if span is not None else []))
        placements.append({"segment": item.segment, "placed_by": how})
    return claims, placements


@register_stage("probe.find_evidence")
class ProbeFindEvidence:
    """Claim -> verified source passages (model quotes located in the source; invented quotes rejected)."""

    name: str

    def __init__(self, llm: LLM, prompt: PromptTemplate = FIND_EVIDENCE_PROMPT, *, max_evidence: int = 3,
                 min_fuzzy: float = 90.0):
        self.llm, self.prompt = llm, prompt
        self.max_evidence, self.min_fuzzy = max_evidence, min_fuzzy

    def render(self, claim: str, source_text: str, narrowed: bool) -> list[dict[str, str]]:
        return self.prompt.render(claim=claim, source=source_text, max_evidence=self.max_evidence,
                                  source_heading=NARROWED_SOURCE_HEADING if narrowed else FULL_SOURCE_HEADING)

    async def __call__(self, claim: Claim, source: str, index: SourceIndex | None = None) -> FoundEvidence:
        """``index`` given = narrow the source to the claim's retrieved snippets first."""
        snippets = index.retrieve(claim.text) if index is not None else []
        shown = "\n[...]\n".join(s.text for s in sorted(snippets, key=lambda s: s.span.start)) if index else source
        parsed = await generate_parsed(self.llm, self.render(claim.text, shown, index is not None), parse_evidence,
                                       params=self.llm.params(json_mode=True, max_tokens=reply_budget(self.llm, FIND_REPLY_TOKENS)),
                                       format_hint='one JSON object like {"reasoning": "...", "evidence": ["..."]}')
        found = FoundEvidence(claim.id or "", [], [], parsed.calls, narrowed=index is not None,
                              snippets=[s.span for s in snippets])
        if parsed.value is None:
            found.error = f"evidence finding failed: {parsed.error}"
            return found
        seen: set[tuple[int, int]] = set()
        for quote in parsed.value[: self.max_evidence]:
            match = locate(quote, source, min_fuzzy=self.min_fuzzy)
            if match is None:
                found.quotes.append({"quote": quote, "status": "rejected", "why": "not found in the source"})
                continue
            key = (match.span.start, match.span.end)
            if key in seen:
                found.quotes.append({"quote": quote, "status": "duplicate", "span": match.span.model_dump()})
                continue
            seen.add(key)
            found.quotes.append({"quote": quote, "status": "verified", "how": match.how,
                                 "span": match.span.model_dump()})
            found.evidence.append(Evidence(text=match.span.of(source), span=match.span, relation="related"))
        return found


@register_stage("probe.retrieve_evidence")
class ProbeRetrieveEvidence:
    """Claim -> its top source sentences from the retrieval stage (no LLM; spans exact by construction).
    A cheap evidence finder for weak or costly models; the evaluation step still decides support."""

    name: str

    def __init__(self, max_evidence: int = 3):
        self.max_evidence = max_evidence

    async def __call__(self, claim: Claim, source: str, index: SourceIndex) -> FoundEvidence:
        snippets = index.retrieve(claim.text, top_k=self.max_evidence, window=0)
        quotes = [{"quote": s.text, "status": "retrieved", "how": index.retriever, "score": s.score,
                   "span": s.span.model_dump()} for s in snippets]
        evidence = [Evidence(text=s.text, span=s.span, relation="related") for s in snippets]
        return FoundEvidence(claim.id or "", evidence, quotes, [], narrowed=False, snippets=[s.span for s in snippets])


@dataclass
class Judge:
    """One voter: a model and a sample number (samples > 0 use ``temperature`` with their own seed)."""

    llm: LLM
    sample: int = 0
    temperature: float = 0.0

    @property
    def name(self) -> str:
        return self.llm.name if self.sample == 0 else f"{self.llm.name}#{self.sample}"

    def params(self) -> GenerateParams:
        budget = reply_budget(self.llm, EVALUATE_REPLY_TOKENS)
        if self.sample == 0:
            return self.llm.params(json_mode=True, max_tokens=budget)
        return self.llm.params(json_mode=True, max_tokens=budget, temperature=self.temperature, seed=self.sample)


@register_stage("probe.evaluate")
class ProbeEvaluate:
    """(claim, passage, context) -> PASS/FAIL per judge, and consensus."""

    name: str

    def __init__(self, judges: Sequence[Judge], prompt: PromptTemplate = EVALUATE_PROMPT, *, consensus: float = 0.75):
        if not judges:
            raise ValueError("evidence evaluation needs at least one judge")
        self.judges, self.prompt, self.consensus = list(judges), prompt, consensus

    async def __call__(self, claim: Claim, evidence: Evidence, context: str) -> EvidenceJudgment:
        messages = self.prompt.render(claim=claim.text, evidence=evidence.text, context=context)

        async def vote(judge: Judge) -> tuple[Vote, list[LLMCall]]:
            parsed = await generate_parsed(judge.llm, messages, parse_verdict, params=judge.params(),
                                           format_hint='one JSON object like {"reasoning": "...", "verdict": "PASS"}')
            return Vote(judge.name, judge.sample, parsed.value, parsed.error), parsed.calls

        results = await asyncio.gather(*(vote(j) for j in self.judges))
        return EvidenceJudgment(claim.id or "", evidence, [v for v, _ in results],
                                [c for _, calls in results for c in calls], self.consensus)


# --- the method ----------------------------------------------------------------------------------------------

NarrowMode = Literal["auto", "always", "never"]


@register_method
class Probe(Method):
    name = "probe"
    description = ("Process-based (PROBE): claims with their target spans -> quoted source evidence -> "
                   "per-excerpt PASS/FAIL (optional multi-judge consensus) -> unsupported claims located.")
    prompts = (DECOMPOSE_PROMPT, FIND_EVIDENCE_PROMPT, EVALUATE_PROMPT)

    def __init__(self, llm: LLM | None = None, config=None, *, judges: Sequence[str | LLM] | None = None,
                 samples: int = 1, sample_temperature: float = 0.7, consensus: float = 0.75,
                 max_evidence: int = 3, context_sentences: int = 2, narrow: NarrowMode = "auto",
                 top_k: int = 3, window: int = 1, retriever: RetrieverName = "auto",
                 evidence: Literal["llm", "retrieval"] = "llm",
                 on_decompose_error: Literal["sentences", "unscored"] = "sentences"):
        """
        Args:
            judges: evidence-evaluation judges: model names (built like the main model, e.g. "gpt-4o-mini"
                at the same base URL) or LLM objects. Default: the main model alone.
            samples: votes per judge; samples beyond the first use ``sample_temperature`` and their own seed.
            consensus: PASS fraction of the valid votes needed to accept a passage (paper: 3 of 4 = 0.75).
            max_evidence: passages kept per claim from the evidence finder.
            context_sentences: source sentences shown on each side of a passage as surrounding context.
            narrow: "auto" narrows the source by retrieval when it does not fit the model's context next to
                the evidence-finding prompt; "always" / "never" force it.
            top_k, window, retriever: the retrieval stage settings used when narrowing.
            evidence: who finds the evidence: "llm" (the paper: the model quotes the source, quotes verified)
                or "retrieval" (no LLM call: the ``max_evidence`` source sentences the retrieval stage ranks
                highest for the claim; the evaluation step still judges each one).
            on_decompose_error: when the decomposition reply cannot be used, check the target's sentences as
                claims ("sentences", recorded in details) or return an unscored Report ("unscored").
        """
        super().__init__(llm, config)
        if samples < 1:
            raise ValueError("samples must be >= 1")
        if not 0.0 < consensus <= 1.0:
            raise ValueError("consensus must be in (0, 1]")
        if max_evidence < 1 or context_sentences < 0:
            raise ValueError("max_evidence must be >= 1 and context_sentences >= 0")
        if narrow not in ("auto", "always", "never"):
            raise ValueError("narrow must be 'auto', 'always' or 'never'")
        if evidence not in ("llm", "retrieval"):
            raise ValueError("evidence must be 'llm' or 'retrieval'")
        if on_decompose_error not in ("sentences", "unscored"):
            raise ValueError("on_decompose_error must be 'sentences' or 'unscored'")
        self.retrieval_config = RetrievalConfig(top_k=top_k, window=window, retriever=retriever)
        self._judge_specs = list(judges) if judges else []
        self._judge_llms: list[LLM] | None = None
        self.samples, self.sample_temperature, self.consensus = samples, sample_temperature, consensus
        self.max_evidence, self.context_sentences, self.narrow = max_evidence, context_sentences, narrow
        self.on_decompose_error, self.evidence = on_decompose_error, evidence
        self._indexes = IndexCache()

    def options(self) -> dict[str, Any]:
        return {"judges": [j if isinstance(j, str) else j.name for j in self._judge_specs] or None,
                "samples": self.samples, "consensus": self.consensus, "max_evidence": self.max_evidence,
                "context_sentences": self.context_sentences, "narrow": self.narrow,
                "top_k": self.retrieval_config.top_k, "window": self.retrieval_config.window,
                "retriever": self.retrieval_config.retriever, "evidence": self.evidence,
                "on_decompose_error": self.on_decompose_error}

    def _prompt(self, template: PromptTemplate) -> PromptTemplate:
        return apply_overrides(template, self.config.prompts_dir)

    def judges(self) -> list[Judge]:
        """The voters: every judge model times ``samples`` (clients for named models are built once)."""
        if self._judge_llms is None:
            self._judge_llms = [self.llm] if not self._judge_specs else [
                j if isinstance(j, LLM) else get_llm(self.config.with_overrides(model=j)) for j in self._judge_specs]
        return [Judge(llm, sample, self.sample_temperature) for llm in self._judge_llms for sample in range(self.samples)]

    async def _index(self, source: str, retriever: RetrieverName) -> SourceIndex:
        return await self._indexes.get(source, self.retrieval_config.model_copy(update={"retriever": retriever}))

    def _needs_narrowing(self, source: str, finder: ProbeFindEvidence, claims: list[Claim]) -> bool:
        if self.narrow != "auto":
            return self.narrow == "always"
        longest = max((c.text for c in claims), key=len, default="")
        overhead = sum(self.llm.count_tokens(m["content"]) + 8 for m in finder.render(longest, "", False))
        return not fits_in_context(self.llm, source, reserve_tokens=overhead + reply_budget(self.llm, FIND_REPLY_TOKENS))

    async def run(self, source: str, target: str) -> Report:
        decomposer = ProbeDecompose(self.llm, self._prompt(DECOMPOSE_PROMPT),
                                    fallback="none" if self.on_decompose_error == "unscored" else "sentences")
        finder = ProbeFindEvidence(self.llm, self._prompt(FIND_EVIDENCE_PROMPT), max_evidence=self.max_evidence)
        evaluator = ProbeEvaluate(self.judges(), self._prompt(EVALUATE_PROMPT), consensus=self.consensus)

        decomposition = await decomposer(target)
        steps: dict[str, Any] = {"decomposition": {
            "claims": [{"id": c.id, "text": c.text, "span": c.target_spans[0].model_dump() if c.target_spans else None,
                        **p} for c, p in zip(decomposition.claims, decomposition.placements)],
            "error": decomposition.error, "fallback": decomposition.fallback}}
        details: dict[str, Any] = {"steps": steps}
        claims = decomposition.claims
        if not claims:
            return Report(method=self.name, unscored_reason=decomposition.error or "no claims found in the target",
                          calls=decomposition.calls, details=details)

        retrieved = self.evidence == "retrieval"
        narrowed = not retrieved and self._needs_narrowing(source, finder, claims)
        index = await self._index(source, self.retrieval_config.retriever if narrowed or retrieved else "bm25")
        details["source_mode"] = "retrieved evidence" if retrieved else "retrieval" if narrowed else "full"
        if narrowed or retrieved:
            details["retrieval"] = index.describe()
            index.embed_queries([c.text for c in claims])

        async def find(claim: Claim) -> FoundEvidence:
            if retrieved:
                return await ProbeRetrieveEvidence(self.max_evidence)(claim, source, index)
            if narrowed:
                return await finder(claim, source, index)
            try:
                return await finder(claim, source)
            except ContextOverflowError:  # the backend knew better than our token count
                if self.narrow == "never":
                    raise
                details["source_mode"] = "retrieval (after a context overflow)"
                return await finder(claim, source, await self._index(source, self.retrieval_config.retriever))

        found = list(await asyncio.gather(*(find(c) for c in claims)))
        steps["evidence_finding"] = [
            {"claim_id": f.claim_id, "narrowed": f.narrowed, "snippets": [s.model_dump() for s in f.snippets],
             "quotes": f.quotes, "error": f.error} for f in found]

        async def evaluate(claim: Claim, f: FoundEvidence) -> list[EvidenceJudgment]:
            contexts = [index.context_around(e.span, self.context_sentences).text for e in f.evidence if e.span]
            return list(await asyncio.gather(*(evaluator(claim, e, ctx) for e, ctx in zip(f.evidence, contexts))))

        judgments = list(await asyncio.gather(*(evaluate(c, f) for c, f in zip(claims, found))))
        steps["evidence_evaluation"] = [
            {"claim_id": j.claim_id, "evidence_span": j.evidence.span.model_dump() if j.evidence.span else None,
             "votes": [{"judge": v.judge, "verdict": None if v.passed is None else ("PASS" if v.passed else "FAIL"),
                        "error": v.error} for v in j.votes],
             "pass_fraction": j.pass_fraction, "accepted": j.accepted}
            for js in judgments for j in js]

        verdicts = [self._verdict(c, f, js) for c, f, js in zip(claims, found, judgments)]
        findings = [self._finding(v) for v in verdicts if v.label == "unsupported"]
        steps["localization"] = {
            "hallucinated_claim_ids": [v.claim.id for v in verdicts if v.label == "unsupported"],
            "spans": [s.model_dump() for f in findings for s in f.target_spans],
            "unplaced": [v.claim.id for v in verdicts if v.label == "unsupported" and not v.claim.target_spans]}

        scored = [v for v in verdicts if v.label != "unscored"]
        n_supported = sum(v.label == "supported" for v in scored)
        subscores = {"claims": float(len(claims)), "unscored_claims": float(len(claims) - len(scored)),
                     "hallucinated_claims": float(len(findings)),
                     "quotes_verified": float(sum(q["status"] == "verified" for f in found for q in f.quotes)),
                     "quotes_rejected": float(sum(q["status"] == "rejected" for f in found for q in f.quotes))}
        common = dict(method=self.name, claims=claims, verdicts=verdicts, findings=findings, subscores=subscores,
                      calls=decomposition.calls, details=details)
        if not scored:
            return Report(**common, unscored_reason=f"none of the {len(claims)} claims could be checked "
                                                    f"({next(v.reason for v in verdicts)})")
        return Report(**common, score=n_supported / len(scored))

    @staticmethod
    def _verdict(claim: Claim, found: FoundEvidence, judgments: list[EvidenceJudgment]) -> Verdict:
        calls = found.calls + [c for j in judgments for c in j.calls]
        if found.error:
            return Verdict.unscored(claim, found.error, calls)
        rejected = [q["quote"] for q in found.quotes if q["status"] == "rejected"]
        evidence = []
        for j in judgments:
            relation = "supports" if j.accepted else "related"
            evidence.append(j.evidence.model_copy(update={"relation": relation}))
        best = max((j.pass_fraction for j in judgments if j.pass_fraction is not None), default=None)
        if any(j.accepted for j in judgments):
            n = sum(bool(j.accepted) for j in judgments)
            return Verdict(claim=claim, label="supported", score=best, evidence=evidence, calls=calls,
                           reason=f"{n} of {len(judgments)} source passages support it on their own")
        if not judgments:
            why = "no passage of the source bears on it"
            if rejected:
                why += f" ({len(rejected)} quoted passage(s) were not found in the source and were rejected)"
            return Verdict(claim=claim, label="unsupported", score=0.0, evidence=evidence, calls=calls, reason=why)
        undecided = [j for j in judgments if j.accepted is None]
        if undecided:
            errors = "; ".join(v.error for j in undecided for v in j.votes if v.error)[:300]
            return Verdict(claim=claim, label="unscored", evidence=evidence, calls=calls,
                           reason=f"{len(undecided)} of {len(judgments)} passages could not be judged and no other "
                                  f"passage supports the claim: {errors}")
        return Verdict(claim=claim, label="unsupported", score=best, evidence=evidence, calls=calls,
                       reason=f"none of the {len(judgments)} related source passages supports it on its own")

    @staticmethod
    def _finding(verdict: Verdict) -> Finding:
        claim = verdict.claim
        return Finding(description=f'The text claims that "{claim.text}", but the source does not support this '
                                   f"({verdict.reason}).",
                       kind="unsupported", target_spans=claim.target_spans, evidence=verdict.evidence,
                       claim_ids=[claim.id or ""])
