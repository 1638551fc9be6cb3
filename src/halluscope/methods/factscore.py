"""``factscore``: atomic-fact decomposition + per-fact verification (FActScore-style, as used as the
"Pipeline" baseline of FINAL, seed 002 §4.1, App. C.2, H.2.5).

1. **Decompose**: one call splits the target (given as numbered sentences) into atomic facts, each tied to
   the sentence it came from (its span becomes the fact's target span).
2. **Verify**: one call per fact against the whole source. ``describe=True`` (default) also asks for a short
   description of each inconsistency in an unsupported fact; ``describe=False`` asks only supported or not.
3. **Score**: fraction of verified facts that are supported. Facts whose verification could not be parsed
   are ``unscored`` and left out (``subscores["unscored"]``); no fact at all gives an unscored Report.
4. **Describe + de-duplicate** (``describe=True``): the same error often shows up in several facts, so the
   descriptions of all facts are de-duplicated into one list of Findings.
   ``dedup="fuzzy"`` (default, no LLM call): descriptions whose word-order-insensitive similarity is
   >= ``dedup_threshold`` or that quote the same target words are merged (conservative: near-identical
   wordings only). ``dedup="llm"``: the model picks, by number, which description to keep from each group
   of duplicates (the paper's approach; selecting by number guarantees it cannot reword them); if its reply
   is unusable the fuzzy de-duplication is used and ``details["dedup_error"]`` says why.
   ``dedup="none"`` keeps every description. A fact judged unsupported without any description gets one
   saying so. A Finding's spans are the target words its description quotes, else the sentences of the
   facts it came from.

Long sources: when the verification prompt does not fit the model's context (or ``retrieval=True``), each
fact is verified against each of its top-``top_k`` retrieved snippets and counts as supported if any
snippet supports it (seed 003, Eq. 1-2); its descriptions then come from the best-ranked snippet.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rapidfuzz import fuzz

from halluscope.llm import ContextOverflowError
from halluscope.llm.structured import generate_parsed
from halluscope.methods import register_method
from halluscope.methods._descriptions import (fuzzy_duplicate_groups, is_placeholder, merge_spans, most_specific,
                                              spans_for_description)
from halluscope.methods._long_source import prompt_fits, reply_budget
from halluscope.methods.base import Method
from halluscope.methods.dcr import match_sentence, number_sentences, parse_bool, parse_sentence_number
from halluscope.prompts import PromptTemplate, apply_overrides
from halluscope.records import Claim, Evidence, Finding, LLMCall, Report, Span, Verdict
from halluscope.stages import register_stage
from halluscope.text import ParseError, Sentence, extract_json, split_sentences

DedupMode = Literal["fuzzy", "llm", "none"]
_SYSTEM = "You are a meticulous fact-checker who compares texts with the source documents they are based on."

DECOMPOSE_PROMPT = PromptTemplate(
    name="factscore_decompose",
    version="1",
    system=_SYSTEM,
    user=(
        "Break the TEXT below into atomic facts. An atomic fact is a short, self-contained statement that "
        "carries exactly one piece of information (one relation, one number, one date, one attribute...). "
        "Replace pronouns and vague references with the names they stand for, so that each fact can be "
        "understood on its own. Cover every piece of information in the TEXT, and add nothing that it does "
        "not say.\n\n"
        "TEXT, one numbered sentence per line:\n$sentences\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"facts": [{"sentence": <number of the sentence the fact comes from>, "fact": "<atomic fact>"}]}'
    ),
)

VERIFY_PROMPT = PromptTemplate(
    name="factscore_verify",
    version="1",
    system=_SYSTEM,
    user=(
        "Is the FACT supported by the SOURCE? It is supported only if the SOURCE states it or it follows "
        "directly from the SOURCE; a fact that the SOURCE contradicts, or that cannot be verified from it, is "
        "not supported.\n\nSOURCE:\n$source\n\nFACT:\n$fact\n\n"
        'Answer with one JSON object and nothing else: {"supported": <true or false>}'
    ),
)

DESCRIBE_PROMPT = PromptTemplate(
    name="factscore_describe",
    version="1",
    system=_SYSTEM,
    user=(
        "Is the FACT supported by the SOURCE? It is supported only if the SOURCE states it or it follows "
        "directly from the SOURCE; a fact that the SOURCE contradicts, or that cannot be verified from it, is "
        "not supported.\n"
        "If it is not supported, describe every inconsistency separately: for each, say what the fact claims "
        "(quote its words in double quotes) and what the SOURCE says instead, or which detail the SOURCE "
        "does not contain. Be brief and specific; avoid vague statements such as \"this cannot be verified\". "
        "Never put two problems in one description.\n\n"
        "SOURCE:\n$source\n\nFACT:\n$fact\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"supported": <true or false>, "inconsistencies": ["<description>", ...]}\n'
        "Give an empty list when the fact is supported."
    ),
)

DEDUP_PROMPT = PromptTemplate(
    name="factscore_dedup",
    version="1",
    system=_SYSTEM,
    user=(
        "Below are a TEXT and a numbered list of descriptions of factual inconsistencies found in it. They were "
        "written separately for different parts of the TEXT, so several descriptions may be about the same "
        "inconsistency: the same wrong or unsupported piece of information in the TEXT, described in "
        "different words or for different reasons.\n"
        "Group the descriptions that are about the same piece of information. From each group keep only the "
        "one that states the inconsistency most precisely. Keep every description that has no duplicate. Do "
        "not merge descriptions of different pieces of information, and do not drop a description for any "
        "other reason.\n\n"
        "TEXT:\n$target\n\nDESCRIPTIONS:\n$descriptions\n\n"
        "Answer with one JSON object and nothing else:\n"
        '{"keep": [<the numbers of the descriptions to keep>]}'
    ),
)

VERIFY_REPLY_TOKENS = 512


# ---------------------------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class AtomicFact:
    text: str
    sentence_index: int | None  # 0-based; None when the model did not say (or said nonsense)


def parse_facts(text: str, sentences: list[Sentence]) -> list[AtomicFact]:
    """Atomic facts (each once, in order) from ``{"facts": [{"sentence": n, "fact": "..."}]}``, a bare list,
    or a list of strings. Raises ParseError when there is no fact."""
    data = extract_json(text)
    items: Any = data
    if isinstance(data, dict):
        items = next((data[k] for k in ("facts", "atomic_facts", "claims", "items") if isinstance(data.get(k), list)),
                     None)
    if not isinstance(items, list):
        raise ParseError("no list of facts in the reply")
    n = len(sentences)
    facts: list[AtomicFact] = []
    seen: set[str] = set()
    for item in items:
        fact, index = None, None
        if isinstance(item, str):
            fact = item
        elif isinstance(item, dict):
            fact = next((item[k] for k in ("fact", "text", "claim", "statement") if isinstance(item.get(k), str)), None)
            index = next((parse_sentence_number(item[k], n)
                          for k in ("sentence", "sentence_id", "id", "sentence_number") if k in item), None)
            if index is None:  # some models quote the sentence instead of giving its number
                index = match_sentence(item.get("sentence"), sentences)
        if not fact or not fact.strip():
            continue
        fact = " ".join(fact.split())
        if index is None and n == 1:
            index = 0
        if fact.lower() in seen:
            continue
        seen.add(fact.lower())
        facts.append(AtomicFact(fact, index))
    if not facts:
        raise ParseError("the reply lists no atomic facts")
    return facts


@dataclass(frozen=True)
class FactJudgment:
    supported: bool
    descriptions: tuple[str, ...] = ()


_BARE_VERDICT = re.compile(r"^\W*(yes|no|true|false|supported|not supported|unsupported)\b", re.I)


def parse_fact_judgment(text: str, describe: bool) -> FactJudgment:
    """``{"supported": bool, "inconsistencies": [...]}``; a reply that only starts with yes/no (or
    supported/not supported) is accepted too. Descriptions are kept only for unsupported facts."""
    supported: bool | None = None
    descriptions: list[str] = []
    try:
        data = extract_json(text, dict)
    except ParseError:
        m = _BARE_VERDICT.match(text or "")
        if m is None:
            raise
        supported = m.group(1).lower() in ("yes", "true", "supported")
        bullets = [line.strip().lstrip("-*•").strip() for line in text.splitlines()[1:]
                   if line.strip().startswith(("-", "*", "•"))]
        descriptions = [b for b in bullets if b and not is_placeholder(b)]
    else:
        for key in ("supported", "is_supported", "consistent", "answer", "verdict"):
            if key in data:
                supported = parse_bool(data[key])
                if supported is None and isinstance(data[key], str):
                    value = data[key].strip().lower()
                    supported = {"supported": True, "not supported": False, "unsupported": False}.get(value)
                break
        raw = next((data[k] for k in ("inconsistencies", "problems", "descriptions", "issues")
                    if isinstance(data.get(k), list)), [])
        descriptions = [" ".join(d.split()) for d in raw if isinstance(d, str) and d.strip() and not is_placeholder(d)]
    if supported is None:
        raise ParseError("the reply does not say whether the fact is supported")
    if supported or not describe:
        return FactJudgment(supported)
    return FactJudgment(False, tuple(descriptions))


def parse_keep(text: str, count: int) -> list[int]:
    """0-based indices to keep from ``{"keep": [1, 3]}`` (1-based numbers). Raises ParseError on numbers out
    of range or an empty list (dropping everything is not de-duplication)."""
    data = extract_json(text)
    keep: Any = data
    if isinstance(data, dict):
        keep = next((data[k] for k in ("keep", "kept", "indices", "numbers") if isinstance(data.get(k), list)), None)
    if not isinstance(keep, list) or not keep:
        raise ParseError("no non-empty 'keep' list in the reply")
    out: list[int] = []
    for value in keep:
        index = parse_sentence_number(value, count)
        if index is None:
            raise ParseError(f"'keep' has {str(value)[:20]!r}, not a description number in 1..{count}")
        if index not in out:
            out.append(index)
    return sorted(out)


# ---------------------------------------------------------------------------------------------- stages


@register_stage("factscore.decompose")
class FactDecomposer:
    name = "factscore.decompose"

    def __init__(self, llm, prompt: PromptTemplate = DECOMPOSE_PROMPT):
        self.llm = llm
        self.prompt = prompt

    async def __call__(self, sentences: list[Sentence]):
        return await generate_parsed(
            self.llm, self.prompt.render(sentences=number_sentences(sentences)),
            lambda text: parse_facts(text, sentences), params=self.llm.params(json_mode=True),
            format_hint='one JSON object {"facts": [{"sentence": 1, "fact": "..."}]}')


@register_stage("factscore.verify")
class FactVerifier:
    name = "factscore.verify"

    def __init__(self, llm, prompt: PromptTemplate, describe: bool):
        self.llm = llm
        self.prompt = prompt
        self.describe = describe

    def messages(self, source: str, fact: str):
        return self.prompt.render(source=source, fact=fact)

    async def __call__(self, source: str, fact: str):
        hint = ('one JSON object {"supported": false, "inconsistencies": ["..."]}' if self.describe
                else 'one JSON object {"supported": true}')
        return await generate_parsed(self.llm, self.messages(source, fact),
                                     lambda text: parse_fact_judgment(text, self.describe),
                                     params=self.llm.params(json_mode=True), format_hint=hint)


@dataclass
class DedupResult:
    groups: list[list[int]]  # each group's first index is the description kept
    calls: list[LLMCall] = field(default_factory=list)
    error: str | None = None


@register_stage("factscore.dedup")
class DescriptionDeduplicator:
    """Merge descriptions of the same inconsistency; returns groups of indices (the first of each is kept)."""

    name = "factscore.dedup"

    def __init__(self, llm, mode: DedupMode = "fuzzy", threshold: float = 85.0, prompt: PromptTemplate = DEDUP_PROMPT):
        self.llm = llm
        self.mode = mode
        self.threshold = threshold
        self.prompt = prompt

    async def __call__(self, descriptions: list[str], spans: list[list[Span]], target: str) -> DedupResult:
        n = len(descriptions)
        if self.mode == "none" or n < 2:
            return DedupResult([[i] for i in range(n)])
        if self.mode == "llm":
            listing = "\n".join(f"{i}. {d}" for i, d in enumerate(descriptions, 1))
            parsed = await generate_parsed(
                self.llm, self.prompt.render(target=target, descriptions=listing),
                lambda text: parse_keep(text, n), params=self.llm.params(json_mode=True),
                format_hint='one JSON object {"keep": [1, 3]}')
            if parsed.value is not None:
                return DedupResult(_groups_around(descriptions, parsed.value), calls=parsed.calls)
            groups = self._fuzzy(descriptions, spans)
            return DedupResult(groups, calls=parsed.calls, error=f"LLM de-duplication failed ({parsed.error}); "
                                                                  "used fuzzy de-duplication")
        return DedupResult(self._fuzzy(descriptions, spans))

    def _fuzzy(self, descriptions: list[str], spans: list[list[Span]]) -> list[list[int]]:
        out = []
        for group in fuzzy_duplicate_groups(descriptions, self.threshold, spans):
            kept = most_specific(descriptions, group, spans)
            out.append([kept] + [i for i in group if i != kept])
        return out


def _groups_around(descriptions: list[str], keep: list[int]) -> list[list[int]]:
    """Attach every dropped description to the kept one it is most similar to."""
    groups = {k: [k] for k in keep}
    for i in range(len(descriptions)):
        if i in groups:
            continue
        nearest = max(keep, key=lambda k: fuzz.token_sort_ratio(descriptions[i].lower(), descriptions[k].lower()))
        groups[nearest].append(i)
    return [groups[k] for k in keep]


# ---------------------------------------------------------------------------------------------- method


@register_method
class FactScore(Method):
    name = "factscore"
    description = ("Atomic facts + per-fact verification -> fraction supported; describe=True lists each "
                   "fact's inconsistencies, de-duplicated across facts (fuzzy or LLM).")
    prompts = (DECOMPOSE_PROMPT, VERIFY_PROMPT, DESCRIBE_PROMPT, DEDUP_PROMPT)
    default_threshold = 1.0

    def __init__(self, llm=None, config=None, describe: bool = True, dedup: DedupMode = "fuzzy",
                 dedup_threshold: float = 85.0, retrieval: bool = False, top_k: int = 3, window: int = 1,
                 retriever: str = "auto"):
        super().__init__(llm, config)
        if dedup not in ("fuzzy", "llm", "none"):
            raise ValueError(f"dedup must be 'fuzzy', 'llm' or 'none', got {dedup!r}")
        if not 0 <= dedup_threshold <= 100:
            raise ValueError("dedup_threshold must be in [0, 100]")
        if top_k < 1 or window < 0:
            raise ValueError("top_k must be >= 1 and window >= 0")
        self.describe = bool(describe)
        self.dedup: DedupMode = dedup
        self.dedup_threshold = float(dedup_threshold)
        self.retrieval = bool(retrieval)
        self.top_k = top_k
        self.window = window
        if retriever not in ("auto", "embedding", "bm25"):
            raise ValueError(f"retriever must be auto, embedding or bm25, got {retriever!r}")
        self.retriever = retriever

    def options(self) -> dict[str, Any]:
        return {"describe": self.describe, "dedup": self.dedup, "dedup_threshold": self.dedup_threshold,
                "retrieval": self.retrieval, "top_k": self.top_k, "window": self.window,
                "retriever": self.retriever}

    @property
    def prompt_version(self) -> str:
        used = [DECOMPOSE_PROMPT, DESCRIBE_PROMPT if self.describe else VERIFY_PROMPT]
        if self.describe and self.dedup == "llm":
            used.append(DEDUP_PROMPT)
        return ",".join(f"{p.name}@{p.version}" for p in used)

    def _prompt(self, template: PromptTemplate) -> PromptTemplate:
        return apply_overrides(template, self.config.prompts_dir)

    async def run(self, source: str, target: str) -> Report:
        sentences = split_sentences(target)
        if not sentences:
            return Report(method=self.name, unscored_reason="the target has no sentences")
        decomposed = await FactDecomposer(self.llm, self._prompt(DECOMPOSE_PROMPT))(sentences)
        calls = list(decomposed.calls)
        if decomposed.value is None:
            return Report(method=self.name, unscored_reason=f"decomposition failed: {decomposed.error}", calls=calls)
        facts: list[AtomicFact] = decomposed.value
        claims = [Claim(text=f.text, kind="atomic", id=f"f{i + 1}",
                        target_spans=[] if f.sentence_index is None else [sentences[f.sentence_index].span])
                  for i, f in enumerate(facts)]
        verifier = FactVerifier(self.llm, self._prompt(DESCRIBE_PROMPT if self.describe else VERIFY_PROMPT),
                                self.describe)
        details: dict[str, Any] = {"mode": "full"}
        why_retrieval = "requested (retrieval=True)" if self.retrieval else None
        if why_retrieval is None and not prompt_fits(self.llm, verifier.messages(source, facts[0].text),
                                                     reply_budget(self.llm, VERIFY_REPLY_TOKENS)):
            why_retrieval = "the source does not fit the model's context window"
        verdicts: list[Verdict] | None = None
        if why_retrieval is None:
            try:
                verdicts = list(await asyncio.gather(*(self._verify_full(verifier, source, c) for c in claims)))
            except ContextOverflowError as exc:
                why_retrieval = f"the model reported a context overflow: {exc}"
        if verdicts is None:
            verdicts, described = await self._verify_retrieval(verifier, source, claims)
            details = {"mode": "retrieval", "retrieval_reason": why_retrieval, "retrieval": described}
        return await self._report(target, sentences, claims, verdicts, calls, details)

    async def _verify_full(self, verifier: FactVerifier, source: str, claim: Claim) -> Verdict:
        parsed = await verifier(source, claim.text)
        return _verdict(claim, parsed.value, parsed.error, parsed.calls)

    async def _verify_retrieval(self, verifier: FactVerifier, source: str, claims: list[Claim]
                                ) -> tuple[list[Verdict], dict[str, Any]]:
        """Each fact against each of its retrieved snippets; supported if any snippet supports it (checked in
        rank order, stopping at the first that does)."""
        from halluscope.retrieval import RetrievalConfig, Snippet, SourceIndex, score_with_retrieval

        config = RetrievalConfig(top_k=self.top_k, window=self.window, retriever=self.retriever)
        index = await SourceIndex.abuild(source, config)
        judged: dict[tuple[str, int], tuple[FactJudgment | None, str | None]] = {}
        calls_by_fact: dict[str, list[LLMCall]] = {}

        async def verify(fact: str, snippet: Snippet) -> float | None:
            parsed = await verifier(snippet.text, fact)
            calls_by_fact.setdefault(fact, []).extend(parsed.calls)
            judged[(fact, snippet.span.start)] = (parsed.value, parsed.error)
            if parsed.value is None:
                return None
            return 1.0 if parsed.value.supported else 0.0

        outcome = await score_with_retrieval(claims, index, verify, config)
        verdicts: list[Verdict] = []
        for claim, result in zip(claims, outcome.claims):
            calls = calls_by_fact.get(claim.text, [])
            best = result.best_snippet  # the first supporting snippet, else the best-ranked judged one
            if best is None:
                errors = [judged[(claim.text, sn.span.start)][1] for sn in result.snippets
                          if (claim.text, sn.span.start) in judged]
                verdicts.append(Verdict.unscored(claim, f"verification reply unusable: {errors[0]}" if errors
                                                 else "no source snippet was retrieved for this fact", calls))
                continue
            judgment, _ = judged[(claim.text, best.span.start)]
            relation = "supports" if judgment is not None and judgment.supported else "related"
            verdicts.append(_verdict(claim, judgment, None, calls,
                                     evidence=[Evidence(text=best.text, span=best.span, relation=relation)]))
        return verdicts, index.describe()

    async def _report(self, target: str, sentences: list[Sentence], claims: list[Claim], verdicts: list[Verdict],
                      calls: list[LLMCall], details: dict[str, Any]) -> Report:
        scored = [v for v in verdicts if v.label != "unscored"]
        supported = sum(v.label == "supported" for v in scored)
        subscores: dict[str, float | None] = {"facts": float(len(verdicts)), "supported": float(supported),
                                              "unscored": float(len(verdicts) - len(scored))}
        if not scored:
            first = next((v.reason for v in verdicts), "no facts")
            return Report(method=self.name, unscored_reason=f"no fact could be verified ({first})", claims=claims,
                          verdicts=verdicts, subscores=subscores, calls=calls, details=details)
        findings, dedup_calls = await self._findings(target, verdicts, details)
        return Report(method=self.name, score=supported / len(scored), subscores=subscores, claims=claims,
                      verdicts=verdicts, findings=findings, calls=calls + dedup_calls, details=details)

    async def _findings(self, target: str, verdicts: list[Verdict], details: dict[str, Any]
                        ) -> tuple[list[Finding], list[LLMCall]]:
        unsupported = [v for v in verdicts if v.label == "unsupported"]
        if not self.describe:
            return [Finding(description=f"Not supported by the source: {v.claim.text}", kind="unsupported",
                            target_spans=list(v.claim.target_spans), evidence=list(v.evidence),
                            claim_ids=[v.claim.id or ""]) for v in unsupported], []
        descriptions: list[str] = []
        origins: list[Verdict] = []
        for v in unsupported:
            for d in v.reason.split("\n"):  # one description per line (see _verdict)
                descriptions.append(d)
                origins.append(v)
        quoted = [spans_for_description(d, target) for d in descriptions]
        dedup = DescriptionDeduplicator(self.llm, self.dedup, self.dedup_threshold, self._prompt(DEDUP_PROMPT))
        result = await dedup(descriptions, quoted, target)
        details["descriptions_before_dedup"] = len(descriptions)
        if result.error:
            details["dedup_error"] = result.error
        findings: list[Finding] = []
        for group in result.groups:
            kept = group[0]
            members = [origins[i] for i in group]
            spans = quoted[kept] or merge_spans([s for m in members for s in m.claim.target_spans])
            claim_ids = list(dict.fromkeys(m.claim.id for m in members if m.claim.id))
            evidence = [e for m in members for e in m.evidence]
            findings.append(Finding(description=descriptions[kept], kind="unsupported", target_spans=spans,
                                    evidence=evidence, claim_ids=claim_ids))
        return findings, result.calls


def _verdict(claim: Claim, judgment: FactJudgment | None, error: str | None, calls: list[LLMCall],
             evidence: list[Evidence] | None = None) -> Verdict:
    """A fact's verdict. The descriptions of an unsupported fact are the reason, one per line."""
    if judgment is None:
        return Verdict.unscored(claim, f"verification reply unusable: {error}", calls)
    if judgment.supported:
        return Verdict(claim=claim, label="supported", reason="supported by the source", score=1.0, calls=calls,
                       evidence=list(evidence or []))
    reason = "\n".join(judgment.descriptions) or f"Not supported by the source: {claim.text}"
    return Verdict(claim=claim, label="unsupported", reason=reason, score=0.0,
                   calls=calls, evidence=list(evidence or []))
