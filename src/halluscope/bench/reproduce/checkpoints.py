"""The public checkpoints behind the papers' encoder baselines (SummaC, MiniCheck), and where they are on this
machine.

A reproduce row that runs one of halluscope's encoder verifier stages (``nli:MODEL``, ``seq2seq:MODEL``)
declares the checkpoint it is meant for as a :class:`Checkpoint`. Before the row runs, :func:`locate` looks for
it without touching the network:

1. a folder the user names in ``HALLUSCOPE_REPRODUCE_MODELS`` (``KEY=FOLDER`` entries, comma-separated; KEY is the
   row id, e.g. ``summac_zs``, or the checkpoint's Hugging Face id);
2. the checkpoint's files in the local Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``): config and weights.

Found: the row runs with the stage pointed at that folder (the cache's snapshot folder, so loading needs no
network). Not found: every cell of the row says it cannot be computed, ``model not installed (<id>)``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "HALLUSCOPE_REPRODUCE_MODELS"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclass(frozen=True)
class Checkpoint:
    """A row's encoder checker: the adapter (``nli`` / ``seq2seq``) and the public Hugging Face id it is meant
    for; ``option`` is the method option the stage goes into."""

    adapter: str
    model: str
    option: str = "verifier"

    def stage(self, location: str | None = None) -> str:
        return f"{self.adapter}:{location or self.model}"


def not_installed(checkpoint: Checkpoint) -> str:
    return f"model not installed ({checkpoint.model}): put it in the Hugging Face cache or name its folder in {ENV_VAR}"


def user_folders(value: str | None = None) -> dict[str, str]:
    """``KEY=FOLDER`` entries of ``HALLUSCOPE_REPRODUCE_MODELS`` (or ``value``), comma-separated."""
    text = os.environ.get(ENV_VAR, "") if value is None else value
    out: dict[str, str] = {}
    for entry in text.split(","):
        key, sep, folder = entry.partition("=")
        if sep and key.strip() and folder.strip():
            out[key.strip()] = folder.strip()
    return out


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any((folder / name).is_file() for name in WEIGHT_FILES)


def _cached_folder(model_id: str) -> str | None:
    """The snapshot folder of ``model_id`` in the local Hugging Face cache, when its config and weights are there."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - comes with transformers
        return None
    try:
        config = try_to_load_from_cache(model_id, "config.json")
    except ValueError:  # not a valid repo id (e.g. a path)
        return None
    if not isinstance(config, str):
        return None
    folder = Path(config).parent
    return str(folder) if _is_model_folder(folder) else None


def locate(row_id: str, checkpoint: Checkpoint) -> tuple[str | None, str | None]:
    """(the folder to load, None) or (None, why the row cannot be computed). No network access."""
    named = user_folders()
    folder = named.get(row_id) or named.get(checkpoint.model)
    if folder is not None:
        path = Path(folder).expanduser()
        if _is_model_folder(path):
            return str(path), None
        return None, (
            f"model not installed ({checkpoint.model}): {ENV_VAR} names {folder}, which holds no "
            "config.json and weights"
        )
    cached = _cached_folder(checkpoint.model)
    if cached is not None:
        return cached, None
    return None, not_installed(checkpoint)
