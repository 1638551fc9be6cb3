"""The five papers' protocols: which data, which rows (method + options per row of the paper's table), which
metrics (suite result -> paper column). See docs/reproduce.md for what each one runs and where it departs
from the paper.
"""

from __future__ import annotations

from typing import Any

from halluscope.bench.datasets import Dataset, load_dataset, sample_examples
from halluscope.bench.reproduce.builders import BuiltSet, build_injected, build_montage, build_perturbed
from halluscope.bench.reproduce.checkpoints import Checkpoint
from halluscope.bench.reproduce.core import Metric, Protocol, ReproduceContext, ReproduceError, Row
from halluscope.records import Example

# --- shared helpers ---------------------------------------------------------------------------------------------


def _load(ctx: ReproduceContext, default: str) -> Dataset:
    from halluscope.bench.datasets import DatasetError

    try:
        return load_dataset(ctx.dataset or default, ctx.data_dir)
    except DatasetError as exc:
        raise ReproduceError(str(exc)) from exc


def _base_items(ctx: ReproduceContext, examples: list[Example]) -> list[Example]:
    """The base items a set is built from: those of the dev split when the data has a dev split and another one
    (SummEdits: ``evaluation``; the other split stays held out), then ``--sample`` N per split/domain (seeded),
    then the first ``--limit``."""
    from halluscope.bench.builtin_suites import pick_dev_split

    dev = pick_dev_split([e.split for e in examples])
    if dev is not None:
        examples = [e for e in examples if e.split == dev]
    if ctx.sample:
        examples = sample_examples(examples, ctx.sample, ctx.seed)
    if ctx.limit is not None:
        examples = examples[: max(0, ctx.limit)]
    if not examples:
        raise ReproduceError("no base items left to build from (check --dataset, --sample, --limit)")
    return examples


def _identity(ctx: ReproduceContext, builder: str, base: Dataset, llm_used: bool) -> dict[str, Any]:
    model = None
    if llm_used:
        model = ctx.get_llm().name
    return {"builder": builder, "mode": ctx.builder, "base_dataset": base.spec, "seed": ctx.seed, "model": model}


async def _shared(ctx: ReproduceContext, default: str) -> BuiltSet:
    if ctx.build_options:
        raise ReproduceError(
            f"this protocol evaluates {default} as it is: no builder options ({', '.join(ctx.build_options)})"
        )
    dataset = _load(ctx, default)
    return BuiltSet({"main": dataset}, "shared", None, {}, len(dataset.examples))


# --- the papers' encoder baselines that an encoder stage can compute (docs/reproduce.md, "Encoder baselines") ---

SUMMAC_NLI = Checkpoint("nli", "tals/albert-xlarge-vitaminc-mnli")  # the NLI model SummaC's zero-shot scorer uses
MINICHECK_T5 = Checkpoint("seq2seq", "lytang/MiniCheck-Flan-T5-Large")
_SUMMAC_ZS_NOTE = (
    "analogue of SummaC-ZS: its NLI model through nli: on each target sentence (max entailment "
    "probability over source windows of whole sentences that fill the model's input), the row score "
    "the share of sentences at P >= 0.5; SummaC-ZS scores each summary sentence by max over single "
    "source sentences of P(entail) - P(contradict) and averages those"
)
_SUMMAC_CONV = (
    "SummaC-Conv runs a learned 1-D convolution over the histogram of each summary sentence's NLI "
    "scores (trained on SummaC's benchmark); halluscope's nli: stage keeps the max over windows and has "
    "no such layer, so the row is not computed (summac_zs is the zero-shot analogue)"
)
_ALIGNSCORE = (
    "AlignScore (a RoBERTa with its own alignment heads, shipped as a checkpoint for its own package) "
    "loads with none of halluscope's encoder stages"
)
_UNIEVAL = (
    "UniEval (a T5 that answers a yes/no question in its own input format, per summary sentence) is not "
    "reproduced: the seq2seq: stage feeds MiniCheck-Flan-T5's input"
)
_BARTSCORE = (
    "BARTScore (BART's likelihood of the summary given the source) has no halluscope stage: the encoder "
    "stages classify (window, claim) pairs"
)


def _sentence_checker(checkpoint: Checkpoint, **retrieval: Any) -> dict[str, Any]:
    """DCR at sentence level with an encoder verifier: each target sentence checked by the model, no LLM call."""
    return {"level": "sentence", **retrieval, "verifier": checkpoint.stage()}


# --- FINAL ------------------------------------------------------------------------------------------------------

