"""Every Python block of docs/integrations.md runs as written (each in a fresh interpreter)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
NEEDS = {
    "opentelemetry.sdk": "opentelemetry-sdk",
    "langchain_core": "langchain-core",
    "llama_index.core": "llama-index-core",
}


def test_doc_has_one_block_per_integration():
    assert len(BLOCKS) == 5


@pytest.mark.parametrize("code", BLOCKS, ids=["otel", "langchain", "llamaindex", "langchain-guard", "llamaindex-guard"])
def test_doc_block_runs(code, tmp_path):
    for module, package in NEEDS.items():
        if module.split(".")[0] in code and importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {package}")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "XDG_CACHE_HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip()
