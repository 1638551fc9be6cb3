"""The encoder checkers' models (no LLM): each loaded once per process with ``transformers`` (the ``encoders``
extra), the output column that means entailment (or a hallucinated token) read from the model config, and a long
context cut into windows of whole sentences that fit next to a claim. The verifier stages that use them are in
:mod:`halluscope.methods.encoders`."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluscope.text import split_sentences

SETTINGS_FILE = "halluscope_verifier.json"  # written next to a trained checker by train-verifier: {"threshold": ...}

MAX_INPUT_TOKENS = 4096  # upper bound when neither the tokenizer nor the config states a usable limit

_NEGATED = ("not", "non", "in", "un")


class EncoderUnavailable(RuntimeError):
    """The checker model could not be loaded (not installed, offline, missing, or not that kind of model)."""


@dataclass
class LoadedChecker:
    name: str
    kind: str
    tokenizer: Any
    model: Any
    device: str
    max_length: int
    threshold: float = 0.5
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Held for every use of ``tokenizer`` and ``model``: a fast tokenizer sets padding and truncation on its
    shared Rust backend per call, so two threads judging at once can pad each other's batches wrongly."""


_LOADED: OrderedDict[tuple[str, str], LoadedChecker] = OrderedDict()
"""The checkers loaded in this process, least recently used first (at most :data:`MAX_LOADED_CHECKERS`)."""
_LOAD_LOCK = threading.Lock()
MAX_LOADED_CHECKERS = 4
"""Checkers kept loaded; loading one more evicts the least recently used (its memory is freed once no stage of a
cached method instance still holds it), as the service evicts method instances."""
_AUTO_CLASSES = {
    "nli": "AutoModelForSequenceClassification",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "tagger": "AutoModelForTokenClassification",
}


def load_checker(kind: str, model_id: str) -> LoadedChecker:
    """The tokenizer and model of ``model_id`` for a checker of ``kind``, loaded once per process."""
    key = (kind, model_id)
    with _LOAD_LOCK:
        if key in _LOADED:
            _LOADED.move_to_end(key)
            return _LOADED[key]
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise EncoderUnavailable(
                f"the {kind} checker needs torch and transformers: pip install 'halluscope[encoders]'"
            ) from exc
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        except ImportError:  # pragma: no cover
            pass
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(model_id)
            model = getattr(transformers, _AUTO_CLASSES[kind]).from_pretrained(model_id)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EncoderUnavailable(
                f"could not load the {kind} checker {model_id!r}: {first[:300]}. A Hugging Face id needs the Hub "
                "or its files in the local Hugging Face cache (HF_HUB_OFFLINE=1 reads only the cache); a local "
                "folder needs config.json, the weights and the tokenizer files"
            ) from exc
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(device).eval()
        limits = [
            n
            for n in (
                getattr(tokenizer, "model_max_length", None),
                getattr(model.config, "max_position_embeddings", None),
            )
            if isinstance(n, int) and n > 0
        ]
        max_length = min([*limits, MAX_INPUT_TOKENS])
        threshold = 0.5
        settings = Path(model_id) / SETTINGS_FILE
        if settings.is_file():
            threshold = float(json.loads(settings.read_text()).get("threshold", 0.5))
        _LOADED[key] = checker = LoadedChecker(model_id, kind, tokenizer, model, device, max_length, threshold)
        while len(_LOADED) > max(1, MAX_LOADED_CHECKERS):
            _LOADED.popitem(last=False)
        return checker


def model_labels(config: Any) -> tuple[dict[int, str], int]:
    """A checkpoint config's ``id2label`` (integer keys) and its number of output labels."""
    id2label = {int(k): v for k, v in (getattr(config, "id2label", None) or {}).items()}
    return id2label, int(getattr(config, "num_labels", len(id2label)))


def label_index(id2label: dict[int, str], words: Sequence[str]) -> int | None:
    """The column whose label names one of ``words`` (``ENTAILMENT``, ``supported``), skipping negated ones
    (``not_entailment``, ``inconsistent``)."""
    for index, label in sorted(id2label.items()):
        low = str(label).lower()
        if any(w in low for w in words) and not any(
            low.startswith(n) and not any(low.startswith(w) for w in words) for n in _NEGATED
        ):
            return int(index)
    return None


def label_column(id2label: dict[int, str], n_labels: int, words: Sequence[str]) -> int | None:
    """:func:`label_index`, or column 1 of a two-label head whose labels name none of ``words`` (MiniCheck:
    1 = supported; LettuceDetect: 1 = hallucinated token)."""
    column = label_index(id2label, words)
    if column is None and n_labels == 2:
        column = 1
    return column


def sentence_windows(tokenizer: Any, text: str, claim: str, max_length: int) -> list[tuple[int, int]]:
    """``text`` cut into runs of whole sentences that fit in one input next to ``claim`` (character ranges);
    one sentence too long for any window is a window of its own (the tokenizer truncates it)."""
    budget = max_length - len(tokenizer(claim, add_special_tokens=False)["input_ids"]) - 8
    sentences = split_sentences(text) or []
    if not sentences:
        return [(0, len(text))] if text.strip() else []
    windows: list[tuple[int, int]] = []
    start = end = None
    used = 0
    for sentence in sentences:
        size = len(tokenizer(sentence.text, add_special_tokens=False)["input_ids"])
        if start is not None and used + size > budget:
            windows.append((start, end))  # type: ignore[arg-type]
            start = None
        if start is None:
            start, used = sentence.span.start, 0
        end = sentence.span.end
        used += size
    windows.append((start, end))  # type: ignore[arg-type]
    return windows
