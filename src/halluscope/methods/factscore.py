"""``factscore``: atomic facts, each verified -> fraction supported; descriptions de-duplicated (FActScore as
the "Pipeline" baseline of FINAL, seed 002 §4.1, App. C.2, H.2.5).

A :class:`~halluscope.methods.pipeline.ClaimPipeline` with two registered stages of its own:

1. **Decompose** (decomposer ``factscore``): one call splits the target (given as numbered sentences) into
   atomic facts, each declared with the number of the sentence it came from (that sentence's span becomes
   the fact's target span). Echoed placeholders (``<atomic fact>``, ``[fact]``, ``{fact}``, ``...``, ``…``,
   ``N/A``) and the prompt's own example fact are never facts: a reply with nothing else is an unusable
   decomposition, so the target is *unscored* (never 0.0 with findings pinned on real sentences).
2. **Verify** (verifier ``factscore``, usable by any claim method): one call per fact against the whole
   source or a retrieved snippet (the shared retrieval protocol: ``retrieval``, ``top_k``, ``window``, ...).
   The reply states ``"supported": true|false`` as a JSON boolean; with ``describe=True`` (default) it also
   lists each inconsistency of an unsupported fact separately. Anything else ("No problem!", "Yes, I can
   help...", ``{"supported": "yes"}``) is no verdict: the fact is ``unscored`` with the reason. With the whole
   source and ``batch_size`` > 1, up to ``batch_size`` facts are judged per call, each on its own, in a reply
   listing one entry per fact number (:mod:`halluscope.methods.batching`: a fact the reply leaves out, repeats
   or gives malformed is asked again on its own; never guessed). With retrieval every fact has its own
   snippets, so each keeps its own calls.

What is FActScore's own (the rest is the pipeline's):

* **Score**: the fraction of judged facts that are supported; unscored facts are left out and counted; no
  judged fact gives an unscored Report.
* **Describe + de-duplicate** (``describe=True``): the same error often shows up in several facts, so the
  descriptions of all unsupported facts are de-duplicated into one list of Findings.
  ``dedup="llm"`` (default, the paper's approach): the model picks, by number, which description to keep from
  each group of duplicates (selecting by number guarantees it cannot reword them); if its reply is unusable
  the fuzzy de-duplication is used and ``details["dedup_error"]`` says why. ``dedup="fuzzy"`` (no LLM call):
  descriptions whose word-order-insensitive similarity is >= ``dedup_threshold`` or that quote the same
  target words are merged (conservative: near-identical wordings only); more than 2,000 descriptions are not
  compared pairwise (only identical wordings and spans merge; ``details["dedup_note"]`` says so). ``dedup="none"`` keeps every
  description. A fact judged unsupported without any description gets one saying so. A Finding's spans are
  the target words its description quotes, else the sentences of the facts it came from.

With another verifier (``-o verifier=probe``) its verdicts are used as they are; each unsupported fact then
contributes one description (the fact and the verifier's reason), de-duplicated the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from rapidfuzz import fuzz, process

from halluscope.llm.replies import Reply
from halluscope.llm.structured import generate_reply
from halluscope.methods import register_method
from halluscope.methods.options import MAX_BATCH_SIZE, ClaimOptions, StageOptions
from halluscope.methods.batching import (
    BatchStep,
    ask_batch,
    batch_reply_budget,
    gather_or_cancel,
    judge_in_batches,
    numbered,
    redone_verdict,
)
from halluscope.methods.pipeline import (
    ClaimPipeline,
    LLMVerifier,
    PipelineRun,
    claim_finding,
    messages_tokens,
)
from halluscope.prompts import PromptTemplate
from halluscope.records import Claim, Finding, LLMCall, Span, StepResult, Verdict
from halluscope.stages import Context, PromptResolver, register_stage, same_prompt
from halluscope.text import ParseError, Sentence, locate, split_sentences
from halluscope.text.descriptions import (
    MAX_FUZZY_DESCRIPTIONS,
    clean_descriptions,
    fuzzy_duplicate_groups,
    fuzzy_is_capped,
    merge_spans,
    most_specific,
    spans_for_description,
)
from halluscope.text.placeholders import (
    example_strings,
    is_placeholder,
    normalized,
    resembles,
    shown_strings,
)

if TYPE_CHECKING:  # pragma: no cover
    from halluscope.llm import LLM
    from halluscope.methods.base import Method

DedupMode = Literal["fuzzy", "llm", "none"]
_SYSTEM = "You are a meticulous fact-checker who compares texts with the source documents they are based on."

# ------------------------------------------------------------------------------------------------ replies


class FactEntry(BaseModel):
    """One atomic fact and the TEXT sentence it comes from."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    sentence: int = Field(ge=1, description="the number of the TEXT sentence the fact comes from")
    fact: str = Field(description="one short, self-contained statement carrying exactly one piece of information")