_FINAL_METRICS = (
    Metric("recall", "recall", "final_matching", ("recall",), "no gold description among the scored items"),
    Metric("precision", "precision", "final_matching", ("precision",)),
    Metric("f1", "F1", "final_matching", ("f1",)),
)
_TRUETEACHER = (
    "TrueTeacher (Gekhman et al. 2023, a T5-11B consistency classifier) is not part of halluscope; "
    "the 2-step filter can be any halluscope method instead (localize -o filter=NAME)"
)

FINAL = Protocol(
    name="final",
    description=(
        "FINAL Table 4: each method lists the summary's inconsistencies as free-form descriptions; an LLM "
        "judge matches them to the gold descriptions; recall / precision / F1, micro over items."
    ),
    base_dataset="final:dev",
    rows=(
        Row("zero_shot", "E2E Zero-Shot", _FINAL_METRICS, "localize", {"style": "zero_shot"}),
        Row("few_shot", "E2E Few-Shot", _FINAL_METRICS, "localize", {"style": "few_shot"}),
        Row("cot", "E2E CoT", _FINAL_METRICS, "localize", {"style": "cot"}),
        Row("factscore", "Pipeline FactScore", _FINAL_METRICS, "factscore", {"describe": True, "deduplicator": "llm"}),
        Row("self_cot", "2-Step Self + CoT", _FINAL_METRICS, "localize", {"style": "cot", "filter": "self"}),
        Row(
            "self_cot_hint",
            "2-Step Self + CoT&Hint",
            _FINAL_METRICS,
            "localize",
            {"style": "cot", "filter": "self", "hint": True},
        ),
        Row("trueteacher_cot", "2-Step TrueTeacher + CoT", _FINAL_METRICS, reason=_TRUETEACHER),
        Row("trueteacher_cot_hint", "2-Step TrueTeacher + CoT&Hint", _FINAL_METRICS, reason=_TRUETEACHER),
        Row("oracle_cot", "Oracle + CoT", _FINAL_METRICS, "localize", {"style": "cot", "filter": "oracle"}),
        Row(
            "oracle_cot_hint",
            "Oracle + CoT&Hint",
            _FINAL_METRICS,
            "localize",
            {"style": "cot", "filter": "oracle", "hint": True},
        ),
    ),
    embedded_rows=("zero_shot",),
    build=lambda ctx: _shared(ctx, "final:dev"),
    sample_applies_to="items",
    protocol_notes=(
        "The matching judge is the evaluated model unless --judge-model is given (the paper's judge is GPT-4o).",
    ),
)


# --- DCR --------------------------------------------------------------------------------------------------------


def _corr(key: str, label: str) -> Metric:
    """A correlation column: per document (averaged) where documents repeat - the summary-level protocol of DCR's
    line of work - else pooled over all items; the record names the level used."""
    return Metric(
        key,
        label,
        "correlation",
        (key,),
        "needs at least 3 scored items with varying scores",
        paper_path=("per_document", key),
        level_names=("per document, averaged", "pooled"),
    )


_CORR = (_corr("pearson", "Pearson r"), _corr("spearman", "Spearman rho"), _corr("kendall", "Kendall tau"))
_RAI = (
    Metric("n_flagged", "inconsistent (flagged by DCE)", "rai_improvement", ("n_flagged",)),
    Metric(
        "fixed_after_1",
        "corrected after 1 round",
        "rai_improvement",
        ("fixed_after_1",),
        "no item was flagged inconsistent",
    ),
    Metric(
        "improvement_rate_after_1",
        "consistency improvement",
        "rai_improvement",
        ("improvement_rate_after_1",),
        "no item was flagged inconsistent",
    ),
)

DCR = Protocol(
    name="dcr",
    description=(
        "DCR Table 2 (QAGS-CNN): Pearson / Spearman / Kendall between each method's score and the human "
        "consistency score; Table 3: RAI consistency improvement in one round."
    ),
    base_dataset="qags",
    rows=(
        Row("bertscore", "BERTScore", _CORR, reason="BERTScore is not a halluscope method"),
        Row("moverscore", "MoverScore", _CORR, reason="MoverScore is not a halluscope method"),
        Row("unieval", "UniEval", _CORR, reason=_UNIEVAL),
        Row("geval", "G-Eval", _CORR, "geval", {"prompt": "paper"}),
        Row("dcr", "DCE-AMC", _CORR, "dcr", {"level": "sentence", "amc": "llm"}),
        Row("improve", "DCR with RAI (sentence level)", _RAI, "improve", {"level": "sentence", "rounds": 1}),
        Row(
            "improve_paragraph", "DCR with RAI (paragraph level)", _RAI, "improve", {"level": "paragraph", "rounds": 1}
        ),
    ),
    embedded_rows=("geval", "dcr"),
    build=lambda ctx: _shared(ctx, "qags"),
    sample_applies_to="items",
    protocol_notes=(
        "The shared QAGS-CNN file has 100 of the paper's 236 summaries.",
        "Correlations are per document and averaged where documents repeat (several summaries per "
        "source); with one summary per document (QAGS) they are pooled; each row names its level "
        "and results.json keeps both.",
    ),
)


