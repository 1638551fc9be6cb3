"""The field's encoder checkers as verifier stages (no LLM): ``-o verifier=nli:MODEL``, ``seq2seq:MODEL``,
``tagger:MODEL`` on every claim method. MODEL is a Hugging Face model id or a local folder, loaded with
``transformers`` (the ``encoders`` extra); a model that cannot be loaded (offline, missing, wrong kind) makes
every claim ``unscored`` with the reason, never a crash inside a batch.

* ``nli`` -- sequence classification of (premise = source window, hypothesis = claim): NLI models
  (SummaC-style zero-shot, e.g. ``cross-encoder/nli-deberta-v3-base``, ``roberta-large-mnli``), binary checkers
  (MiniCheck-RoBERTa/DeBERTa: label 1 = supported), single-logit cross-encoders, and halluscope's own
  ``train-verifier`` output. The entailment column comes from the model config's ``id2label``.
* ``seq2seq`` -- a yes/no text-to-text checker (MiniCheck-Flan-T5 style): the probability of "1"/"yes" as the
  first decoded token for ``premise: WINDOW hypothesis: CLAIM``.
* ``tagger`` -- token classification (LettuceDetect style): the claim's tokens tagged hallucinated become the
  verdict's target spans (character offsets), so findings point at the words.

A context longer than the model's input is cut into windows of whole sentences that fit next to the claim;
each claim is scored against every window, batched, and keeps its best window (max support; for the tagger a
token is hallucinated only if it is against every window).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from halluscope.methods.encoder_models import (
    EncoderUnavailable,
    LoadedChecker,
    label_column,
    label_index,
    load_checker,
    model_labels,
    sentence_windows,
)
from halluscope.methods.gate import target_spans
from halluscope.options import StageOptions
from halluscope.records import Claim, Evidence, Span, Verdict
from halluscope.stages import Context, GateDecision, register_stage

DEFAULT_BATCH_SIZE = 16

_SUPPORT_WORDS = ("entail", "support", "consistent", "faithful", "factual", "grounded")
_CONTRADICTION_WORDS = ("contradict", "refute")
_HALLUCINATION_WORDS = ("halluc", "unsupported", "inconsistent")


_EMPTY_CONTEXT = "the context is empty: nothing to check the claim against"


def _windows_note(n_windows: int, threshold: float) -> str:
    return f"best of {n_windows} source window{'s' if n_windows > 1 else ''}; threshold {threshold:.2f}"


def _source_span(context: Context, start: int, end: int) -> Span | None:
    if context.span is not None:
        return Span(start=context.span.start + start, end=context.span.start + end)
    return Span(start=start, end=end) if context.kind == "source" else None


class EncoderVerifier:
    """Shared plumbing: load once, window the context, batch every (window, claim) pair, keep each claim's
    best window; a load or inference failure makes the claims unscored with the reason."""

    name: ClassVar[str]
    kind: ClassVar[str]
    uses_llm: ClassVar[bool] = False

    class Options(StageOptions):
        checkpoint: str = Field(min_length=1)
        """The checker: a Hugging Face model id or a local folder (also given after a colon: nli:MODEL)."""

        batch_size: int = Field(default=DEFAULT_BATCH_SIZE, ge=1, le=1024)
        """(source window, claim) pairs per forward pass."""

    def __init__(self, model: Any, options: EncoderVerifier.Options):
        self.model_id = options.checkpoint
        self.batch_size = options.batch_size

    def reserve_tokens(self, claims: Sequence[Claim]) -> int:
        return 0  # nothing goes to the LLM

    def source_fits(self, source: str, claims: Sequence[Claim]) -> bool:
        return True  # the verifier windows a long source itself

    async def __call__(self, claims: Sequence[Claim], context: Context, source: str) -> list[Verdict]:
        try:
            checker = await asyncio.to_thread(load_checker, self.kind, self.model_id)
        except EncoderUnavailable as exc:
            return [Verdict.unscored(c, str(exc)) for c in claims]
        try:
            return await asyncio.to_thread(self.judge_locked, checker, list(claims), context)
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:  # torch raises RuntimeError
            return [Verdict.unscored(c, f"{self.kind} checker {self.model_id!r} failed: {exc}"[:1000]) for c in claims]

    def pairs(self, checker: LoadedChecker, claims: list[Claim], context: Context) -> list[tuple[int, int, int]]:
        """(claim index, window start, window end) for every claim and window of the context."""
        out = []
        for i, claim in enumerate(claims):
            for start, end in sentence_windows(checker.tokenizer, context.text, claim.text, checker.max_length):
                out.append((i, start, end))
        return out

    def judge_locked(self, checker: LoadedChecker, claims: list[Claim], context: Context) -> list[Verdict]:
        with checker.lock:
            return self.judge(checker, claims, context)

    def judge(self, checker: LoadedChecker, claims: list[Claim], context: Context) -> list[Verdict]:
        raise NotImplementedError

    @staticmethod
    def output_column(
        checker: LoadedChecker, words: Sequence[str], meaning: str, single_logit: bool = False
    ) -> tuple[int | None, dict[int, str], int]:
        """The output column whose label names one of ``words`` (:func:`label_column`), the config's labels and
        their number; no such column is a ValueError saying the labels do not tell which one ``meaning``
        (unless ``single_logit`` and the model has one output: its sigmoid is the probability)."""
        id2label, n_labels = model_labels(checker.model.config)
        column = label_column(id2label, n_labels, words)
        if column is None and not (single_logit and n_labels == 1):
            raise ValueError(f"cannot tell which of the labels {id2label} {meaning}")
        return column, id2label, n_labels

    def batches(self, items: list[Any]) -> list[list[Any]]:
        return [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]

    @staticmethod
    def tokenize(
        checker: LoadedChecker, claims: list[Claim], context: Context, batch: list[tuple[int, int, int]], **extra: Any
    ) -> Any:
        """The tokenizer's tensors for a batch of :meth:`pairs`: context window first (the only part
        truncated), then the claim."""
        return checker.tokenizer(
            [context.text[s:e] for _, s, e in batch],
            [claims[i].text for i, _, _ in batch],
            truncation="only_first",
            max_length=checker.max_length,
            padding=True,
            return_tensors="pt",
            **extra,
        )


@register_stage("nli", "verifier", argument="MODEL", argument_option="checkpoint")
class NLIVerifier(EncoderVerifier):
    """Sequence-classification checker (NLI, MiniCheck-RoBERTa/DeBERTa, cross-encoders): P(entailment) per window."""

    kind = "nli"

    def judge(self, checker: LoadedChecker, claims: list[Claim], context: Context) -> list[Verdict]:
        import torch

        support, id2label, n_labels = self.output_column(checker, _SUPPORT_WORDS, "means entailment", single_logit=True)
        contradiction = label_index(id2label, _CONTRADICTION_WORDS)
        pairs = self.pairs(checker, claims, context)
        probs: list[tuple[float, float | None]] = []
        for batch in self.batches(pairs):
            enc = self.tokenize(checker, claims, context, batch).to(checker.device)
            with torch.no_grad():
                logits = checker.model(**enc).logits.float()
            if n_labels == 1:
                probs += [(float(p), None) for p in torch.sigmoid(logits[:, 0])]
                continue
            soft = torch.softmax(logits, dim=-1)
            for row in soft:
                probs.append(
                    (
                        float(row[support]),
                        None
                        if contradiction is None or int(row.argmax()) != contradiction
                        else float(row[contradiction]),
                    )
                )
        verdicts = []
        for i, claim in enumerate(claims):
            mine = [(p, c, s, e) for (j, s, e), (p, c) in zip(pairs, probs) if j == i]
            if not mine:
                verdicts.append(Verdict.unscored(claim, _EMPTY_CONTEXT))
                continue
            p, _, s, e = max(mine, key=lambda m: m[0])
            contradicting = [m for m in mine if m[1] is not None]
            if p >= checker.threshold:
                label, relation, (s, e) = "supported", "supports", (s, e)
            elif contradicting:
                _, _, s, e = max(contradicting, key=lambda m: m[1] or 0.0)
                label, relation = "contradicted", "contradicts"
            else:
                label, relation = "unsupported", "related"
            reason = f"{checker.name}: entailment probability {p:.2f} ({_windows_note(len(mine), checker.threshold)})"
            if label == "contradicted":
                reason += "; a window is classified as contradicting the claim"
            verdicts.append(
                Verdict(
                    claim=claim,
                    label=label,  # type: ignore[arg-type]
                    reason=reason,
                    score=round(p, 6),
                    support_probability=round(p, 6),
                    evidence=[Evidence(text=context.text[s:e], span=_source_span(context, s, e), relation=relation)],  # type: ignore[arg-type]
                )
            )
        return verdicts


POSITIVE_NEGATIVE = (("1", "0"), ("yes", "no"), ("Yes", "No"))
WORD_BOUNDARY = "\u2581"  # SentencePiece's word-start piece: MiniCheck-Flan-T5's "not supported" answer


@register_stage("seq2seq", "verifier", argument="MODEL", argument_option="checkpoint")
class Seq2SeqVerifier(EncoderVerifier):
    """Text-to-text yes/no checker (MiniCheck-Flan-T5 style): P("1") as the first decoded token."""

    kind = "seq2seq"
    template: ClassVar[str] = "predict: {premise}{separator}{claim}"  # MiniCheck-Flan-T5's input

    @staticmethod
    def answer_tokens(tokenizer: Any) -> tuple[int, int]:
        """(supported, not supported) token ids: "1" against SentencePiece's bare word-start piece when the
        vocabulary has it (as MiniCheck-Flan-T5 reads its output), else against "0"; else yes/no."""
        vocab = tokenizer.get_vocab()
        for positive, negative in POSITIVE_NEGATIVE:
            pos = tokenizer(positive, add_special_tokens=False)["input_ids"]
            neg = (
                [vocab[WORD_BOUNDARY]]
                if positive == "1" and WORD_BOUNDARY in vocab
                else tokenizer(negative, add_special_tokens=False)["input_ids"]
            )
            if pos and neg and pos[-1] != neg[-1] and tokenizer.unk_token_id not in (pos[-1], neg[-1]):
                return pos[-1], neg[-1]
        raise ValueError("the tokenizer has no distinct tokens for 1/0 or yes/no")

    @staticmethod
    def separator(tokenizer: Any) -> str:
        return tokenizer.eos_token or tokenizer.sep_token or " "

    def judge(self, checker: LoadedChecker, claims: list[Claim], context: Context) -> list[Verdict]:
        import torch

        yes, no = self.answer_tokens(checker.tokenizer)
        model = checker.model
        start = model.config.decoder_start_token_id
        if start is None:
            start = model.config.pad_token_id or 0
        pairs = self.pairs(checker, claims, context)
        probs: list[float] = []
        for batch in self.batches(pairs):
            separator = self.separator(checker.tokenizer)
            texts = [
                self.template.format(premise=context.text[s:e], separator=separator, claim=claims[i].text)
                for i, s, e in batch
            ]
            enc = checker.tokenizer(
                texts, truncation=True, max_length=checker.max_length, padding=True, return_tensors="pt"
            ).to(checker.device)
            decoder = torch.full((len(batch), 1), int(start), dtype=torch.long, device=checker.device)
            with torch.no_grad():
                logits = model(**enc, decoder_input_ids=decoder).logits[:, 0, :].float()
            probs += [float(p) for p in torch.softmax(logits[:, [yes, no]], dim=-1)[:, 0]]
        verdicts = []
        for i, claim in enumerate(claims):
            mine = [(p, s, e) for (j, s, e), p in zip(pairs, probs) if j == i]
            if not mine:
                verdicts.append(Verdict.unscored(claim, _EMPTY_CONTEXT))
                continue
            p, s, e = max(mine)
            supported = p >= checker.threshold
            verdicts.append(
                Verdict(
                    claim=claim,
                    label="supported" if supported else "unsupported",
                    score=round(p, 6),
                    support_probability=round(p, 6),
                    reason=f"{checker.name}: P(yes) {p:.2f} ({_windows_note(len(mine), checker.threshold)})",
                    evidence=[
                        Evidence(
                            text=context.text[s:e],
                            span=_source_span(context, s, e),
                            relation="supports" if supported else "related",
                        )
                    ],
                )
            )
        return verdicts


@register_stage("tagger", "verifier", argument="MODEL", argument_option="checkpoint")
class TokenTaggerVerifier(EncoderVerifier):
    """Token-classification span tagger (LettuceDetect style): hallucinated claim tokens become target spans."""

    kind = "tagger"

    def judge(self, checker: LoadedChecker, claims: list[Claim], context: Context) -> list[Verdict]:
        import torch

        flagged_column, _, _ = self.output_column(checker, _HALLUCINATION_WORDS, "marks a hallucinated token")
        pairs = self.pairs(checker, claims, context)
        per_pair: list[dict[tuple[int, int], float]] = []  # claim-token offsets -> P(hallucinated)
        for batch in self.batches(pairs):
            enc = self.tokenize(checker, claims, context, batch, return_offsets_mapping=True)
            offsets = enc.pop("offset_mapping")
            sequence_ids = [enc.sequence_ids(b) for b in range(len(batch))]
            with torch.no_grad():
                soft = torch.softmax(checker.model(**enc.to(checker.device)).logits.float(), dim=-1)[
                    ..., flagged_column
                ]
            for b in range(len(batch)):
                per_pair.append(
                    {
                        (int(offsets[b, t, 0]), int(offsets[b, t, 1])): float(soft[b, t])
                        for t, seq in enumerate(sequence_ids[b])
                        if seq == 1 and offsets[b, t, 1] > offsets[b, t, 0]
                    }
                )
        verdicts = []
        for i, claim in enumerate(claims):
            mine = [(probs, s, e) for (j, s, e), probs in zip(pairs, per_pair) if j == i]
            if not mine or not mine[0][0]:
                verdicts.append(Verdict.unscored(claim, "nothing to tag: empty context or claim"))
                continue
            # a token is hallucinated only if it is against every window (the max over windows of support)
            lowest = {tok: min(p[0].get(tok, 1.0) for p in mine) for tok in mine[0][0]}
            best_probs, s, e = min(mine, key=lambda m: max(m[0].values()))
            flagged = sorted(tok for tok, p in lowest.items() if p >= checker.threshold)
            local = _merge_tokens(claim.text, flagged)
            worst = max(lowest.values())
            evidence = [
                Evidence(
                    text=context.text[s:e],
                    span=_source_span(context, s, e),
                    relation="related" if flagged else "supports",
                )
            ]
            if flagged:
                words = ", ".join(f'"{sp.of(claim.text)}"' for sp in local)
                verdicts.append(
                    Verdict(
                        claim=claim,
                        label="unsupported",
                        score=round(1 - worst, 6),
                        support_probability=round(1 - worst, 6),
                        reason=f"{checker.name}: tokens tagged hallucinated: {words}",
                        evidence=evidence,
                        target_spans=target_spans(claim, None, local),
                    )
                )
            else:
                verdicts.append(
                    Verdict(
                        claim=claim,
                        label="supported",
                        score=round(1 - worst, 6),
                        support_probability=round(1 - worst, 6),
                        evidence=evidence,
                        reason=f"{checker.name}: no token tagged hallucinated (highest P {worst:.2f})",
                    )
                )
        return verdicts


def _merge_tokens(text: str, offsets: Sequence[tuple[int, int]]) -> list[Span]:
    """Flagged token offsets as spans, neighbours joined when only whitespace lies between them."""
    spans: list[Span] = []
    for start, end in offsets:
        if spans and not text[spans[-1].end : start].strip():
            spans[-1] = Span(start=spans[-1].start, end=max(end, spans[-1].end))
        else:
            spans.append(Span(start=start, end=end))
    return spans


@register_stage("encoder", "verifier", argument="PATH", argument_option="checkpoint")
class TrainedVerifier(NLIVerifier):
    """A `halluscope train-verifier` folder (or any sequence classifier): its calibrated threshold is used."""

    kind = "nli"


@register_stage("encoder", "gate", argument="PATH", argument_option="checkpoint")
class EncoderGate:
    """A sequence-classification checker as the cascade's gate: settles a claim when P(supported) is at least
    ``high`` (supported) or at most ``low`` (unsupported); the rest go on to the verifier."""

    uses_llm: ClassVar[bool] = False

    class Options(StageOptions):
        checkpoint: str = Field(min_length=1)
        """A `halluscope train-verifier` folder or any sequence classifier (also given after a colon: encoder:PATH)."""

        low: float = Field(default=0.1, ge=0.0, le=1.0)
        """Settle unsupported at or below this P(supported)."""

        high: float = Field(default=0.9, ge=0.0, le=1.0)
        """Settle supported at or above this P(supported)."""

    def __init__(self, model: Any, options: EncoderGate.Options):
        self.verifier = TrainedVerifier(None, TrainedVerifier.Options(checkpoint=options.checkpoint))
        self.model_id = options.checkpoint
        self.low, self.high = options.low, options.high

    async def __call__(self, claims: Sequence[Claim], source: str, target: str | None = None) -> list[GateDecision]:
        verdicts = await self.verifier(claims, Context(text=source, kind="source"), source)
        out = []
        for claim, verdict in zip(claims, verdicts):
            p = verdict.score
            if verdict.label == "unscored" or p is None:
                outcome, reason = "uncertain", f"Uncertain: {verdict.reason}"
            elif p >= self.high:
                outcome, reason = "supported", f"{verdict.reason}; at least {self.high:.2f}, settled"
            elif p <= self.low:
                outcome, reason = "unsupported", f"{verdict.reason}; at most {self.low:.2f}, settled"
            else:
                outcome, reason = (
                    "uncertain",
                    f"Uncertain: {verdict.reason}; between {self.low:.2f} and {self.high:.2f}",
                )
            out.append(
                GateDecision(
                    claim=claim,
                    outcome=outcome,  # type: ignore[arg-type]
                    score=p if p is not None else 0.0,
                    reason=reason,
                    evidence=verdict.evidence,
                    target_spans=list(claim.target_spans),
                    signals={"p_supported": p},
                )
            )
        return out