class FactsReply(Reply):
    """Decomposition: the declared list of atomic facts (a bare list of fact objects is read as this list)."""

    facts: list[FactEntry] = Field(description="every atomic fact of the TEXT, in TEXT order")
    example: ClassVar[dict[str, Any] | None] = {
        "facts": [{"sentence": 1, "fact": "The museum opened in 1998."},
                  {"sentence": 1, "fact": "The museum is in Lyon."}]}
    bare_list_field: ClassVar[str | None] = "facts"
    refuse_example_echo: ClassVar[bool] = False  # parse_facts keeps an example fact only when the TEXT says it


class FactCheckReply(Reply):
    """Verification without descriptions: only the stated boolean counts."""

    supported: bool = Field(description="true if the SOURCE states the FACT or it follows directly from the "
                                        "SOURCE; false if the SOURCE contradicts it or does not say it")


class FactJudgmentReply(FactCheckReply):
    """Verification with descriptions (FINAL's detection prompt): the stated boolean, and for an unsupported
    fact each inconsistency described separately. Echoed placeholders are dropped; "supported" with real
    inconsistencies listed contradicts itself and is refused."""

    inconsistencies: list[str] = Field(
        default_factory=list,
        description="when the fact is not supported: each inconsistency separately, saying what the fact "
                    "claims (its words in double quotes) and what the SOURCE says instead or does not "
                    "contain; an empty list when it is supported")
    example: ClassVar[dict[str, Any] | None] = {
        "supported": False,
        "inconsistencies": ['The fact says the museum opened in "1998", but the SOURCE says it opened in 2001.']}

    @field_validator("inconsistencies")
    @classmethod
    def _real_descriptions(cls, items: list[str]) -> list[str]:
        if any(normalized(item) in DESCRIPTION_EXAMPLES for item in items):
            raise ValueError("an inconsistency is copied from the format's example: the judgment is the example's")
        return clean_descriptions(items, DESCRIPTION_ECHOES, refuse_echoes=False)

    @model_validator(mode="after")
    def _consistent(self) -> FactJudgmentReply:
        if self.supported and self.inconsistencies:
            raise ValueError('"supported" is true but inconsistencies are listed: the reply contradicts itself')
        return self


class FactCheckBatchEntry(FactCheckReply):
    """Batched verification without descriptions: the stated boolean for the fact numbered ``id``."""

    id: int = Field(ge=1, description="the number of the fact")


class FactJudgmentBatchEntry(FactJudgmentReply):
    """Batched verification with descriptions: the judgment of the fact numbered ``id``."""

    id: int = Field(ge=1, description="the number of the fact")


class FactCheckBatchReply(Reply):
    """Batched verification without descriptions: one entry per numbered fact (a bare list is read as
    ``results``)."""

    results: list[FactCheckBatchEntry] = Field(description="exactly one entry per fact, in any order")
    example: ClassVar[dict[str, Any] | None] = {"results": [{"id": 1, "supported": True},
                                                            {"id": 2, "supported": False}]}
    bare_list_field: ClassVar[str | None] = "results"