# --- MontageLie / DoveScore -------------------------------------------------------------------------------------

_AUC_UNDEFINED = "needs truths and lies of this difficulty in the same groups"
_AUC = (
    Metric("auc_easy", "AUC easy", "montage_auc", ("auc_easy",), _AUC_UNDEFINED),
    Metric("auc_medium", "AUC medium", "montage_auc", ("auc_medium",), _AUC_UNDEFINED),
    Metric("auc_hard", "AUC hard", "montage_auc", ("auc_hard",), _AUC_UNDEFINED),
    Metric("auc_extreme", "AUC extreme", "montage_auc", ("auc_extreme",), _AUC_UNDEFINED),
    Metric("auc_average", "AUC average", "montage_auc", ("auc_average",), _AUC_UNDEFINED),
)


async def _build_montage(ctx: ReproduceContext) -> BuiltSet:
    base = _load(ctx, "squality:dev")
    if any(e.group and e.difficulty for e in base.examples):  # already a montage set: evaluate it as it is
        return BuiltSet(
            {"main": base},
            "given",
            None,
            {},
            len(base.examples),
            notes=[f"{base.spec} already holds montage groups; used as given"],
        )
    items = _base_items(ctx, base.examples)
    llm = ctx.get_llm() if ctx.builder == "llm" else None
    return await build_montage(
        ctx.out_dir / "data",
        items,
        mode=ctx.builder,
        llm=llm,
        seed=ctx.seed,
        options=ctx.build_options,
        identity=_identity(ctx, "montage", base, llm is not None),
        progress=ctx.progress,
    )


def _montage_missing(row: Row, metric: Metric, built: BuiltSet) -> str | None:
    difficulty = metric.key.removeprefix("auc_")
    reasons = built.skipped_for(difficulty)
    if reasons:
        return f"{_AUC_UNDEFINED}; the builder skipped {difficulty} lies: {'; '.join(reasons[:2])}"
    return None


DOVE = Protocol(
    name="dove",
    description=(
        "MontageLie Tables 3-4: each method scores the true summary and its montage lies (true events "
        "reordered to a given ShuffleD); AUC-ROC of truths vs lies per difficulty, and their average."
    ),
    base_dataset="squality:dev",
    rows=(
        Row("rouge1", "ROUGE-1", _AUC, "rouge", {"variant": "rouge1"}),
        Row("rouge2", "ROUGE-2", _AUC, "rouge", {"variant": "rouge2"}),
        Row("rougeL", "ROUGE-L", _AUC, "rouge", {"variant": "rougeL"}),
        Row(
            "geval",
            "LLM-as-evaluator (G-Eval prompt)",
            _AUC,
            "geval",
            {"prompt": "paper", "weighting": "none", "temperature": 0},
            note="decoded as the paper ran it: greedy (temperature 0), the integer rating",
        ),
        Row(
            "geval_weighted",
            "LLM-as-evaluator (G-Eval prompt)",
            _AUC,
            "geval",
            {"prompt": "paper", "weighting": "probability"},
            analogue=True,
            note=(
                "extra row, not the paper's protocol: G-Eval's probability-weighted rating (sum of p(s)*s over "
                "1-5 from the backend's log-probabilities); the paper decoded greedily and took the integer"
            ),
        ),
        Row(
            "summac_zs",
            "SummaC-ZS",
            _AUC,
            "dcr",
            _sentence_checker(SUMMAC_NLI),
            analogue=True,
            note=_SUMMAC_ZS_NOTE,
            checkpoint=SUMMAC_NLI,
        ),
        Row("summac_conv", "SummaC-Conv", _AUC, reason=_SUMMAC_CONV),
        Row("alignscore", "AlignScore", _AUC, reason=_ALIGNSCORE),
        Row("factscore", "FactScore", _AUC, "factscore", {"describe": False}),
        Row("dove", "DoveScore", _AUC, "dove", {}),
    ),
    embedded_rows=("rouge1", "rouge2", "rougeL"),
    build=_build_montage,
    sample_applies_to="base",
    explain_missing=_montage_missing,
    protocol_notes=(
        "Montage lies are built from SQuALITY's human plot summaries (the paper: BookSum and SummScreen).",
    ),
)


