"""The 1.5B embedded model (Qwen2.5-Coder-1.5B-Instruct, the ``embedded-qwen`` extra) for real: assembled
from its 22 part packages into a temporary folder once per session, a handful of generated tokens per test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluscope.config import DEFAULT_METHOD, Config
from halluscope.llm import build_api, get_llm
from halluscope.llm.structured import generate_reply
from halluscope.methods.geval import GevalReply

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.embedded_large


def test_readme_quick_start_on_the_large_model(large_model_dir, tmp_path, monkeypatch) -> None:
    """``halluscope check`` with ``embedded`` alone picks the 1.5B model when it is installed."""
    from halluscope.cli.main import app

    monkeypatch.delenv("HALLUSCOPE_EMBEDDED_MODEL")  # conftest pins SmolLM2 for every other test
    env = {
        "HALLUSCOPE_MODEL_DIR": str(large_model_dir),
        "HALLUSCOPE_MAX_TOKENS": "40",
        "HALLUSCOPE_CACHE_PATH": str(tmp_path / "cache.sqlite"),
    }
    args = [
        "check",
        "--source",
        str(EXAMPLES / "source.txt"),
        "--target",
        str(EXAMPLES / "summary.txt"),
        "--model",
        "embedded",
        "--json",
    ]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code in (0, 1, 3), result.output
    report = json.loads(result.output)
    assert result.exit_code == (3 if report["score"] is None else 1 if report["label"] == "inconsistent" else 0)
    assert report["model"] == "embedded:qwen2.5-coder-1.5b" and report["method"] == DEFAULT_METHOD
    # the default method verdict first: one short reply per target sentence (3), and an explanation (with at most
    # one repair) per flagged sentence; each judged verdict carries the model's probability, each finding a confidence
    assert 3 <= report["usage"]["calls"] <= 9
    assert all(c["usage"]["completion_tokens"] <= 40 for c in report["calls"])
    for verdict in report["verdicts"]:
        assert verdict["label"] == "unscored" or verdict["support_probability"] is not None
    assert all(f["confidence"] is not None for f in report["findings"])
    if report["score"] is None:  # (a capped reply may be cut off: then the report is unscored, with its reason)
        assert report["unscored_reason"]


async def test_large_model_answers_a_reply_schema_unconstrained_first(large_model_dir, monkeypatch) -> None:
    monkeypatch.setenv("HALLUSCOPE_MODEL_DIR", str(large_model_dir))
    assert build_api(Config(model="embedded:qwen2.5-coder-1.5b", cache=False)).structured_output == "schema"
    llm = get_llm(Config(model="embedded:qwen2.5-coder-1.5b", cache=False, max_tokens=24, structured_output="plain"))
    assert llm.name == "embedded:qwen2.5-coder-1.5b" and llm.api.structured_output == "plain"
    messages = [
        {
            "role": "user",
            "content": "SOURCE: The ferry runs every 30 minutes.\nTEXT: The ferry runs "
            "every 30 minutes.\nRate the TEXT's consistency with the SOURCE from 1 to 5.\n"
            + GevalReply.format_instructions(),
        }
    ]
    step = await generate_reply(llm, messages, GevalReply, params=llm.params(max_tokens=24))
    assert len(step.calls) in (1, 2) and all(c.usage.completion_tokens <= 24 for c in step.calls)
    assert (step.value is None) == (step.error is not None)
    if step.value is not None:  # exactly what the model's last reply says (its 1-5 range is the reply type's)
        assert step.value == GevalReply.parse(step.raw)