class FactJudgmentBatchReply(Reply):
    """Batched verification with descriptions: one entry per numbered fact (a bare list is read as
    ``results``)."""

    results: list[FactJudgmentBatchEntry] = Field(description="exactly one entry per fact, in any order")
    example: ClassVar[dict[str, Any] | None] = {"results": [
        {"id": 1, "supported": True, "inconsistencies": []},
        {"id": 2, "supported": False,
         "inconsistencies": ['The fact says the museum opened in "1998", but the SOURCE says it opened in 2001.']}]}
    bare_list_field: ClassVar[str | None] = "results"


class KeepReply(Reply):
    """LLM de-duplication: the numbers of the descriptions to keep."""

    keep: list[int] = Field(description="the numbers of the descriptions to keep: one from each group of "
                                        "duplicates, and every description that has no duplicate")
    example: ClassVar[dict[str, Any] | None] = {"keep": [1, 3]}
    refuse_example_echo: ClassVar[bool] = False  # numbers only, no verdict: [1, 3] can be the real selection


FACT_ECHOES = shown_strings(FactsReply)
FACT_EXAMPLES = example_strings(FactsReply)
DESCRIPTION_ECHOES = shown_strings(FactJudgmentReply) | shown_strings(FactJudgmentBatchReply)
DESCRIPTION_EXAMPLES = example_strings(FactJudgmentReply) | example_strings(FactJudgmentBatchReply)

# ------------------------------------------------------------------------------------------------ prompts

FACTSCORE_DECOMPOSE_PROMPT = PromptTemplate(
    name="factscore_decompose",
    version="2",
    reply=FactsReply,
    shared=("sentences",),
    system=_SYSTEM,
    user=(
        "Break the TEXT below into atomic facts. An atomic fact is a short, self-contained statement that "
        "carries exactly one piece of information (one relation, one number, one date, one attribute...). "
        "Replace pronouns and vague references with the names they stand for, so that each fact can be "
        "understood on its own. Cover every piece of information in the TEXT, and add nothing that it does "
        "not say. For each fact give the number of the sentence it comes from.\n\n"
        "$format\n\nTEXT, one numbered sentence per line:\n$sentences"
    ),
)

FACTSCORE_VERIFY_PROMPT = PromptTemplate(
    name="factscore_verify",
    version="2",
    reply=FactCheckReply,
    system=_SYSTEM,
    user=(
        "Is the FACT supported by the SOURCE? It is supported only if the SOURCE states it or it follows "
        "directly from the SOURCE; a fact that the SOURCE contradicts, or that cannot be verified from it, is "
        "not supported.\n\n$format\n\nSOURCE:\n$source\n\nFACT:\n$fact"
    ),
)

FACTSCORE_DESCRIBE_PROMPT = PromptTemplate(
    name="factscore_describe",
    version="2",
    reply=FactJudgmentReply,
    system=_SYSTEM,
    user=(
        "Is the FACT supported by the SOURCE? It is supported only if the SOURCE states it or it follows "
        "directly from the SOURCE; a fact that the SOURCE contradicts, or that cannot be verified from it, is "
        "not supported.\n"
        "If and only if it is not supported, describe every inconsistency separately: for each, say what the "
        "fact claims (quote its words in double quotes) and what the SOURCE says instead, or which detail the "
        "SOURCE does not contain. Be brief and specific; avoid vague statements such as \"this cannot be "
        "verified\". Never put two problems in one description.\n\n"
        "$format\n\nSOURCE:\n$source\n\nFACT:\n$fact"
    ),
)

_SUPPORTED_RULE = ("A fact is supported only if the SOURCE states it or it follows directly from the SOURCE; a fact "
                   "that the SOURCE contradicts, or that cannot be verified from it, is not supported.")

FACTSCORE_VERIFY_BATCH_PROMPT = PromptTemplate(
    name="factscore_verify_batch",
    version="1",
    reply=FactCheckBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=(
        "For each of the numbered FACTS, decide on its own whether the SOURCE supports it. "
        + _SUPPORTED_RULE + " Judge every fact separately: another fact in the list is not evidence. Give exactly "
        "one entry per fact, with the fact's number as its id.\n\n"
        "$format\n\nSOURCE:\n$source\n\nThere are $count FACTS.\n\nFACTS:\n$facts"
    ),
)