# --- long-document stress test ----------------------------------------------------------------------------------

_PERTURBATION_COLUMNS = (
    ("original", "original"),
    ("synonym_replaced", "synonym replaced"),
    ("compressed", "summarized (compressed)"),
    ("simplified", "simplified"),
    ("paraphrased", "paraphrased"),
    ("negated", "negated"),
    ("less_diverse", "less diverse"),
    ("added_source_sentence", "added source text"),
)


def _stress_metrics(window: int | None) -> tuple[Metric, ...]:
    metrics = tuple(
        Metric(f"mean_{key}", f"mean score: {label}", "stress", ("mean_score", key), subset=True)
        for key, label in _PERTURBATION_COLUMNS
    )
    if window is not None:  # the main row also gives Table 1's cell for its own window
        metrics += _window_metrics(window)
    return metrics


def _window_metrics(window: int) -> tuple[Metric, ...]:
    return (
        Metric(
            f"mean_original_w{window}",
            f"mean score, originals, w={window}",
            "stress",
            ("mean_score", "original"),
            subset=True,
        ),
    )


_RETRIEVAL = {"retrieval": "always", "top_k": 3}
_ANALOGUE = "MiniCheck"


def _longdoc_rows() -> tuple[Row, ...]:
    rows: list[Row] = []
    for method, extra in (("dcr", {}), ("factscore", {"describe": False})):
        rows.append(
            Row(method, _ANALOGUE, _stress_metrics(1), method, {**extra, **_RETRIEVAL, "window": 1}, analogue=True)
        )
        for w in (0, 2):
            rows.append(
                Row(
                    f"{method}_w{w}",
                    _ANALOGUE,
                    _window_metrics(w),
                    method,
                    {**extra, **_RETRIEVAL, "window": w},
                    dataset="originals",
                    analogue=True,
                )
            )
    rows.append(
        Row(
            "rouge",
            "ROUGE",
            _stress_metrics(None),
            "rouge",
            {"variant": "mean"},
            note="no retrieval; a model-free reference for the perturbation deltas",
        )
    )
    # the encoder baselines an encoder stage computes, through the same retrieval protocol (when installed)
    for row_id, paper_row, checkpoint, note in (
        ("summac_zs", "SummaC-ZS", SUMMAC_NLI, _SUMMAC_ZS_NOTE.replace("source windows", "retrieved snippets")),
        (
            "minicheck",
            "MiniCheck",
            MINICHECK_T5,
            "analogue of MiniCheck: the paper ran Bespoke-MiniCheck-7B (a decoder LLM, not an encoder stage); "
            "this row runs the same family's MiniCheck-Flan-T5-Large through seq2seq: on each target sentence",
        ),
    ):
        rows.append(
            Row(
                row_id,
                paper_row,
                _stress_metrics(1),
                "dcr",
                _sentence_checker(checkpoint, **_RETRIEVAL, window=1),
                analogue=True,
                note=note,
                checkpoint=checkpoint,
            )
        )
        for w in (0, 2):
            rows.append(
                Row(
                    f"{row_id}_w{w}",
                    paper_row,
                    _window_metrics(w),
                    "dcr",
                    _sentence_checker(checkpoint, **_RETRIEVAL, window=w),
                    dataset="originals",
                    analogue=True,
                    note=note,
                    checkpoint=checkpoint,
                )
            )
    for name, why in (
        ("BARTScore", _BARTSCORE),
        ("SummaC-Conv", _SUMMAC_CONV),
        ("AlignScore", _ALIGNSCORE),
        ("UniEval", _UNIEVAL),
    ):
        rows.append(
            Row(
                name.lower().replace("-", "_"),
                name,
                _stress_metrics(None) + _window_metrics(0) + _window_metrics(1) + _window_metrics(2),
                reason=why,
            )
        )
    return tuple(rows)


