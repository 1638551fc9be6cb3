"""Typed method options: each method declares a pydantic model of its options, validated once.

``halluscope methods NAME`` prints the model's fields (type, default, one line of doc each); an unknown or
mistyped option raises :class:`OptionsError` naming the valid ones (CLI exit 2, HTTP 400).

A stage is chosen only by the option of its kind's name (``decomposer=NAME``, ...). A paper's own name for such a
choice (DCR's ``level=sentence|paragraph``) is a :class:`StageAlias` of the options model, translated into the kind's
option when the options are parsed (:meth:`MethodOptions.parse`), so no code after parsing sees it; an older
spelling that is not a paper's (``retired_spellings``) is refused with the spelling to write instead.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator


class OptionsError(ValueError):
    """Bad method options; the message lists what is valid."""


@dataclass(frozen=True)
class StageAlias:
    """A paper's own option for what is now a stage choice: its values, each the stage of ``kind`` it names."""

    kind: str
    """The stage kind whose option the alias sets (``decomposer``)."""
    stages: Mapping[str, str]
    """The alias's value -> the stage name (``paragraph`` -> ``paragraph``)."""


class MethodOptions(BaseModel):
    """Base of every method's options. Fields carry a docstring (``use_attribute_docstrings``)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, validate_default=True, allow_inf_nan=False
    )  # NaN and inf are never an option

    stage_aliases: ClassVar[Mapping[str, StageAlias]] = {}
    """option -> the stage choice it stands for: translated into the kind's option by :meth:`parse`."""

    retired_spellings: ClassVar[Mapping[str, str]] = {}
    """``option`` or ``option=value`` -> what to write instead: an older spelling :meth:`parse` refuses."""

    @classmethod
    def parse(cls, method: str, values: dict[str, Any]) -> MethodOptions:
        values = cls.translate(method, values)
        unknown = sorted(set(values) - set(cls.model_fields))
        if unknown:
            raise OptionsError(
                f"unknown option(s) for {method}: {', '.join(unknown)}. "
                f"Valid options: {', '.join(cls.model_fields) or 'none'}"
            )
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}" + _allowed(cls, e["loc"])
                for e in exc.errors()
            )
            raise OptionsError(
                f"bad option(s) for {method}: {problems}. Valid options: {', '.join(cls.model_fields) or 'none'}"
            ) from None

    @classmethod
    def option_names(cls) -> set[str]:
        """The option names :meth:`parse` takes: the fields and the stage aliases."""
        return {*cls.model_fields, *cls.stage_aliases}

    @classmethod
    def translate(cls, method: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with each stage alias replaced by the option of its kind's name; a retired spelling, a value
        the alias does not know, or an alias beside its kind's option naming another stage is an
        :class:`OptionsError`."""
        for key, value in values.items():
            instead = cls.retired_spellings.get(key)
            if instead is None and isinstance(value, str):
                instead = cls.retired_spellings.get(f"{key}={value}")
            if instead is not None:
                raise OptionsError(f"{key}={value} is no longer an option of {method}: write {instead}")
        out = dict(values)
        for option, alias in cls.stage_aliases.items():
            if option not in out:
                continue
            value = out.pop(option)
            stage = alias.stages.get(str(value))
            if stage is None:
                raise OptionsError(
                    f"bad option(s) for {method}: {option}: one of {', '.join(alias.stages)} (the same as "
                    + ", ".join(f"{alias.kind}={name}" for name in alias.stages.values())
                    + f"), got {value!r}"
                )
            given = out.get(alias.kind)
            if given is not None and given != stage:
                raise OptionsError(
                    f"{method}: {option}={value} and {alias.kind}={given} name different {alias.kind} stages; give one"
                )
            out[alias.kind] = stage
        return out

    @classmethod
    def option_rows(cls) -> list[dict[str, str]]:
        """One row per option: name, type, default, doc."""
        rows = []
        for name, info in cls.model_fields.items():
            default = "(required)" if info.is_required() else repr(info.get_default(call_default_factory=True))
            rows.append(
                {
                    "name": name,
                    "type": _type_name(info.annotation),
                    "default": default,
                    "doc": " ".join((info.description or "").split()),
                }
            )
        return rows


class StageOptions(MethodOptions):
    """Base of every stage's options (the ``Options`` attribute of a stage class): as strict as a method's
    (unknown keys refused, ranges checked, one line of doc per field). A stage with no options keeps it empty."""


def options_view(
    name: str, source: type[BaseModel], fields: Sequence[str], doc: str, retired: Mapping[str, str] | None = None
) -> Any:
    """A stage options model (a :class:`StageOptions` subclass) holding ``fields`` of ``source`` (a method's flat
    options), each with the same type, default, bounds, doc and validators: one declaration serves the method's
    flat option and its stage's; ``retired``: its ``retired_spellings``. Typed ``Any`` for the type checker, which
    cannot see the fields of a model built at run time."""
    infos = source.model_fields
    validators = {}
    for key, decorator in source.__pydantic_decorators__.field_validators.items():
        kept = [f for f in decorator.info.fields if f in fields]
        if kept:
            func = getattr(decorator.func, "__func__", decorator.func)  # the classmethod, unbound
            validators[key] = field_validator(*kept, mode=decorator.info.mode)(func)
    model = create_model(
        name,
        __base__=StageOptions,
        __doc__=doc,
        __validators__=validators,  # type: ignore[call-overload]
        **{f: (infos[f].annotation, infos[f]) for f in fields},
    )
    model.__module__ = source.__module__
    if retired:
        model.retired_spellings = dict(retired)
    return model


def own_options(stage_options: type[MethodOptions], method_options: MethodOptions) -> dict[str, Any]:
    """The method's values of the options its stage also declares: how a method passes its flat options
    (``-o batch_size=4``) to its own stages."""
    return {f: getattr(method_options, f) for f in stage_options.model_fields if f in type(method_options).model_fields}


def _allowed(cls: type[MethodOptions], loc: tuple[Any, ...]) -> str:
    """ " (allowed: 1 to 20)" for a field with bounds, so a refusal names the range; else ""."""
    info = cls.model_fields.get(str(loc[0])) if loc else None
    if info is None:
        return ""
    low = high = None
    for bound in info.metadata:
        low = getattr(bound, "ge", None) if getattr(bound, "ge", None) is not None else low
        low = f"above {bound.gt}" if getattr(bound, "gt", None) is not None else low
        high = getattr(bound, "le", None) if getattr(bound, "le", None) is not None else high
    if low is None and high is None:
        return ""
    if isinstance(low, str):
        return f" (allowed: {low}" + (f" up to {high})" if high is not None else ")")
    if high is None:
        return f" (allowed: at least {low})"
    return f" (allowed: {low} to {high})" if low is not None else f" (allowed: at most {high})"


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # the constraints are checked, not part of the type's name
        return _type_name(typing.get_args(annotation)[0])
    if origin is Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        name = getattr(origin, "__name__", str(origin)).replace("UnionType", "").replace("Union", "")
        return f"{name}[{args}]" if name else args.replace(", ", " | ")
    return getattr(annotation, "__name__", str(annotation))


# Upper limits of the options that multiply work (calls per claim, snippets, votes): generous for every
# protocol the papers use, and small enough that one request cannot ask for hours of model calls.
MAX_TOP_K = 50
MAX_WINDOW = 20
MAX_BATCH_SIZE = 64

RetrievalMode = Literal["auto", "always", "never"]
ScoreKind = Literal["auto", "probability", "label"]
VerdictOrder = Literal["reason_first", "verdict_first"]


class RetrievalOptions(MethodOptions):
    """The one retrieval protocol of every claim method (long-document stress-test paper): per claim, the top-K source
    sentences, each widened to a window of 2w+1 sentences; verify against each snippet, keep the best; average over
    claims."""

    retrieval: RetrievalMode = "auto"
    """auto: retrieve only when the source does not fit the model's context; always; never (a source that does not fit
    is then unscored)."""

    top_k: int = Field(default=3, ge=1, le=MAX_TOP_K)
    """Source sentences retrieved per claim (K); each becomes one snippet."""

    window: int = Field(default=1, ge=0, le=MAX_WINDOW)
    """Sentences added on each side of a retrieved sentence (w): snippets of 2w+1 sentences."""

    retriever: Literal["auto", "embedding", "bm25"] = "auto"
    """embedding (MiniLM, needs the embeddings extra), bm25, or auto (embeddings when installed)."""

    merge_windows: bool = False
    """Merge snippets that share sentences (not the paper's protocol; fewer calls)."""

    embed_all_up_to: int | None = Field(default=5_000, ge=0)
    """Embedding retriever: embed every source sentence up to this many (the paper); past it BM25 picks 100 candidate
    sentences per claim and only those are embedded (announced). null: always embed all, with a progress bar."""


class ClaimOptions(RetrievalOptions):
    """Options every claim-pipeline method shares: the retrieval protocol and swappable stages."""

    decomposer: str | None = None
    """A registered decomposer stage to use instead of the method's own: how the target becomes claims (see `halluscope
    stages decomposer`)."""

    context_selector: str | None = None
    """A registered context selector to use instead of the retrieval protocol's (see `halluscope stages
    context_selector`)."""

    verifier: str | None = None
    """A registered verifier stage to use instead of the method's own (see `halluscope stages`)."""

    aggregator: str | None = None
    """A registered aggregator stage to use instead of the method's own: how verdicts become the score (see `halluscope
    stages aggregator`)."""

    localizer: str | None = None
    """A registered localizer stage to use instead of the method's own: how verdicts become findings (see `halluscope
    stages localizer`)."""

    gate: str | None = None
    """A gate run before the verifier (cascade): `lexical` or `encoder:DIR`; the claims it settles skip the verifier (no
    LLM call), the uncertain ones go on."""

    score: ScoreKind = "auto"
    """How verdicts become the score: probability (the paper's formula with each claim's P(supported), read from the
    model's token probabilities, in place of its 0/1 label), label (the paper's discrete score), or auto (probability
    when every judged verdict has one, else label). details["score"] says which ran and why."""

    order: VerdictOrder = "reason_first"
    """reason_first (the papers: each verdict's reasoning, then its label) or verdict_first (each claim scored by one
    short yes/no reply; a reason, a source quote and a fix are asked only for the claims it flags): which verifier is
    the method's own, the paper's or the verdict_first stage; -o verifier=NAME replaces either."""

    explain_below: float = Field(default=0.5, ge=0.0, le=1.0)
    """verdict_first: a claim whose P(supported) is below this (or, without a probability, whose answer is no) is
    flagged and explained."""

    explain_max: int | None = Field(default=None, ge=0)
    """verdict_first: explain at most this many flagged claims, the lowest P(supported) first (the others stay
    flagged, with their score and, with retrieval, their snippet as evidence); null: every flagged claim. Bounds the
    time of a check: an explanation is generated text (tens of tokens), a score one short reply."""

    min_label_mass: float = Field(default=0.5, ge=0.0, le=1.0)
    """verdict_first: a short reply whose first word is neither yes nor no is read from the token probabilities only
    when the yes/no candidates hold at least this much of the probability at its first word (MIN_LABEL_MASS in
    halluscope.llm.label_probs); below it the claim is unscored."""

    explain: bool = True
    """verdict_first: ask for the reason, the source quote and a fix of each flagged claim (false: score only, one short
    reply per claim; a finding then gives the answer, P(supported) and, with retrieval, the snippet it was checked
    against as its evidence)."""

    relation_candidates: int = Field(default=2, ge=0, le=8)
    """verdict_first: how a flagged claim's evidence and relation are chosen: its relation_candidates closest source
    sentences (shared content words), and the explanation's quote where the source holds it verbatim, are each asked
    "does this passage contradict the claim?" by one short reply; contradicted when the best reaches P(contradicts)
    0.5 (that passage is the evidence), else unsupported and not mentioned in the source (the closest passage shown
    as related context). 0: the explanation's own contradicted flag and quote, unchecked."""

    verify_fix: bool = True
    """verdict_first: show a fix only once it is re-verified: the explanation's fix and the flagged text without the
    part holding words the source never uses are each scored like a claim (one short reply each, against the same
    source context); the best one answered yes with P(supported) at least explain_below is shown, else "no verified
    fix" (the candidates stay in the JSON report, unverified). false: the explanation's fix as it comes."""

    fact_max: int = Field(default=3, ge=0, le=8)
    """verdict_first: find the failing fact of a flagged sentence: a sentence with at least two clauses or conjuncts is
    split into atomic facts (fact_decomposer), at most fact_max of them scored by one short reply each; the lowest
    P(supported) below explain_below is the finding's span (where located in the target) and what the evidence and
    the reason are chosen for. Extra calls per such sentence: the decomposition (one, plus one repair request when its
    reply is unusable) and at most fact_max short replies; a one-clause sentence costs none. 0: the sentence is the
    span."""

    fact_decomposer: str = "factscore"
    """verdict_first: the decomposer stage that splits a flagged sentence into atomic facts (factscore: one call);
    clauses, a stage that calls no LLM, or a decomposition that fails or finds fewer than two facts: the sentence's
    clauses and conjuncts (no call)."""

    reason_from_evidence: bool = True
    """verdict_first: write the reason from the chosen evidence: one short reply from the failing fact and the chosen
    passage only, naming what the source says instead; a reply that disagrees with the relation, is empty or holds
    markup gives way to a plain reason quoting the passage. false: the explanation's own reason."""