FACTSCORE_DESCRIBE_BATCH_PROMPT = PromptTemplate(
    name="factscore_describe_batch",
    version="1",
    reply=FactJudgmentBatchReply,
    literal=("count",),
    system=_SYSTEM,
    user=(
        "For each of the numbered FACTS, decide on its own whether the SOURCE supports it. "
        + _SUPPORTED_RULE + " Judge every fact separately: another fact in the list is not evidence.\n"
        "For a fact that is not supported, and only then, describe every inconsistency separately: for each, say "
        "what the fact claims (quote its words in double quotes) and what the SOURCE says instead, or which "
        "detail the SOURCE does not contain. Be brief and specific; never put two problems in one description. "
        "A supported fact has an empty list.\n"
        "Give exactly one entry per fact, with the fact's number as its id.\n\n"
        "$format\n\nSOURCE:\n$source\n\nThere are $count FACTS.\n\nFACTS:\n$facts"
    ),
)

FACTSCORE_DEDUP_PROMPT = PromptTemplate(
    name="factscore_dedup",
    version="2",
    reply=KeepReply,
    shared=("target",),
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
        "$format\n\nTEXT:\n$target\n\nDESCRIPTIONS:\n$descriptions"
    ),
)

VERIFY_REPLY_TOKENS = 512

# ------------------------------------------------------------------------------------------------ parsers


@dataclass(frozen=True)
class AtomicFact:
    text: str
    sentence_index: int  # 0-based index of the target sentence it came from


def parse_facts(text: str, sentences: Sequence[Sentence], target: str = "") -> list[AtomicFact]:
    """The declared atomic facts (each once, in order). Placeholders are dropped, and so are copies of the
    prompt's example facts (also with a detail changed) unless the target really says them. Raises ParseError when the reply
    is not the declared list, names a sentence that does not exist, or has no real fact left."""
    entries = FactsReply.parse(text).facts
    n = len(sentences)
    facts: list[AtomicFact] = []
    seen: set[str] = set()
    for entry in entries:
        fact = " ".join(entry.fact.split())
        if is_placeholder(fact):
            continue
        copied = normalized(fact) in FACT_ECHOES or resembles(fact, FACT_EXAMPLES)
        if copied and not (target and locate(fact, target) is not None):
            continue
        if not 1 <= entry.sentence <= n:
            raise ParseError(f"fact {fact[:40]!r} names sentence {entry.sentence}; the TEXT has {n} sentence(s)")
        if fact.lower() in seen:
            continue
        seen.add(fact.lower())
        facts.append(AtomicFact(fact, entry.sentence - 1))
    if not facts:
        raise ParseError("the reply lists no atomic facts" if not entries else
                         "the reply lists no atomic facts, only placeholders or the prompt's example")
    return facts


def parse_keep(text: str, count: int) -> list[int]:
    """0-based indices to keep from ``{"keep": [1, 3]}`` (1-based integers). Raises ParseError on numbers
    out of range or an empty list (dropping everything is not de-duplication)."""
    keep = KeepReply.parse(text).keep
    if not keep:
        raise ParseError("'keep' is empty: every description would be dropped")
    bad = [k for k in keep if not 1 <= k <= count]
    if bad:
        raise ParseError(f"'keep' has {bad[0]}, not a description number in 1..{count}")
    return sorted({k - 1 for k in keep})


def _numbered_sentences(sentences: Sequence[Sentence]) -> str:
    return "\n".join(f"{i}. {s.text}" for i, s in enumerate(sentences, 1))


# ------------------------------------------------------------------------------------------------ stages


@register_stage("factscore", "decomposer")
class FactScoreDecomposer:
    """Target -> atomic facts, each with the span of the target sentence it came from (one LLM call)."""

    name: str

    def __init__(self, model: LLM, options: StageOptions | None = None, *, prompts: PromptResolver = same_prompt):
        self.llm = model
        self.prompt = prompts(FACTSCORE_DECOMPOSE_PROMPT)

    async def __call__(self, target: str) -> StepResult[list[Claim]]:
        sentences = split_sentences(target)
        if not sentences:
            return StepResult.failure("the target has no sentences")
        step = await generate_reply(self.llm, self.prompt.render(sentences=_numbered_sentences(sentences)), FactsReply,
                                    parse=lambda text: parse_facts(text, sentences, target))  # type: ignore[arg-type, return-value]
        if step.value is None:
            return StepResult.failure(step.error or "no facts", step.calls)
        facts: list[AtomicFact] = step.value  # type: ignore[assignment]
        claims = [Claim(text=f.text, kind="atomic", id=f"f{i}", target_spans=[sentences[f.sentence_index].span])
                  for i, f in enumerate(facts, 1)]
        return StepResult.success(claims, step.calls)