async def _build_perturbed(ctx: ReproduceContext) -> BuiltSet:
    base = _load(ctx, "squality:dev")
    if any(e.group and e.difficulty == "original" for e in base.examples):
        originals = Dataset(
            f"{base.name}-originals", None, [e for e in base.examples if e.difficulty == "original"], base.files
        )
        return BuiltSet(
            {"main": base, "originals": originals},
            "given",
            None,
            {},
            len(originals.examples),
            notes=[f"{base.spec} already holds perturbation groups; used as given"],
        )
    items = _base_items(ctx, [e for e in base.examples if e.label != 0])
    llm = ctx.get_llm() if ctx.builder == "llm" else None
    return await build_perturbed(
        ctx.out_dir / "data",
        items,
        mode=ctx.builder,
        llm=llm,
        config=ctx.config,
        seed=ctx.seed,
        options=ctx.build_options,
        identity=_identity(ctx, "perturb", base, llm is not None),
        progress=ctx.progress,
    )


def _longdoc_missing(row: Row, metric: Metric, built: BuiltSet) -> str | None:
    name = metric.path[-1]
    if metric.suite != "stress" or name == "original":
        return None
    reasons = built.skipped_for(name)
    if reasons:
        return f"no {name} rows: the builder skipped them ({'; '.join(reasons[:2])})"
    if built.builder == "perturb" and name not in built.options.get("perturbations", []):
        return f"no {name} rows: not built (an LLM rewrite; --builder llm)"
    return None


LONGDOC = Protocol(
    name="longdoc",
    description=(
        "Long-document stress test, Tables 1 and 4 (SQuALITY): every summary is scored by retrieval "
        "(top-K source sentences, each widened by w sentences; max over snippets, mean over sentences), "
        "before and after meaning-preserving perturbations, and with w = 0, 1, 2."
    ),
    base_dataset="squality:dev",
    rows=_longdoc_rows(),
    embedded_rows=("rouge",),
    build=_build_perturbed,
    sample_applies_to="base",
    explain_missing=_longdoc_missing,
    protocol_notes=(
        "The paper's metrics are not halluscope methods: halluscope's LLM rows run the same retrieval "
        "protocol and show MiniCheck's numbers as the nearest analogue; the summac_zs and minicheck rows "
        "run SummaC's NLI model and MiniCheck-Flan-T5-Large through the encoder stages where they are "
        "installed (HALLUSCOPE_REPRODUCE_MODELS or the Hugging Face cache).",
    ),
)


# --- PROBE ------------------------------------------------------------------------------------------------------

_NO_GOLD_EVIDENCE = (
    "needs gold evidence for the truthful claims (meta.gold_claims[].evidence): build it with "
    "`--gold-model MODEL[,MODEL...]` (or, built by the scored model itself, `--build "
    "gold_evidence=self`); see evidence_found_truth_proxy in the row's results.json for our proxy"
)
# keys = the paper's metric names, as bench/suite_probe.py computes them (docs/probe.md, "Step metrics")
_PROBE_METRICS = (
    Metric(
        "decomposition_recall",
        "claim decomposition recall",
        "probe_steps",
        ("decomposition_recall",),
        "needs the complete gold claim set of the target (meta.gold_claims_complete): `--gold-model MODEL`",
    ),
    Metric(
        "evidence_finding_partial",
        "evidence finding, partial",
        "probe_steps",
        ("evidence_finding_partial",),
        _NO_GOLD_EVIDENCE,
    ),
    Metric(
        "evidence_finding_complete",
        "evidence finding, complete",
        "probe_steps",
        ("evidence_finding_complete",),
        _NO_GOLD_EVIDENCE,
    ),
    Metric(
        "evidence_evaluation_accuracy",
        "evidence evaluation accuracy",
        "probe_steps",
        ("evidence_evaluation_accuracy",),
        "no claim with gold evidence and a decided evidence judgment",
    ),
    Metric(
        "localization_precision",
        "localization precision (claim-matched characters)",
        "probe_steps",
        ("localization_precision",),
        "no claim was flagged",
    ),
    Metric(
        "localization_recall",
        "localization recall (claim-matched characters)",
        "probe_steps",
        ("localization_recall",),
        "no gold hallucinated claim",
    ),
    Metric("localization_f1", "localization F1", "probe_steps", ("localization_f1",), "precision or recall undefined"),
)
_DIRECT_METRICS = (
    Metric("recall", "recall (character spans)", "span", ("char_recall",)),
    Metric("precision", "precision (character spans)", "span", ("char_precision",)),
)


async def _build_injected(ctx: ReproduceContext) -> BuiltSet:
    base = _load(ctx, "summedits:news")
    if any(e.gold_spans is not None for e in base.examples):
        return BuiltSet(
            {"main": base},
            "given",
            None,
            {},
            len(base.examples),
            notes=[f"{base.spec} already holds gold spans; used as given"],
        )
    faithful = [e for e in base.examples if e.label != 0]
    items = _base_items(ctx, faithful)
    gold_self = _gold_choice(ctx)
    llm = ctx.get_llm() if ctx.builder == "llm" or gold_self else None
    return await build_injected(
        ctx.out_dir / "data",
        items,
        faithful,
        mode=ctx.builder,
        llm=llm,
        seed=ctx.seed,
        options=ctx.build_options,
        identity=_identity(ctx, "inject", base, llm is not None),
        progress=ctx.progress,
        gold_llms=ctx.gold_llms,
        gold_self=gold_self,
    )


_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no", "")


GOLD_VOTERS = ("paper", "others")
"""``--build gold_voters``: ``paper`` (default) - the ``--gold-model`` models vote, the scored model may be one of
them, as in the PROBE paper, whose gold voters are the four models it then scores; ``others`` - the scored model
must not be among them (refused if named)."""


def _gold_choice(ctx: ReproduceContext) -> bool:
    """Whether the scored model alone builds PROBE's gold (``gold_evidence=self``, asked for explicitly). The gold
    is built by the ``--gold-model`` models when named. As in the PROBE paper, the scored model may be one of those
    voters (``gold_voters=paper``, the default); ``gold_voters=others`` refuses it. ``gold_evidence=true``
    without a named model is refused, and so is a list naming the scored model alone, unless ``self`` is said: a
    model scored against gold it wrote alone measures agreement with itself."""
    said = str(ctx.build_options.get("gold_evidence", "")).strip().lower()
    if said not in (*_TRUE, *_FALSE, "self"):
        raise ReproduceError(f"gold_evidence must be true, false or self, got {said!r}")
    voters = str(ctx.build_options.get("gold_voters", "paper")).strip().lower()
    if voters not in GOLD_VOTERS:
        raise ReproduceError(f"gold_voters must be {' or '.join(GOLD_VOTERS)}, got {voters!r}")
    named = [g.name for g in ctx.gold_llms]
    if said in _FALSE and said != "" and named:
        raise ReproduceError("--gold-model names a gold model but --build gold_evidence=false asks for no gold")
    if said == "self":
        if named:
            raise ReproduceError("gold_evidence=self builds the gold with the scored model: drop --gold-model")
        return True
    if named:
        scored = ctx.get_llm().name
        if scored in named and (voters == "others" or len(set(named)) == 1):
            why = (
                "--build gold_voters=others keeps it out of the voters"
                if voters == "others"
                else "it would be the only voter, so its gold would be its own output"
            )
            raise ReproduceError(
                f"--gold-model {scored} is the scored model and {why}. Name the other voters too (the paper's "
                "gold voters are the four models it scores), or pass --build gold_evidence=self to accept a "
                "self-built gold (the rows are then labelled 'self-built gold')"
            )
        return False
    if said in _TRUE:
        raise ReproduceError(
            "gold_evidence=true: name the model(s) that build the gold with --gold-model "
            "MODEL[,MODEL...] (the paper's gold voters were the 4 models it then scored, 3 of 4 votes), or "
            "pass --build gold_evidence=self to build it with the scored model itself (the rows "
            "are then labelled 'self-built gold')"
        )
    return False


PROBE = Protocol(
    name="probe",
    description=(
        "PROBE Table 2 and Figures 3-4 (summarization): the process-based detector's step metrics "
        "(decomposition, evidence finding, evidence evaluation, claim-level localization) on targets with "
        "injected hallucinations, and direct prompting's recall."
    ),
    base_dataset="summedits:news",
    rows=(
        Row("probe", "Process-based (4 steps)", _PROBE_METRICS, "probe", {}),
        Row("direct", "Direct prompting", _DIRECT_METRICS, "localize", {"style": "zero_shot"}),
    ),
    embedded_rows=("direct",),
    build=_build_injected,
    sample_applies_to="base",
    protocol_notes=(
        "Injected into the consistent summaries of the shared dev data (default SummEdits news); the "
        "paper injects into Wikipedia summaries, QA answers and style transfers.",
    ),
)


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (DOVE, DCR, FINAL, LONGDOC, PROBE)}


def get_protocol(name: str) -> Protocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ReproduceError(f"unknown paper {name!r}; choose from {', '.join(PROTOCOLS)}") from None