@register_stage("factscore", "verifier")
class FactScoreVerifier(LLMVerifier):
    """One call per claim: supported by the context or not (a stated JSON boolean), inconsistencies described.

    With ``describe`` an unsupported claim's inconsistencies are its reason, one per line; without it the model
    only states the boolean. With the whole source and ``batch_size`` > 1 several facts are judged per call,
    each on its own (:mod:`halluscope.methods.batching`); a fact the batch reply does not judge is asked on its
    own. Against a retrieved snippet every fact has its own context, so each gets its own call."""

    reply_tokens = VERIFY_REPLY_TOKENS

    class Options(StageOptions):
        describe: bool = True
        """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

        batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
        """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one call per fact)."""

    def __init__(self, model: LLM, options: "FactScoreVerifier.Options | None" = None, *,
                 prompts: PromptResolver = same_prompt):
        super().__init__(model, options, prompts=prompts)
        self.describe = self.options.describe
        self.batch_size = self.options.batch_size
        self.schema: type[FactCheckReply] = FactJudgmentReply if self.describe else FactCheckReply
        self.prompt = prompts(FACTSCORE_DESCRIBE_PROMPT if self.describe else FACTSCORE_VERIFY_PROMPT)
        self.batch_prompt = prompts(FACTSCORE_DESCRIBE_BATCH_PROMPT if self.describe
                                    else FACTSCORE_VERIFY_BATCH_PROMPT)
        self.batch_reply: type[Reply] = FactJudgmentBatchReply if self.describe else FactCheckBatchReply
        self.batch_entry: type[FactCheckReply] = FactJudgmentBatchEntry if self.describe else FactCheckBatchEntry

    def used_prompts(self) -> list[PromptTemplate]:
        return [self.prompt] + ([self.batch_prompt] if self.batch_size > 1 else [])

    def messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        return self.prompt.render(source=context_text, fact=claims[0].text)

    def batch_messages(self, claims: Sequence[Claim], context_text: str) -> list[dict[str, str]]:
        return self.batch_prompt.render(source=context_text, facts=numbered([c.text for c in claims]),
                                        count=len(claims))

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        """The larger of a one-fact call (longest fact) and, when batching, a call with the first batch."""
        reserve = super().reserve_tokens(claims)
        if self.batch_size > 1 and len(claims) > 1:
            batch = list(claims[: self.batch_size])
            reserve = max(reserve, messages_tokens(self.llm, self.batch_messages(batch, ""))
                          + batch_reply_budget(self.llm, self.reply_tokens, len(batch)))
        return reserve

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        if self.batch_size <= 1 or context.kind != "source":
            return await gather_or_cancel(self.check(c, context) for c in claims)
        real = [c for c in claims if not is_placeholder(c.text)]  # placeholders need no call
        judged = iter(await judge_in_batches(
            real, self.batch_size, ask=lambda part: self.ask_batch(part, context),
            accept=self.verdict, alone=lambda c: self.check(c, context), redone=redone_verdict))
        return [next(judged) if not is_placeholder(c.text) else await self.check(c, context) for c in claims]

    async def ask_batch(self, claims: list[Claim], context: Context) -> BatchStep[Any]:
        n = len(claims)
        params = self.llm.params(max_tokens=batch_reply_budget(self.llm, self.reply_tokens, n))
        return await ask_batch(self.llm, self.batch_messages(claims, context.text), self.batch_reply,
                               self.batch_entry, n, params=params, unit="fact")

    async def check(self, claim: Claim, context: Context) -> Verdict:
        if is_placeholder(claim.text):
            return Verdict.unscored(claim, f"the claim {claim.text[:40]!r} is a template placeholder, not a claim")
        step = await generate_reply(self.llm, self.messages([claim], context.text), self.schema)
        if step.value is None:
            return Verdict.unscored(claim, f"verification reply unusable: {step.error}", step.calls)
        return self.verdict(claim, step.value, step.calls)

    @staticmethod
    def verdict(claim: Claim, reply: FactCheckReply, calls: Sequence[LLMCall]) -> Verdict:
        """The verdict a stated judgment gives (the same for a single reply and a batch entry)."""
        if reply.supported:
            return Verdict(claim=claim, label="supported", reason="supported by the source", score=1.0,
                           calls=list(calls))
        descriptions = list(getattr(reply, "inconsistencies", ()))
        return Verdict(claim=claim, label="unsupported", score=0.0, calls=list(calls),
                       reason="\n".join(descriptions) or f"Not supported by the source: {claim.text}")


class DescriptionDeduplicator:
    """Groups of duplicate descriptions (the first index of each group is the one kept): fuzzy, by the LLM
    (falling back to fuzzy, with the reason, when its reply is unusable), or none."""

    def __init__(self, method: Method, mode: DedupMode = "llm", threshold: float = 85.0):
        self.llm = method.llm
        self.prompt = method.prompt(FACTSCORE_DEDUP_PROMPT)
        self.mode = mode
        self.threshold = threshold
        self.note: str | None = None  # set when the fuzzy grouping was capped
    async def __call__(self, descriptions: Sequence[str], spans: Sequence[Sequence[Span]], target: str
                       ) -> tuple[list[list[int]], str | None]:
        n = len(descriptions)
        if self.mode == "none" or n < 2:
            return [[i] for i in range(n)], None
        if self.mode == "llm":
            step = await self.with_llm(descriptions, target)
            if step.value is not None:
                return step.value, None
            return self.fuzzy(descriptions, spans), f"LLM de-duplication failed ({step.error}); used fuzzy de-duplication"
        return self.fuzzy(descriptions, spans), None

    async def with_llm(self, descriptions: Sequence[str], target: str) -> StepResult[list[list[int]]]:
        listing = "\n".join(f"{i}. {d}" for i, d in enumerate(descriptions, 1))
        n = len(descriptions)
        step = await generate_reply(self.llm, self.prompt.render(target=target, descriptions=listing), KeepReply,
                                    parse=lambda text: parse_keep(text, n))  # type: ignore[arg-type, return-value]
        if step.value is None:
            return StepResult.failure(step.error or "no reply", step.calls)
        return StepResult.success(_groups_around(descriptions, step.value), step.calls)  # type: ignore[arg-type]

    def fuzzy(self, descriptions: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[list[int]]:
        if fuzzy_is_capped(len(descriptions)):
            self.note = (f"{len(descriptions)} descriptions: more than {MAX_FUZZY_DESCRIPTIONS} are not compared "
                         "pairwise, so only identical wordings and identical spans were merged")
        out = []
        for group in fuzzy_duplicate_groups(descriptions, self.threshold, spans):
            kept = most_specific(descriptions, group, spans)
            out.append([kept] + [i for i in group if i != kept])
        return out


def _groups_around(descriptions: Sequence[str], keep: Sequence[int]) -> list[list[int]]:
    """Attach every dropped description to the kept one it is most similar to."""
    groups = {k: [k] for k in keep}
    kept_lower = [descriptions[k].lower() for k in keep]
    for i in range(len(descriptions)):
        if i in groups:
            continue
        # extractOne scores in C; ties go to the first kept one, as max() did
        _, _, position = process.extractOne(descriptions[i].lower(), kept_lower, scorer=fuzz.token_sort_ratio)
        groups[keep[position]].append(i)
    return [groups[k] for k in keep]


# ------------------------------------------------------------------------------------------------ method


class FactScoreOptions(ClaimOptions):
    describe: bool = True
    """Ask for a description of each inconsistency of an unsupported fact (FINAL's Pipeline); else yes/no only."""

    dedup: DedupMode = "llm"
    """How descriptions repeated across facts are merged: llm (the paper's: the model keeps one of each group of duplicates, by number), fuzzy (no LLM call; near-identical wordings only), or none."""

    dedup_threshold: float = Field(default=85.0, ge=0, le=100)
    """Fuzzy de-duplication (dedup=fuzzy, and the fallback of dedup=llm): word-order-insensitive similarity (0-100) at which two descriptions merge."""

    batch_size: int = Field(default=1, ge=1, le=MAX_BATCH_SIZE)
    """Facts per verification call when the whole source is sent, each still judged on its own (1 = the paper's one call per fact; with retrieval every fact has its own snippets and its own calls)."""


@register_method
class FactScore(ClaimPipeline):
    name = "factscore"
    description = ("Atomic facts + per-fact verification -> fraction supported; describe=True lists each "
                   "fact's inconsistencies, de-duplicated across facts (fuzzy or LLM).")
    Options = FactScoreOptions
    opts: FactScoreOptions
    prompts = (FACTSCORE_DECOMPOSE_PROMPT, FACTSCORE_VERIFY_PROMPT, FACTSCORE_DESCRIBE_PROMPT,
               FACTSCORE_VERIFY_BATCH_PROMPT, FACTSCORE_DESCRIBE_BATCH_PROMPT, FACTSCORE_DEDUP_PROMPT)
    default_threshold = 1.0
    default_verifier = "factscore"

    def make_decomposer(self) -> FactScoreDecomposer:
        return cast(FactScoreDecomposer, self.build_stage("decomposer", "factscore"))

    def used_prompts(self) -> list[PromptTemplate]:
        used = [self.prompt(FACTSCORE_DECOMPOSE_PROMPT)]
        verifier_prompts = getattr(self.verifier, "used_prompts", None)
        if callable(verifier_prompts):
            used += list(verifier_prompts())
        if self.opts.describe and self.opts.dedup == "llm":
            used.append(self.prompt(FACTSCORE_DEDUP_PROMPT))
        return used

    async def localize(self, run: PipelineRun) -> list[Finding]:
        """One finding per distinct inconsistency: the descriptions of every unsupported fact, de-duplicated
        (``describe=True``); else one finding per unsupported fact."""
        flagged = [v for v in run.verdicts if v.label in ("unsupported", "contradicted")]
        own = isinstance(self.verifier, FactScoreVerifier)
        if not self.opts.describe:
            return [_fact_finding(v, f"Not supported by the source: {v.claim.text}") if own else claim_finding(v)
                    for v in flagged]
        descriptions: list[str] = []
        origins: list[Verdict] = []
        for v in flagged:
            for d in (v.reason.split("\n") if own else [claim_finding(v).description]):
                descriptions.append(d)
                origins.append(v)
        quoted = [spans_for_description(d, run.target) for d in descriptions]
        dedup = DescriptionDeduplicator(self, self.opts.dedup, self.opts.dedup_threshold)
        groups, error = await dedup(descriptions, quoted, run.target)
        run.details["descriptions_before_dedup"] = len(descriptions)
        if error:
            run.details["dedup_error"] = error
        if dedup.note:
            run.details["dedup_note"] = dedup.note
        findings: list[Finding] = []
        for group in groups:
            kept = group[0]
            members = [origins[i] for i in group]
            spans = quoted[kept] or merge_spans([s for m in members for s in m.claim.target_spans])
            claim_ids = list(dict.fromkeys(m.claim.id for m in members if m.claim.id))
            findings.append(Finding(description=descriptions[kept], kind=origins[kept].label,  # type: ignore[arg-type]
                                    target_spans=spans, evidence=[e for m in members for e in m.evidence],
                                    claim_ids=claim_ids))
        return findings


def _fact_finding(verdict: Verdict, description: str) -> Finding:
    return Finding(description=description, kind=verdict.label,  # type: ignore[arg-type]
                   target_spans=list(verdict.claim.target_spans), evidence=list(verdict.evidence),
                   claim_ids=[verdict.claim.id] if verdict.claim.id else [])
